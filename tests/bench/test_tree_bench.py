"""decode-bench end to end on the real SmolLM2 (fp32), two prompts and a few tokens.

Runs the whole job — cost table, calibration, HF autoregressive and prompt lookup, the three
tree policies, batch 1 and 2 — into a temporary folder, with its calibration files kept out
of the user's cache.
"""

from __future__ import annotations

import json
import math

import pytest

from spectool_serving.tree.calibrate import fit_g_star

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
    rows = [r for r in run["rows"] if r["batch"] == 1]
    assert [r["id"] for r in rows] == ["translation-1", "rag-3"]
    assert len({r["category"] for r in rows}) == 2  # one row per category: the geomean is over rows

    def rate(row, m):  # from the raw measurements, not the row's own tok_s
        return row["methods"][m]["tokens"] / row["methods"][m]["seconds"]

    def geomean(xs):
        return math.prod(xs) ** (1 / len(xs))

    for m in methods:
        assert b1["speedup_vs_ar"][m] == pytest.approx(geomean([rate(r, m) / rate(r, "ar") for r in rows]))
        # the speculation alone: against one-token decoding on the same forward, row by row
        assert b1["speedup_vs_engine_ar"][m] == pytest.approx(
            geomean([rate(r, m) / rate(r, "engine_ar") for r in rows])
        )
    # the decode phase: every method's time after engine_ar's prefill of the same prompt
    for r in rows:
        pre = r["methods"]["engine_ar"]["prefill_s"]
        assert 0 < pre < r["methods"]["engine_ar"]["seconds"]
        for m in ("engine_ar", "unispec", "cast", "both"):
            got = r["methods"][m]
            assert got["prefill_s"] == pre
            assert got["decode_s"] == pytest.approx(got["seconds"] - pre)
            assert got["decode_tok_s"] > got["tok_s"]  # the prefill no longer counts
    assert set(b1["decode_phase_vs_engine_ar"]) == {"engine_ar", "unispec", "cast", "both"}
    assert b1["decode_phase_vs_engine_ar"]["engine_ar"] == pytest.approx(1.0)
    for m in ("unispec", "cast", "both"):
        ratios = [r["methods"][m]["decode_tok_s"] / r["methods"]["engine_ar"]["decode_tok_s"] for r in rows]
        assert b1["decode_phase_vs_engine_ar"][m] == pytest.approx(geomean(ratios))
    # lossless: every method emits the reference's tokens, so also as many of them
    assert all(rate == 1.0 for rate in b1["identical_rate"].values()), b1["identical_rate"]
    for r in rows:
        assert {v["tokens"] for v in r["methods"].values()} == {r["methods"]["ar"]["tokens"]}, r["id"]
    best = max(("pl3", "pl10"), key=lambda m: b1["speedup_vs_ar"][m])
    assert b1["best_prompt_lookup"] == best
    assert set(run["summary"]["batch2"]["identical_rate"]) == {"ar", "engine_ar", "unispec", "cast", "both"}
    assert all(rate == 1.0 for rate in run["summary"]["batch2"]["identical_rate"].values())
    # τ: a step emits at most its accepted draft plus the model's own token, and the summary is
    # the rows' mean; on these copy-heavy prompts (a translation, a RAG answer) drafts get accepted
    for pol in ("unispec", "cast", "both"):
        taus = [r["methods"][pol]["tau"] for r in rows]
        assert b1["tau"][pol] == pytest.approx(sum(taus) / len(taus))
        assert all(1.0 <= t <= 1.0 + r["methods"][pol]["draft"] + 1e-9 for t, r in zip(taus, rows))
    assert max(r["methods"][pol]["tau"] for r in rows for pol in ("unispec", "cast", "both")) > 1.0
    # g* is what the stored calibration's own measurements call for
    cal = run["calibration"]
    assert run["g_star"] == cal["g_star"] == fit_g_star(cal["gs"], cal["s"], cal["tau"])[0]
    assert cal["gs"] and len(cal["gs"]) == len(cal["s"]) == len(cal["tau"])


def test_unknown_prompt_id_is_a_clear_error():
    from spectool_bench.decode._tree import load_prompts

    with pytest.raises(ValueError, match="unknown prompt id"):
        load_prompts(ids=["no-such-prompt"])
