"""The performance model against hand-computed values, and Lemma 1 as property tests."""

import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from spectool import ConfigError
from spectool.model import (
    EngineWorkload,
    client_speedup,
    client_time_speculative,
    client_time_standard,
    engine_times,
    max_speedup,
    required_hit_rate,
    speedup_upper_bound,
)


def test_client_hand_computed():
    # G=2, g=0.5, T=1, α=0.8: T_std = 3, T_spec = 0.8·max(2, 1.5) + 0.2·3 = 2.2
    assert client_time_standard(2, 1, turns=4) == pytest.approx(12)
    assert client_time_speculative(2, 0.5, 1, 0.8) == pytest.approx(2.2)
    assert client_time_speculative(2, 0.5, 1, 0.8, turns=10) == pytest.approx(22)
    assert client_speedup(2, 0.5, 1, 0.8) == pytest.approx(3 / 2.2)
    assert max_speedup(2, 0.5, 1) == pytest.approx(1.5)
    assert speedup_upper_bound(2, 0.5, 1) == pytest.approx(2 - 1 / 3.5)
    # tool-bound turn: g + T = 3.5 > G = 1 → S_max = 4 / 3.5
    assert max_speedup(1, 0.5, 3) == pytest.approx(4 / 3.5)
    assert client_speedup(1, 0.5, 3, 0.0) == pytest.approx(1.0)


def test_required_hit_rate_inverts_speedup():
    a = required_hit_rate(2, 0.5, 1, client_speedup(2, 0.5, 1, 0.6))
    assert a == pytest.approx(0.6)
    assert required_hit_rate(2, 0.5, 1, 1.6) is None  # above S_max = 1.5
    assert required_hit_rate(2, 0.5, 1, 0.9) == 0.0


def test_engine_hand_computed():
    w = EngineWorkload(
        prompt_tokens=100,
        reasoning_tokens=[10, 20],
        call_tokens=[5, 5],
        output_tokens=[50, 30],
        tool_times=[1.0, 2.0],
        overhead=0.1,
        prefill_s_per_token=0.001,
        decode_s_per_token=0.01,
    )
    e = engine_times(w, alpha=0.5)
    # vanilla: 2·2·0.1 + 0.001·(100 + 155) + 0.01·(30 + 10) + 3 = 4.055
    assert e.vanilla == pytest.approx(4.055)
    # cached: prefill once 0.001·(100 + 10 + 80) = 0.19 → 3.99
    assert e.cached == pytest.approx(3.99)
    # spec: 0.5·0.4 + 0.19 + 0.01·(0.5·2 + 30 + 0.5·10) + 0.5·3 = 2.25
    assert e.speculative == pytest.approx(2.25)
    assert e.parts["speculative"]["decode"] == pytest.approx(0.36)
    assert e.speedup_over_cached == pytest.approx(3.99 / 2.25)
    # α = 0: nothing is drafted, the engine costs what the prefix-cached engine costs
    e0 = engine_times(w, alpha=0.0)
    assert e0.speculative == pytest.approx(e0.cached)


@pytest.mark.parametrize(
    "call",
    [
        lambda: client_speedup(-1, 0, 1, 0.5),
        lambda: client_speedup(1, 0, 1, 1.5),
        lambda: client_speedup(0, 0, 0, 0.5),
        lambda: client_speedup(1, float("nan"), 1, 0.5),
        lambda: EngineWorkload(10, [1], [1, 2], [1], [1.0]),
        lambda: engine_times(EngineWorkload(10, [1], [1], [1], [1.0]), alpha=-0.1),
    ],
)
def test_bad_input_is_a_config_error(call):
    with pytest.raises(ConfigError):
        call()


times = st.floats(min_value=1e-3, max_value=100.0, allow_nan=False)
alphas = st.floats(min_value=0.0, max_value=1.0)


@settings(max_examples=300, deadline=None)
@given(G=times, T=times, gfrac=st.floats(min_value=1e-3, max_value=0.999), a1=alphas, a2=alphas)
def test_lemma1_speedup_increases_with_alpha(G, T, gfrac, a1, a2):
    g = gfrac * G  # the lemma's setting: the drafter is faster than the main model
    lo, hi = sorted((a1, a2))
    assert client_speedup(G, g, T, lo) <= client_speedup(G, g, T, hi) * (1 + 1e-12)


@settings(max_examples=300, deadline=None)
@given(G=times, T=times, g=times, a=alphas)
def test_lemma1_speedup_at_most_smax(G, T, g, a):
    assume(g < G)
    assert client_speedup(G, g, T, a) <= max_speedup(G, g, T) * (1 + 1e-12)


@settings(max_examples=300, deadline=None)
@given(G=times, T=times, g=times)
def test_lemma1_smax_below_two(G, T, g):
    s_max, bound = max_speedup(G, g, T), speedup_upper_bound(G, g, T)
    assert s_max <= bound * (1 + 1e-12)
    assert bound < 2.0
    # the bound is tight where the lemma says the best case is: T = G − g
    if G > g:
        assert math.isclose(max_speedup(G, g, G - g), speedup_upper_bound(G, g, G - g), rel_tol=1e-9)


def test_cli_calculator_json_and_figure(tmp_path, capsys):
    import json

    from spectool.cli import main

    assert main(["model", "client", "--G", "2", "--g", "0.5", "--T", "1", "--alpha", "0.8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["speedup"] == pytest.approx(3 / 2.2)
    assert out["time_saved_pct"] == pytest.approx(100 * 0.8 / 3)
    assert main(["model", "engine", "--turns", "2", "--alpha", "1.0", "--json"]) == 0
    eng = json.loads(capsys.readouterr().out)
    assert eng["speculative_s"] < eng["cached_s"] < eng["vanilla_s"]
    assert main(["model", "client", "--G", "1", "--g", "0", "--T", "1", "--alpha", "2"]) == 1
    assert "alpha" in capsys.readouterr().err
    png = tmp_path / "fig3.png"
    assert main(["model", "figure", "--out", str(png)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_performance_model_doc_examples_run():
    import pathlib
    import re

    doc = pathlib.Path(__file__).resolve().parents[2] / "docs" / "performance-model.md"
    blocks = re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.S)
    assert len(blocks) >= 2
    for block in blocks:
        exec(compile(block, str(doc), "exec"), {})
