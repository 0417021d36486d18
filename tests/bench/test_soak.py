"""``spectool soak`` end to end, tiny: two agents on the real embedded engine, a drafter that
misbehaves, dropped streams and one server restart; nothing may be lost or changed.

Behaviour, not timing: the assertions are the report's loss, leak and 5xx fields and that each
fault kind was really injected (a soak that injected nothing would prove nothing).
"""

import json

import pytest

from spectool.cli import main

pytestmark = pytest.mark.model


@pytest.mark.timeout(600)
def test_a_tiny_soak_loses_and_changes_nothing(tmp_path, capsys):
    out = tmp_path / "soak"
    rc = main(
        [
            "soak",
            "--agents",
            "3",
            "--tasks-per-agent",
            "2",
            "--restart-after",
            "4",
            "--disconnect-every",
            "1",
            "--settle",
            "2",
            "--passes",
            "2",
            "--no-plot",
            "--out",
            str(out),
        ]
    )
    report = json.loads((out / "results.json").read_text())
    assert rc == 0, report
    assert report["lost_transcripts"] == 0 and report["changed_transcripts"] == 0
    assert report["server_errors_5xx"] == 0
    assert report["asyncio_tasks_left"] == 0 and report["threads_left"] == 0, report["threads_left_names"]
    faults = report["faults"]
    assert faults["restarts"] == 2 and faults["disconnects"] >= 2  # one restart per pass
    assert faults["drafter_raised"] + faults["drafter_hung"] + faults["drafter_garbage"] >= 1
    assert [(p["lost"], p["changed"]) for p in report["passes"]] == [(0, 0), (0, 0)]
    assert report["model_requests"] >= 6 and report["tasks"] == 6
    assert report["rss_last_vs_first_pass_pct"] is not None and len(report["reference_rss_quarters_mb"]) == 4
    assert "transcripts lost / changed" in capsys.readouterr().out


def test_a_lost_agent_is_reported_by_the_errors_inside_its_task_group():
    from spectool_bench.soak._cli import _describe

    group = ExceptionGroup("unhandled errors in a TaskGroup", [ValueError("bad args"), KeyError("x")])
    assert _describe(group) == "ValueError: bad args; KeyError: 'x'"


def test_rss_is_compared_like_with_like():
    from spectool_bench.soak._report import growth, quarters, rss_comparison

    # a pass whose batch grows then drains: first → last quarter reads the workload's shape
    shape = [(t, 1000.0 + (300.0 if 4 <= t < 12 else 0.0) + (100.0 if t >= 12 else 0.0)) for t in range(16)]
    assert quarters(shape) == [1000.0, 1300.0, 1300.0, 1100.0] and growth(shape) == 10.0
    same = {"rss_quarters_mb": quarters(shape)}
    leaked = {"rss_quarters_mb": [q * 1.2 for q in quarters(shape)]}
    out = rss_comparison(shape, [same, same])
    assert out["reference_rss_growth_pct"] == 10.0 and out["rss_last_vs_first_pass_pct"] == 0.0
    assert rss_comparison(shape, [same, leaked])["rss_last_vs_first_pass_pct"] == 20.0
    assert "rss_last_vs_first_pass_pct" not in rss_comparison(shape, [same])
    # four passes of the same shape: the run's first and last quarters are whole passes
    run = [v for _ in range(4) for _, v in shape]
    assert rss_comparison(shape, [same] * 4, run)["run_rss_growth_pct"] == 0.0
    grown = [v * (1 + 0.05 * k) for k in range(4) for _, v in shape]
    assert rss_comparison(shape, [same] * 4, grown)["run_rss_growth_pct"] == 15.0
