"""Latency injection, replay model, oracle drafter, and a tiny paired harness run (CLI included).

The main model here is the replay model (BFCL ground truth with a token-rate clock) and the
drafter the oracle: both labelled, both deterministic, so the figures checked are the harness's.
"""

import json

import anyio
import pytest
from openai import AsyncOpenAI

from spectool import ConfigError, DraftRequest, ToolCall
from spectool.cli import main
from spectool_bench.bfcl._tasks import load_tasks
from spectool_bench.harness._agents import Setup, assign, run_agents
from spectool_bench.harness._metrics import predicted_speedup, run_row
from spectool_bench.harness._oracle import OracleDrafter
from spectool_bench.harness._replay import ReplayModel, TokenRates, next_step_call
from spectool_bench.workloads._latency import Latency
from tests.bench.helpers import REPLAY_CLOCK, REQUIRED, run_bench


def test_latency_is_normal_and_paired():
    lat = Latency(0.5, cv=0.2, seed=1)
    draws = [lat.draw("t", f"k{i}") for i in range(2000)]
    assert lat.draw("t", "k7") == draws[7]  # same call, same draw: paired runs agree
    mean = sum(draws) / len(draws)
    sd = (sum((d - mean) ** 2 for d in draws) / len(draws)) ** 0.5
    assert 0.48 < mean < 0.52 and 0.08 < sd < 0.12
    assert Latency(0.5, seed=2).draw("t", "k7") != draws[7]
    assert Latency(0.0).draw("t", "k") == 0.0
    with pytest.raises(ConfigError):
        Latency(-1.0)


def test_replay_model_walks_the_ground_truth_with_token_rate_time():
    task = load_tasks("multi_turn_base", limit=1)[0]
    rates = TokenRates(prefill_tok_s=1000.0, decode_tok_s=10.0, reasoning_tokens=5, overhead_s=0.1)
    model = ReplayModel([task], rates)
    messages = list(task.turns[0])
    step = model.step(messages)
    first = task.ground_truth[0][0]
    call = step.message["tool_calls"][0]["function"]
    assert (call["name"], json.loads(call["arguments"])) == (first.name, dict(first.arguments))
    assert step.seconds == pytest.approx(0.1 + step.prompt_tokens / 1000 + (5 + step.completion_tokens) / 10)
    # after the turn's calls the model answers in text, then the next turn starts
    n = len(task.ground_truth[0])
    messages += [{"role": "assistant", "content": "x"}] * n
    assert isinstance(next_step_call(task, messages), str)
    messages += [{"role": "assistant", "content": "done"}]
    assert next_step_call(task, messages) == task.ground_truth[1][0]
    with pytest.raises(ConfigError):
        model.step([{"role": "user", "content": "unknown task"}])


def test_oracle_hits_with_probability_alpha_and_says_so():
    tasks = load_tasks("simple_python", limit=200)
    oracle = OracleDrafter(tasks, alpha=0.7, delay=0.0, seed=3)
    assert "oracle" in oracle.label and "0.7" in oracle.label

    async def drafts():
        return [await oracle.propose(DraftRequest(messages=list(t.turns[0]), tools=t.tools)) for t in tasks]

    proposals = anyio.run(drafts)
    hits = sum(p == [t.ground_truth[0][0]] for p, t in zip(proposals, tasks))
    assert 0.6 < hits / len(tasks) < 0.8
    wrong = [p for p, t in zip(proposals, tasks) if p != [t.ground_truth[0][0]]]
    assert all(len(p) == 1 and isinstance(p[0], ToolCall) for p in wrong)  # misses propose a wrong call


def test_tiny_paired_run_matches_the_model():
    tasks = load_tasks("simple_python", limit=6)
    replay = ReplayModel(tasks, TokenRates(prefill_tok_s=20000.0, decode_tok_s=200.0, overhead_s=0.05))

    def client():
        return AsyncOpenAI(api_key="x", base_url="http://replay.local/v1", http_client=replay.http_client())

    lat = Latency(0.12, cv=0.05)
    assignment = assign(tasks, agents=2, per_agent=3)

    async def both():
        base = await run_agents(assignment, Setup(make_client=client, latency=lat))
        spec = await run_agents(
            assignment,
            Setup(make_client=client, latency=lat, drafter=lambda: OracleDrafter(tasks, 1.0, 0.01)),
        )
        return base, spec

    base, spec = anyio.run(both)
    assert [b.calls for b in base] == [3, 3] and all(s.hit_rate == 1.0 for s in spec)
    row = run_row(
        {"config": "client", "agents": 2, "samples": 1, "drafter": "oracle", "tool_latency_mean": 0.12},
        base,
        spec,
    )
    assert REQUIRED <= set(row)
    assert row["same_transcripts"] is True  # speculation changed nothing the agent saw
    assert row["wasted_tool_runs"] == 0
    assert row["time_saved_pct"] > 10  # tool time ≈ model time: most of it hides
    assert row["measured_speedup"] / row["predicted_speedup"] > 0.9
    assert predicted_speedup(base[0], 0.0, 0.01) == pytest.approx(1.0)


def test_cli_tiny_run_writes_results_and_plots(tmp_path, capsys):
    tiny = "--validate --agents 2 --tasks-per-agent 2 --latencies 0.1 --alphas 0.5,1.0 --oracle-delay 0.01"
    printed, results = run_bench(tmp_path, capsys, tiny, REPLAY_CLOCK)
    assert "oracle(α=1" in printed and "replay" in printed and "meas/pred" in printed
    assert results["main_model"].startswith("replay")
    runs = results["runs"]
    assert [r["config"] for r in runs] == ["baseline", "client", "client"]
    assert all(REQUIRED <= set(r) for r in runs)
    assert runs[2]["hit_rate"] == 1.0 and runs[2]["measured_speedup"] > 1.1
    for name in ("throughput_vs_hit_rate.png", "measured_vs_predicted.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
    assert not (tmp_path / "time_saved_vs_latency.png").exists()  # one latency: no curve to draw
    # engine mode posts to the main model's tool cache: the replay model has none
    assert main(["bench", "--main", "replay", "--configs", "engine", "--out", str(tmp_path)]) == 1


def test_aggregate_throughput_is_m_times_the_mean_per_agent_rate_and_is_plotted(tmp_path):
    from spectool_bench.report._results import aggregate_throughput, write_plots

    def run(config, m, tok_s):
        return {
            "config": config,
            "agents": m,
            "throughput_tok_s": tok_s,
            "samples": 1,
            "drafter": "history",
            "tool_latency_mean": 1.0,
            "time_saved_pct": 0.0,
            "hit_rate": 0.0,
            "predicted_speedup": 1.0,
            "measured_speedup": 1.0,
        }

    runs = [run("baseline", 1, 10.0), run("baseline", 8, 5.0), run("baseline", 8, 7.0), run("engine", 8, 4.0)]
    assert aggregate_throughput(runs) == {"baseline": {1: 10.0, 8: 48.0}, "engine": {8: 32.0}}
    paths = write_plots(runs, tmp_path)
    assert tmp_path / "throughput_vs_agents.png" in paths
    assert tmp_path / "throughput_vs_agents.png" not in write_plots(runs[:1], tmp_path / "one")


@pytest.mark.parametrize("backend", ["vllm", "torch"])
def test_a_main_model_with_a_prefix_cache_is_warmed_before_each_baseline(monkeypatch, backend):
    """On vLLM the configs after the baseline would meet a prefix cache the baseline filled:
    an untimed pass over the same tasks comes first (workload calls stood in, no server). That
    pass is the independent reference run ``same`` compares with, so every backend makes it."""
    import types

    from spectool_bench.harness import _sweep

    calls = []

    async def fake_run_agents(assignment, setup):
        calls.append((setup.mode, setup.on_step is None, len(assignment)))
        return []

    async def nothing(*a, **k):
        return None

    tasks = [types.SimpleNamespace(id=f"t{i}") for i in range(4)]
    monkeypatch.setattr(_sweep, "_select_tasks", lambda plan: tasks)
    monkeypatch.setattr(_sweep, "_make_client", lambda plan, replay, base_url: object)
    monkeypatch.setattr(_sweep, "_warm_up", lambda tasks: None)
    monkeypatch.setattr(_sweep, "_warm_main", nothing)
    monkeypatch.setattr(_sweep, "warm_drafters", nothing)
    monkeypatch.setattr(_sweep, "_expected_steps", lambda plan, tasks: 1)
    monkeypatch.setattr(_sweep, "expected_call_G", lambda tasks, rates: 1.0)
    monkeypatch.setattr(_sweep, "run_agents", fake_run_agents)
    monkeypatch.setattr(_sweep, "run_row", lambda meta, *a, **k: dict(meta))
    monkeypatch.setattr(_sweep, "drafter_arms", lambda plan, name, tasks, seed: [(object, name)])
    plan = _sweep.Plan(
        main="embedded",
        backend=backend,
        agents=(1, 2),
        latencies=(1.0,),
        samples=(1,),
        drafters=("history",),
        configs=("client",),
        timeline=False,
    )
    anyio.run(_sweep._run_plan, plan, False, "http://127.0.0.1:9/v1", None)
    # the untimed pass is the reference run of ``same`` (every backend has one), made first
    warm = [("client", True, 1), ("client", True, 2)]
    runs = [c for c in calls if not c[1]]
    assert [c for c in calls if c[1]] == warm
    assert len(runs) == 4  # baseline + client per M
    # each warm-up comes right before its M's baseline
    assert calls[0][1] and calls[3][1] and not calls[1][1] and not calls[2][1]


def test_engine_prediction_at_alpha_zero_is_exactly_no_speedup():
    """Eq. 6 with nothing answered in place is Eq. 4; the ratio of the two float sums must not
    read as a slowdown in its last bit (a CI run once got 0.9999999999999999)."""
    from spectool_bench.harness._agents import AgentResult
    from spectool_bench.harness._metrics import engine_prediction

    reqs = [  # a case whose float sums differ in the last bit
        {"prompt": 168, "completion": 9, "calls": 1, "G": 0.40405522059153737, "T": 0.49543508709194095},
        {"prompt": 330, "completion": 35, "calls": 1, "G": 0.7212743781782105, "T": 0.7887233511355132},
        {"prompt": 380, "completion": 6, "calls": 0, "G": 0.4, "T": 0},
    ]
    base = AgentResult(agent=0)
    base.requests = [{**r, "task": "t", "turn": 0} for r in reqs]
    phi, delta = 0.0015147843039200282, 0.04519926691509358
    assert engine_prediction(base, 0.0, phi, delta)["speedup"] == 1.0
    assert engine_prediction(base, 1.0, phi, delta)["speedup"] > 1.0
