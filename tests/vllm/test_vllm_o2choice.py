"""The O2 start-time choice on vLLM: the break-even rule (pure) and ``--o2 auto|on|off`` as
``--print-command`` shows it. No vLLM is started (the suite's guard fails any exec)."""

from __future__ import annotations

import math

import pytest

from spectool.cli import main as cli_main
from spectool_serving.vllm import (
    MEASURED_TAX,
    HitGain,
    O2Expectation,
    TaxPoint,
    break_even_hit_rate,
    choose_o2,
    parse_tax,
    ratio_at,
)

TAX = (TaxPoint(1, 0.96), TaxPoint(8, 0.93), TaxPoint(32, 0.83))


def test_a_hit_saves_the_steps_its_drafts_replace():
    # 18 tokens, 8 per step, all accepted: 2 verify steps instead of 18
    assert HitGain(call_tokens=18, draft_tokens=8, acceptance=1.0).steps_saved() == pytest.approx(16)
    # nothing accepted: every step still yields one token, nothing saved
    assert HitGain(call_tokens=18, draft_tokens=8, acceptance=0.0).steps_saved() == 0


def test_break_even_is_the_hit_rate_where_both_arms_take_equal_time():
    gain = HitGain(call_tokens=18, draft_tokens=8, acceptance=1.0)  # 16 steps saved
    h = break_even_hit_rate(0.9, 64, gain)
    assert h == pytest.approx(64 * 0.1 / 16)
    # at h: O2-on time (T - h*S) / ratio equals stock time T (in stock step units)
    assert (64 - h * gain.steps_saved()) / 0.9 == pytest.approx(64)
    # a costlier O2 or longer responses need more hits; a free O2 needs none
    assert break_even_hit_rate(0.8, 64, gain) > h < break_even_hit_rate(0.9, 256, gain)
    assert break_even_hit_rate(1.0, 64, gain) == 0.0
    assert break_even_hit_rate(0.9, 64, HitGain(acceptance=0.0)) == math.inf


def test_bad_inputs_are_refused_clearly():
    with pytest.raises(ValueError, match="ratio"):
        break_even_hit_rate(0.0, 64, HitGain())
    with pytest.raises(ValueError, match="response_tokens"):
        break_even_hit_rate(0.9, 0, HitGain())
    with pytest.raises(ValueError, match="streams"):
        ratio_at(0)
    with pytest.raises(ValueError, match="--o2 must be one of"):
        choose_o2("sometimes", O2Expectation(streams=1))
    for bad in ({"streams": 0}, {"streams": 1, "hit_rate": -0.1}, {"streams": 1, "response_tokens": 0}):
        with pytest.raises(ValueError, match="expected"):
            O2Expectation(**bad)  # type: ignore[arg-type]


def test_the_tax_between_measured_points_is_interpolated_and_clamped_outside():
    assert ratio_at(1, TAX) == 0.96 and ratio_at(8, TAX) == 0.93 and ratio_at(32, TAX) == 0.83
    assert ratio_at(16, TAX) == pytest.approx(0.88)  # halfway in log2 between 8 and 32
    assert 0.93 < ratio_at(4, TAX) < 0.96
    assert ratio_at(128, TAX) == 0.83 and ratio_at(1, TAX[1:]) == 0.93
    assert ratio_at(4, MEASURED_TAX) > 0  # the shipped table is usable


def test_parse_tax_reads_the_bench_pairs_and_rejects_anything_else():
    assert parse_tax("1:0.96, 32:0.83") == (TaxPoint(1, 0.96), TaxPoint(32, 0.83))
    for bad in ("", "1=0.9", "x:0.9", "1:abc", "0:0.9", "1:0", "1:0.9,"):
        with pytest.raises(ValueError, match="streams:ratio"):
            parse_tax(bad)


def test_auto_turns_o2_on_only_where_the_expected_hits_pay_for_it():
    gain = HitGain(call_tokens=18, draft_tokens=8, acceptance=1.0)
    few = O2Expectation(streams=32, hit_rate=0.3, response_tokens=64, gain=gain, tax=TAX)
    # at 32 streams O2 needs 64 * 0.17 / 16 = 0.68 hits per response: 0.3 is too few
    off = choose_o2("auto", few)
    assert not off.on and "0.68" in off.reason and "32 streams" in off.reason and "\n" not in off.reason
    # the same traffic at 1 stream (0.16 needed) and more hits at 32 streams: on
    assert choose_o2("auto", O2Expectation(1, 0.3, 64, gain, TAX)).on
    assert choose_o2("auto", O2Expectation(32, 0.7, 64, gain, TAX)).on
    # on/off are obeyed whatever the numbers say
    assert choose_o2("on", few).on and not choose_o2("off", O2Expectation(1, 5.0, 64, gain, TAX)).on


def _printed(capsys, *argv: str) -> tuple[list[str], str]:
    # --print-command before the words: after a "--" it would be one of vLLM's flags
    assert cli_main(["serve", "--backend", "vllm", "--print-command", *argv]) == 0
    out = capsys.readouterr()
    return out.out.split(), out.err


def test_o2_flag_reaches_the_vllm_command(capsys, tmp_path):
    on, _ = _printed(capsys, "--model", str(tmp_path), "--o2", "on")
    off, _ = _printed(capsys, "--model", str(tmp_path), "--o2", "off")
    assert "--speculative-config" in on and "--speculative-config" not in off
    # the plugins stay in both: O3 and the cache do not need O2
    assert "--worker-extension-cls" in on and "--worker-extension-cls" in off


def test_auto_decides_from_max_num_seqs_and_the_expected_hit_rate_and_says_why(capsys, tmp_path):
    base = ["--model", str(tmp_path), "--o2", "auto", "--o2-response-tokens", "64"]
    few, why = _printed(capsys, *base, "--o2-hit-rate", "0.05", "--max-num-seqs", "32")
    assert "--speculative-config" not in few
    assert "O2 off (--o2 auto): at 32 streams" in why and len(why.strip().splitlines()) == 1
    many, why = _printed(capsys, *base, "--o2-hit-rate", "2", "--max-num-seqs", "32")
    assert "--speculative-config" in many and "O2 on (--o2 auto)" in why
    # vLLM still gets its own flag; --o2-streams overrides it as the expected concurrency
    assert many[many.index("--max-num-seqs") + 1] == "32"
    _, why = _printed(capsys, *base, "--o2-hit-rate", "0.05", "--max-num-seqs", "32", "--o2-streams", "1")
    assert "at 1 streams" in why


def test_a_measured_tax_can_replace_the_shipped_one(capsys, tmp_path):
    base = ["--model", str(tmp_path), "--o2", "auto", "--o2-hit-rate", "0", "--o2-streams", "8"]
    free, why = _printed(capsys, *base, "--o2-tax", "1:1.0,32:1.0")
    assert "--speculative-config" in free and "costs 0 %" in why
    with pytest.raises(SystemExit):
        _printed(capsys, *base, "--o2-tax", "8=0.9")


def test_bad_expectations_on_the_command_line_are_clear_errors(capsys, tmp_path):
    for bad, says in (
        (["--o2-streams", "0"], "streams must be >= 1, got 0"),
        (["--o2-hit-rate", "-1"], "hit rate must be >= 0, got -1"),
        (["--max-num-seqs", "lots"], "--max-num-seqs must be a whole number, got 'lots'"),
    ):
        argv = ["serve", "--backend", "vllm", "--print-command", "--model", str(tmp_path), *bad]
        assert cli_main(argv) == 1
        assert says in capsys.readouterr().err


def test_no_o2_still_means_off(capsys, tmp_path):
    cmd, _ = _printed(capsys, "--model", str(tmp_path), "--no-tool-cache")
    assert "--speculative-config" not in cmd
