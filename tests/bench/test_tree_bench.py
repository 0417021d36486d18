"""decode-bench end to end on the real SmolLM2 (fp32), two prompts and a few tokens.

Runs the whole job — cost table, calibration, HF autoregressive and prompt lookup, the three
tree policies, batch 1 and 2 — into a temporary folder, with its calibration files kept out
of the user's cache.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.model


def test_decode_bench_writes_results_and_every_fp32_method_is_lossless(tmp_path, monkeypatch):
    from spectool_bench.decode import _tree as bench

    monkeypatch.setenv("SPECTOOL_TREE_CALIBRATION", str(tmp_path / "cal"))
    out = tmp_path / "out"
    bench.run_bench(
        out,
        dtypes=("float32",),
        batches=(1, 2),
        max_new_tokens=12,
        prompt_ids=["translation-1", "rag-3"],
        log=lambda m: None,
    )
    res = json.loads((out / "results.json").read_text())
    assert (out / "speedup_vs_draft.png").stat().st_size > 0
    assert any((tmp_path / "cal").glob("costs-*.json")), "the cost table is stored and reusable"
    run = res["dtypes"]["float32"]
    b1 = run["summary"]["batch1"]
    methods = {"ar", "engine_ar", "pl3", "pl10", "unispec", "cast", "both"}
    assert set(b1["speedup_vs_ar"]) == methods
    # the speculation alone: each policy against one-token decoding on the same forward
    for m in methods:
        assert b1["speedup_vs_engine_ar"][m] == pytest.approx(
            b1["speedup_vs_ar"][m] / b1["speedup_vs_ar"]["engine_ar"]
        )
    assert all(rate == 1.0 for rate in b1["identical_rate"].values()), b1["identical_rate"]
    assert b1["best_prompt_lookup"] in ("pl3", "pl10")
    assert set(run["summary"]["batch2"]["identical_rate"]) == {"ar", "engine_ar", "unispec", "cast", "both"}
    assert all(rate == 1.0 for rate in run["summary"]["batch2"]["identical_rate"].values())
    rows = [r for r in run["rows"] if r["batch"] == 1]
    assert [r["id"] for r in rows] == ["translation-1", "rag-3"]
    assert all(r["methods"]["both"]["tau"] >= 1.0 for r in rows)
    assert 1 <= run["g_star"] <= 64


def test_unknown_prompt_id_is_a_clear_error():
    from spectool_bench.decode._tree import load_prompts

    with pytest.raises(ValueError, match="unknown prompt id"):
        load_prompts(ids=["no-such-prompt"])
