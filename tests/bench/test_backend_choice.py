"""Choosing the main job's backend (spectool bench --backend) and the comparison's summaries: pure."""

from __future__ import annotations

import json
import sys

import pytest

from spectool_bench.backends import _choice as _backend
from spectool_bench.backends._choice import choose, machine_key, record_rates, recorded_rates, resolve_backend


def test_choose_needs_vllm_to_win_by_the_margin():
    assert choose({"torch": 10.0, "vllm": 20.0}) == "vllm"
    assert choose({"torch": 10.0, "vllm": 10.4}) == "torch"  # within 5 %: keep the in-process engine
    assert choose({"torch": 30.0, "vllm": 20.0}) == "torch"


def test_rates_round_trip_keyed_by_dtype(tmp_path):
    path = tmp_path / "backends.json"
    assert recorded_rates("float32", path) is None
    record_rates({"torch": 12.345, "vllm": 30.0}, "float32", source="test", path=path)
    entry = recorded_rates("float32", path)
    assert entry["rates"] == {"torch": 12.35, "vllm": 30.0} and entry["source"] == "test"
    assert recorded_rates("bfloat16", path) is None  # another dtype is another measurement
    assert machine_key("float32") != machine_key("bfloat16")
    record_rates({"torch": 1.0}, "bfloat16", source="test", path=path)  # one backend alone decides nothing
    assert recorded_rates("bfloat16", path) is None and recorded_rates("float32", path) is not None
    path.write_text("{not json")
    assert recorded_rates("float32", path) is None


def test_explicit_backend_is_taken_as_asked():
    assert resolve_backend("vllm", "float32", 1, say=lambda m: None)["backend"] == "vllm"
    assert resolve_backend("torch", "float32", 1, say=lambda m: None)["reason"] == "asked for"


def test_auto_without_vllm_falls_back_to_torch_and_says_why(monkeypatch):
    monkeypatch.setenv("SPECTOOL_VLLM_PYTHON", "/nonexistent/python")
    said = []
    out = resolve_backend("auto", "float32", 1, say=said.append)
    assert out["backend"] == "torch" and "vLLM unavailable" in out["reason"]
    assert said and "torch" in said[0]


def test_auto_uses_recorded_rates_without_probing(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECTOOL_CACHE", str(tmp_path))
    monkeypatch.setenv("SPECTOOL_VLLM_PYTHON", sys.executable)  # an interpreter exists; never started here
    monkeypatch.setattr(
        _backend, "probe", lambda *a, **k: pytest.fail("recorded rates must not be re-probed")
    )
    record_rates({"torch": 11.0, "vllm": 25.0}, "float32", source="compare")
    out = resolve_backend("auto", "float32", 1, say=lambda m: None)
    assert out["backend"] == "vllm" and out["rates"] == {"torch": 11.0, "vllm": 25.0}
    assert "11.0" in out["reason"] and "25.0" in out["reason"]
    record_rates({"torch": 30.0, "vllm": 25.0}, "float32", source="compare")
    assert resolve_backend("auto", "float32", 1, say=lambda m: None)["backend"] == "torch"


def test_auto_probes_once_then_reads_the_record(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECTOOL_CACHE", str(tmp_path))
    monkeypatch.setenv("SPECTOOL_VLLM_PYTHON", sys.executable)
    calls = []
    monkeypatch.setattr(
        _backend, "probe", lambda dtype, threads, say: calls.append(dtype) or {"torch": 9.0, "vllm": 8.0}
    )
    assert resolve_backend("auto", "bfloat16", 1, say=lambda m: None)["backend"] == "torch"
    assert resolve_backend("auto", "bfloat16", 1, say=lambda m: None)["source"] == "spectool bench probe"
    assert calls == ["bfloat16"]
    assert (
        json.loads((tmp_path / "backends.json").read_text())[machine_key("bfloat16")]["rates"]["vllm"] == 8.0
    )


def test_bench_cli_backend_and_dtype_reach_the_plan():
    import argparse

    from spectool_bench.harness._cli import add_arguments, build_plan

    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["--quick", "--dtype", "bfloat16", "--backend", "vllm"])
    assert args.backend == "vllm" and build_plan(args).dtype == "bfloat16"
    assert p.parse_args([]).backend == "auto" and build_plan(p.parse_args([])).dtype == "float32"


def _row(s, prefill, trips, hit=None):
    r = {"s": s, "prefill": prefill, "trips": trips}
    return r if hit is None else {**r, "hit": hit}


def test_comparison_summary_counts_savings_per_hit_only():
    from spectool_bench.backends._compare import summarize, table

    rows = {
        "baseline": [_row(4.0, 300, 2), _row(5.0, 300, 2)],
        "client": [_row(3.0, 300, 2), _row(3.5, 300, 2)],
        "engine": [_row(2.0, 150, 1, True), _row(4.5, 310, 2, False)],
    }
    s = summarize(rows)
    assert s["turn_s"] == {"baseline": 4.5, "client": 3.25, "engine": 3.25}
    assert s["o3_hits"] == 1 and s["turns"] == 2
    assert s["per_hit"] == {
        "prefill_saved_vs_baseline": 150,
        "prefill_saved_vs_client": 150,
        "round_trips_saved": 1,
    }
    assert round(s["saved_pct"]["client"], 1) == 27.8
    b = {**s, "decode_tok_s_1": 10.0, "decode_tok_s_8": 40.0, "o2": {"tool_accepted": 3, "tool_proposed": 4}}
    text = table({"backends": {"torch": b, "vllm": {**b, "per_hit": None}}})
    assert "torch" in text and "vllm" in text and "3/4" in text and "150" in text
    assert summarize({**rows, "engine": [_row(4.0, 300, 2, False)]})["per_hit"] is None


def test_backends_measure_reads_o2_counters_and_rejections_while_its_client_is_open(monkeypatch):
    """``measure`` against stand-ins for the workload calls (no server): the O2 figures come
    from the same open client as the turns (a read after the client closed failed once)."""
    from spectool_bench.backends import _compare as bm

    def open_only(fn):
        def wrapped(c, *a, **k):
            assert not c.is_closed
            return fn(c, *a, **k)

        return wrapped

    counts = iter([{"tool_proposed": 0, "tool_accepted": 0}, {"tool_proposed": 10, "tool_accepted": 9}])
    monkeypatch.setattr(bm, "decode_rate", open_only(lambda c, model, streams, tokens=128: 10.0 * streams))
    monkeypatch.setattr(
        bm, "turn", open_only(lambda c, mode, model, city, latency: {"s": 1.0, "prefill": 5, "trips": 1})
    )
    monkeypatch.setattr(bm, "o2_counts", open_only(lambda c: next(counts)))
    monkeypatch.setattr(bm, "o2_rejections", open_only(lambda c: [{"drafted": "x", "wrote": "y"}]))
    res = bm.measure("http://127.0.0.1:9", "m", turns=2, latency=0.0)
    assert res["o2"]["tool_proposed"] == 10 and res["o2"]["rate"] == 0.9
    assert res["o2"]["rejections"] == [{"drafted": "x", "wrote": "y"}]
    assert res["decode_tok_s_8"] == 80.0
