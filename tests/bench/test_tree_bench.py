"""decode-bench end to end through the serving engine, on a tiny random Llama (seconds).

Runs the whole job — cost table, calibration, HF autoregressive and prompt lookup, the three
tree policies, batch 1 and 2 — into a temporary folder, with its calibration files kept out
of the user's cache. The model is :func:`tests.tree_fixtures.looping_llama` over the embedded
tokenizer (so the shipped prompts and chat template are the real ones): it repeats itself,
so drafts are accepted and "lossless" is checked on steps that accept them.
"""

from __future__ import annotations

import json
import math

import pytest

from spectool_bench.decode._calibrate import fit_g_star
from spectool_serving.engine import Engine
from tests.tree_fixtures import embedded_tokenizer, lie_in_verification, looping_llama

# a budget: seconds on a quiet machine, a minute or two on a loaded one
pytestmark = pytest.mark.timeout(240)

PROMPTS = ["translation-1", "rag-3"]
N = 24  # new tokens: the tiny model starts repeating itself after a few


@pytest.fixture(scope="module")
def tiny():
    tok, _ = embedded_tokenizer()
    return looping_llama(tok, seed=3), tok


@pytest.fixture(scope="module")
def cal_dir(tmp_path_factory):
    """One calibration folder for the module: the cost table and g* are measured once."""
    return tmp_path_factory.mktemp("cal")


@pytest.fixture()
def bench(tiny, cal_dir, monkeypatch):
    """decode-bench's module with the tiny model loaded in place of SmolLM2."""
    import spectool.embedded
    from spectool_bench.decode import _tree
    from spectool_serving.tree import calibrate, cast

    monkeypatch.setattr(spectool.embedded, "load_causal_lm", lambda dtype="float32": tiny)
    monkeypatch.setenv("SPECTOOL_TREE_CALIBRATION", str(cal_dir))
    # a coarser cost table, timed twice per width rather than 7 times: the same code, a third
    # of its forwards (the table's own tests are in tests/serving/tree)
    measure = cast.measure_cost_table
    monkeypatch.setattr(calibrate, "COST_WIDTHS", [1, 2, 4, 8, 16, 32, 64])
    monkeypatch.setattr(cast, "measure_cost_table", lambda *a, reps=7, **k: measure(*a, reps=2, **k))
    return _tree


def _run(bench, out, **kw):
    # gate off: the gate decides by wall time, and a loaded machine may leave τ at 1
    bench.run_bench(out, dtypes=("float32",), max_new_tokens=N, log=lambda m: None, gate=False, **kw)
    return json.loads((out / "results.json").read_text())["dtypes"]["float32"]


def test_decode_bench_writes_results_and_every_fp32_method_is_lossless(bench, cal_dir, tmp_path):
    out = tmp_path / "out"
    run = _run(bench, out, batches=(1, 2), prompt_ids=PROMPTS)
    assert (out / "speedup_vs_draft.png").stat().st_size > 0
    assert any(cal_dir.glob("costs-*.json")), "the cost table is stored and reusable"
    b1 = run["summary"]["batch1"]
    methods = {"ar", "engine_ar", "pl3", "pl10", "unispec", "cast", "both"}
    assert set(b1["speedup_vs_ar"]) == methods
    rows = [r for r in run["rows"] if r["batch"] == 1]
    assert [r["id"] for r in rows] == PROMPTS
    assert len({r["category"] for r in rows}) == 2  # one row per category: the geomean is over rows

    def rate(row, m):  # from the raw measurements, not the row's own tok_s
        return row["methods"][m]["tokens"] / row["methods"][m]["seconds"]

    def geomean(xs):
        return math.prod(xs) ** (1 / len(xs))

    for m in methods:
        assert b1["speedup_vs_ar"][m] == pytest.approx(geomean([rate(r, m) / rate(r, "ar") for r in rows]))
        # the speculation alone: against one-token decoding on the same engine, row by row
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
            assert got["decode_s"] == pytest.approx(max(got["seconds"] - pre, 1e-9))
    assert b1["decode_phase_vs_engine_ar"]["engine_ar"] == pytest.approx(1.0)
    # lossless: every method emits the reference's tokens, so also as many of them
    assert all(rate == 1.0 for rate in b1["identical_rate"].values()), b1["identical_rate"]
    for r in rows:
        assert {v["tokens"] for v in r["methods"].values()} == {r["methods"]["ar"]["tokens"]}, r["id"]
    best = max(("pl3", "pl10"), key=lambda m: b1["speedup_vs_ar"][m])
    assert b1["best_prompt_lookup"] == best
    assert set(run["summary"]["batch2"]["identical_rate"]) == {"ar", "engine_ar", "unispec", "cast", "both"}
    assert all(rate == 1.0 for rate in run["summary"]["batch2"]["identical_rate"].values())
    # τ: a step emits at most its accepted draft plus the model's own token, and the summary is
    # the rows' mean; the tiny model repeats itself, so drafts get accepted
    for pol in ("unispec", "cast", "both"):
        taus = [r["methods"][pol]["tau"] for r in rows]
        assert b1["tau"][pol] == pytest.approx(sum(taus) / len(taus))
        assert all(1.0 <= t <= 1.0 + r["methods"][pol]["draft"] + 1e-9 for t, r in zip(taus, rows))
    assert max(r["methods"]["unispec"]["tau"] for r in rows) > 1.0
    # g* is what the stored calibration's own measurements call for
    cal = run["calibration"]
    assert run["g_star"] == cal["g_star"] == fit_g_star(cal["gs"], cal["s"], cal["tau"])[0]
    assert cal["gs"] and len(cal["gs"]) == len(cal["s"]) == len(cal["tau"])


def test_a_verifier_that_lies_shows_up_as_not_identical(bench, tmp_path, monkeypatch):
    """Negative control of the lossless check above: an engine whose verification vouches for
    every drafted child (logits pushed to the child's token at its parent) emits other tokens,
    and decode-bench's identical_rate says so for the tree policies, not for plain decoding."""
    lie_in_verification(monkeypatch)
    run = _run(bench, tmp_path / "out", batches=(1,), prompt_ids=PROMPTS[:1])
    rates = run["summary"]["batch1"]["identical_rate"]
    assert rates["engine_ar"] == 1.0 and rates["unispec"] < 1.0


def test_decode_bench_tau_is_the_engines_policy_tau(bench, tiny, tmp_path):
    """decode-bench reports the serving engine's own PolicyStats.tau: the same prompts through
    an engine built here (its runner, scheduler and policy, as a server builds them) give
    the same τ, prompt by prompt. Gate off: with it, τ would follow the machine's load."""
    from spectool_serving.requests import build_sequences  # noqa: F401 - the serving package loads
    from spectool_serving.runner import Runner
    from spectool_serving.sampling import SamplingParams
    from spectool_serving.sequence import Sequence
    from spectool_serving.toolcalls import detect_format
    from spectool_serving.tree import DecodingPolicy

    model, tok = tiny
    run = _run(bench, tmp_path / "out", batches=(1,), prompt_ids=PROMPTS)
    for row, item in zip(run["rows"], bench.load_prompts(ids=PROMPTS)):
        fmt = detect_format(tok.chat_template, "")
        policy = DecodingPolicy("unispec", model.config.vocab_size, gate=False)
        engine = Engine(Runner(model, "cpu"), tok, fmt, decoding=policy)
        ids = bench._ids(tok, item["messages"])
        seq = Sequence("r", "", ids, SamplingParams(0.0, 1.0, N), fmt, [], None, [], emit=lambda e: None)
        engine.add(seq)
        engine.run_until_idle()
        assert policy.stats.tau > 1.0  # drafts were accepted: the comparison is not of 1.0 with 1.0
        assert row["methods"]["unispec"]["tau"] == policy.stats.tau, row["id"]


def test_unknown_prompt_id_is_a_clear_error():
    from spectool_bench.decode._tree import load_prompts

    with pytest.raises(ValueError, match="unknown prompt id"):
        load_prompts(ids=["no-such-prompt"])
