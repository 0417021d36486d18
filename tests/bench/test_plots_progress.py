"""The bench plots (drawn or skipped, one legend entry per arm) and the progress bar's ETA."""

from __future__ import annotations

import io
import warnings

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("tqdm")

from spectool_bench.report._progress import Progress  # noqa: E402
from spectool_bench.report._results import (  # noqa: E402
    _pyplot,
    hit_rate_figure,
    latency_figure,
    predicted_figure,
    write_plots,
)


def run(config="client", drafter="history", samples=1, latency=1.0, hit=0.5):
    return {
        "config": config,
        "agents": 1,
        "throughput_tok_s": 10.0 + hit,
        "samples": samples,
        "drafter": drafter,
        "tool_latency_mean": latency,
        "time_saved_pct": 10 * hit,
        "hit_rate": hit,
        "predicted_speedup": 1.0 + hit,
        "measured_speedup": 1.0 + hit / 2,
    }


ONE_LATENCY = [
    run("baseline", "none", hit=0.0),
    run("client", "history", 1),
    run("client", "history", 3, hit=0.7),
    run("client", "oracle", 1, hit=1.0),
    run("engine", "history", 1, hit=0.6),
]


def test_latency_plot_is_skipped_with_one_latency_and_drawn_with_two(tmp_path):
    paths = write_plots(ONE_LATENCY, tmp_path / "one")
    assert tmp_path / "one" / "time_saved_vs_latency.png" not in paths
    assert not (tmp_path / "one" / "time_saved_vs_latency.png").exists()
    assert (tmp_path / "one" / "throughput_vs_hit_rate.png") in paths
    assert (tmp_path / "one" / "measured_vs_predicted.png") in paths
    two = [*ONE_LATENCY, run("client", "history", 1, latency=2.0)]
    paths = write_plots(two, tmp_path / "two")
    assert (tmp_path / "two" / "time_saved_vs_latency.png").read_bytes()[:4] == b"\x89PNG"
    plt = _pyplot()
    fig = latency_figure(two, plt)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert labels == ["client · history · λ=1 · M=1"]  # only the series with two latencies
    plt.close(fig)


def test_hit_rate_and_predicted_legends_have_one_entry_per_arm():
    plt = _pyplot()
    arms = ["client · history", "client · oracle", "engine · history"]
    fig = hit_rate_figure(ONE_LATENCY, plt, "a long title " * 12)
    ax = fig.axes[0]
    assert ax.get_legend_handles_labels()[1] == arms
    assert ax.get_legend() is not None
    assert sorted(t.get_text() for t in ax.texts) == ["λ=1", "λ=1", "λ=1", "λ=3"]
    assert all(len(line) <= 60 for line in ax.get_title().splitlines()[1:])  # wrapped, not cut
    plt.close(fig)
    fig = predicted_figure(ONE_LATENCY, plt)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert labels[:3] == arms and labels[3:] == ["measured = predicted", "0.95 × predicted"]
    plt.close(fig)


def test_no_legend_warning_when_nothing_is_labelled(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "No artists with labels found" would raise here
        write_plots([run("baseline", "none", hit=0.0)], tmp_path)


class FakeStderr(io.StringIO):
    """Stands in for a log file (not a TTY), so the bar writes whole lines we can read."""

    def isatty(self) -> bool:
        return False


def test_progress_reports_rate_and_eta_as_lines_in_a_log():
    out = FakeStderr()
    bar = Progress(4, stream=out, log_interval_s=0)
    bar.label = "client λ=1"
    for _ in range(2):
        bar.step()
    text = out.getvalue()
    bar.close()
    assert "\r" not in text  # log-friendly: lines, not in-place redraws
    last = text.splitlines()[-1]
    assert last.startswith("client λ=1:") and "2/4" in last
    assert "<" in last and "step/s" in last  # elapsed<ETA, rate


def test_progress_disabled_writes_nothing_but_counts():
    out = FakeStderr()
    bar = Progress(4, enabled=False, stream=out)
    bar.step()
    bar.close()
    assert out.getvalue() == "" and bar.done == 1


def test_drafters_eval_progress_goes_through_the_helper(monkeypatch):
    from spectool_bench.drafters._eval import _progress_printer

    out = FakeStderr()
    monkeypatch.setattr("sys.stderr", out)
    show = _progress_printer("history λ=1")
    for done in (1, 2, 3):
        show(done, 3)
    last = out.getvalue().splitlines()[-1]
    assert last.startswith("history λ=1:") and "3/3" in last and "task/s" in last
