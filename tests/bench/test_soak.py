"""``spectool soak`` end to end, tiny: two agents on the real embedded engine, a drafter that
misbehaves, dropped streams and one server restart; nothing may be lost or changed.

Behaviour, not timing: the assertions are the report's loss, leak and 5xx fields and that each
fault kind was really injected (a soak that injected nothing would prove nothing).
"""

import json

import pytest

from spectool.cli import main


@pytest.mark.model
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
    # RSS read once per pass, after its work: two passes give a series but no verdict (4 needed)
    ends = report["rss_end_of_pass_mb"]
    assert [p["rss_end_mb"] for p in report["passes"]] == ends and len(ends) == 2
    assert all(0 < end <= report["peak_rss_mb"] for end in ends)
    assert report["rss_leak"] is None and "at least 4" in report["rss_leak_note"]
    assert "transcripts lost / changed" in capsys.readouterr().out


def test_a_lost_agent_is_reported_by_the_errors_inside_its_task_group():
    from spectool_bench.soak._cli import _describe

    group = ExceptionGroup("unhandled errors in a TaskGroup", [ValueError("bad args"), KeyError("x")])
    assert _describe(group) == "ValueError: bad args; KeyError: 'x'"


def test_the_slope_is_least_squares_per_pass():
    from spectool_bench.soak._leak import slope

    assert slope([1000.0, 1050.0, 1100.0, 1150.0]) == pytest.approx(50.0)
    # a hand-computed fit: x̄ = 1.5, ȳ = 2233.1, Σ(x−x̄)(y−ȳ) = 644.7, Σ(x−x̄)² = 5
    assert slope([1970.1, 2214.4, 2414.8, 2333.1]) == pytest.approx(128.94, abs=0.01)
    assert slope([5.0]) == 0.0 and slope([]) == 0.0
    assert slope([2.0, 1.0, 0.0]) == pytest.approx(-1.0)


NOISE = [0.03, -0.03, 0.02, -0.02, 0.03, -0.03]  # ±3 % of the base, pass to pass


@pytest.mark.parametrize("passes", [4, 6])
def test_a_five_percent_leak_is_caught_through_noise_and_a_flat_series_passes(passes):
    from spectool_bench.soak._leak import judge

    base = 2000.0
    flat = [base * (1 + NOISE[k]) for k in range(passes)]
    leaking = [base * (1 + 0.05 * k + NOISE[k]) for k in range(passes)]
    assert judge(flat)["rss_leak"] is False
    verdict = judge(leaking)
    assert verdict["rss_leak"] is True and verdict["rss_slope_pct_per_pass"] > 3.0
    assert verdict["rss_end_of_pass_mb"] == [round(v, 1) for v in leaking]
    # the threshold is the knob: the same leak passes a limit above it
    assert judge(leaking, max_pct=10.0)["rss_leak"] is False
    # too few passes: a series, a slope, no verdict
    short = judge(leaking[:3])
    assert short["rss_leak"] is None and short["rss_slope_pct_per_pass"] > 0


_KEPT: list[bytes] = []


def test_the_pass_loop_sees_a_planted_leak_in_real_rss():
    """The real measurement (gc, malloc_trim, /proc RSS) after each pass of a fake workload
    (the embedded model is not needed to test the loop): a pass that keeps 5 % of the process's
    RSS is caught; the same work, freed, is not."""
    import anyio

    from spectool_bench.soak._leak import judge, rss_mb, run_passes

    start = rss_mb()
    if start <= 0:
        pytest.skip("no /proc/self/status here: RSS cannot be read")
    chunk = int(start * 0.05 * 1024 * 1024)

    async def leaky(k: int) -> int:
        _KEPT.append(b"\x01" * chunk)  # written, so resident
        await anyio.sleep(0)
        return k

    async def tidy(k: int) -> int:
        work = [b"\x01" * chunk for _ in range(3)]  # as much work, all of it let go
        await anyio.sleep(0)
        return len(work) + k

    try:
        done, ends = anyio.run(run_passes, 5, tidy)
        assert done == [3, 4, 5, 6, 7] and len(ends) == 5
        assert judge(ends)["rss_leak"] is False, ends
        done, ends = anyio.run(run_passes, 5, leaky)
        assert done == [0, 1, 2, 3, 4]
        verdict = judge(ends)
        assert verdict["rss_leak"] is True and verdict["rss_slope_pct_per_pass"] >= 3.0, ends
    finally:
        _KEPT.clear()


def test_the_soak_fails_on_a_leak_and_reports_the_series(monkeypatch, tmp_path, capsys):
    """``run`` with the passes faked (no model): a leak alone turns the exit status to 1."""
    import argparse

    from spectool_bench.soak import _cli

    def fake_report(leak: bool) -> dict:
        from spectool_bench.soak._leak import judge

        ends = [1000.0 * (1 + (0.05 if leak else 0.0) * k) for k in range(4)]
        report = {
            "agents": 2,
            "tasks": 4,
            "wall_s": 1.0,
            "main_model": "fake",
            "lost_transcripts": 0,
            "changed_transcripts": 0,
            "asyncio_tasks_left": 0,
            "peak_rss_mb": 1200.0,
            "server_errors_5xx": 0,
            "model_requests": 4,
            "request_retries": 0,
            "engine_resolved_calls": 0,
            "faults": {},
            "rss_series": [],
            "marks": [],
            "passes": [{"rss_end_mb": e} for e in ends],
            "reference_rss_end_mb": 990.0,
        }
        report.update(judge(ends))
        return report

    class FakeMain:  # stands in for EmbeddedMain: the model is not what this test is about
        def __init__(self, **kw):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    import spectool_bench.backends._embedded_main as embedded

    monkeypatch.setattr(embedded, "EmbeddedMain", FakeMain)
    parser = argparse.ArgumentParser()
    _cli.add_arguments(parser)
    for leak, expected in ((False, 0), (True, 1)):
        monkeypatch.setattr(_cli.anyio, "run", lambda *a, leak=leak: fake_report(leak))
        args = parser.parse_args(["--no-plot", "--out", str(tmp_path / str(leak))])
        assert args.passes == 4 and _cli.run(args) == expected
        printed = capsys.readouterr().out
        assert "RSS at the end of each pass (collected)" in printed
        assert ("LEAK" in printed) is leak
