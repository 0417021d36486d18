"""The benchmark on the real embedded main model: spectool's serving engine running SmolLM2.

One CLI run (one model load): one agent, one short single-turn BFCL task, two tool calls per
turn, baseline vs client-side vs engine-side (``mode="engine"``, posting to the engine's tool
cache). Checks results.json's fields, the engine model's columns, that the client and engine
runs' transcripts equal the baseline run's (digests across rows), and that the engine really
answered a call from its tool cache.
"""

import pytest

from tests.bench.helpers import REQUIRED, run_bench

ENGINE_FIELDS = {
    "engine_hit_rate",
    "predicted_engine_speedup",
    "eq4_base_s",
    "eq6_engine_s",
    "phi_s_per_token",
    "delta_s_per_token",
    "request_overhead_s",
    "engine_resolved_calls",
    "same_transcripts",
}


@pytest.mark.model
@pytest.mark.timeout(300)
def test_embedded_main_baseline_client_engine(tmp_path, capsys):
    printed, results = run_bench(
        tmp_path / "bench",
        capsys,
        "--main embedded --categories simple_python --task-ids simple_python_1 --agents 1",
        "--latencies 0.2 --drafters history --samples 1 --configs client,engine --max-steps 2",
        "--max-tokens 40 --tool-choice required --threads 1 --backend torch --no-plots",
    )
    assert "embedded" in printed and "α_eng" in printed
    assert results["main_model"].startswith("embedded")
    cal = results["engine_calibration"]
    assert 0 < cal["prefill_s_per_token"] < cal["decode_s_per_token"] < 5
    runs = results["runs"]
    assert [r["config"] for r in runs] == ["baseline", "client", "engine"]
    for r in runs:
        assert REQUIRED | ENGINE_FIELDS <= set(r), set(REQUIRED | ENGINE_FIELDS) - set(r)
        assert r["same_transcripts"] is True  # speculation never changes what the agent sees
        assert 1 <= r["calls"] <= 2 and r["steps"] == 2  # required: two calls, the step cap holds
        assert r["wall_spec_s"] > 0 and r["eq4_base_s"] > 0
    base, client, engine = runs
    # Eq. 6 with nothing answered in place is Eq. 4: the rows without engine hits predict no gain,
    # the engine row's α_eng is its resolved share of the calls and predicts a real one
    assert base["engine_hit_rate"] == client["engine_hit_rate"] == 0.0
    assert base["predicted_engine_speedup"] == pytest.approx(1.0, abs=1e-9)
    assert client["predicted_engine_speedup"] == pytest.approx(1.0, abs=1e-9)
    assert engine["engine_hit_rate"] == pytest.approx(engine["engine_resolved_calls"] / engine["calls"])
    assert engine["predicted_engine_speedup"] > 1.0 and engine["eq6_engine_s"] < engine["eq4_base_s"]
    # the same transcripts with and without speculation, compared across the three runs
    assert client["transcript_sha256"] == engine["transcript_sha256"] == base["transcript_sha256"]
    assert base["engine_resolved_calls"] == client["engine_resolved_calls"] == 0  # only engine mode posts
    # SmolLM2 repeats its first call at step 2 (greedy, tool_choice required); the history drafter
    # predicts the repeat, so the engine answers it in place from the posted output
    assert engine["engine_resolved_calls"] >= 1
    assert engine["predicted_speedup"] == engine["predicted_engine_speedup"]
    assert client["predicted_speedup"] >= 1.0 and engine["predicted_client_speedup"] >= 1.0
