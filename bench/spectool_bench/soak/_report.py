"""The soak's report: what was lost, left, leaked and injected, as a table, JSON fields and an
RSS-over-time plot (:mod:`._soak` runs the passes)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["growth", "pass_summary", "plot", "print_report", "quarters", "report", "rss_comparison"]


def growth(rss: list[tuple[float, float]]) -> float:
    if len(rss) < 8:
        return 0.0
    q = len(rss) // 4
    first = sum(v for _, v in rss[:q]) / q
    last = sum(v for _, v in rss[-q:]) / q
    return 100.0 * (last - first) / first if first else 0.0


def quarters(rss: list[tuple[float, float]]) -> list[float]:
    """Mean RSS (MB) of each quarter of a pass."""
    n = len(rss)
    if n < 4:
        return []
    return [round(sum(v for _, v in rss[q * n // 4 : (q + 1) * n // 4]) / (n // 4 or 1), 1) for q in range(4)]


def _worst_ratio_pct(now: list[float], then: list[float]) -> float | None:
    pairs = [(a, b) for a, b in zip(now, then) if b]
    return round(max(100.0 * (a - b) / b for a, b in pairs), 2) if pairs else None


def rss_comparison(
    ref_rss: list[tuple[float, float]], passes: list[dict[str, Any]], run_rss: Sequence[float] = ()
) -> dict[str, Any]:
    """RSS growth read apart from the workload's own shape.

    Within one pass RSS follows the batch: conversations grow and the agents' mix changes, so
    first → last quarter also measures the workload. Two comparisons hold it fixed: the same
    tasks without speculation (the reference pass, its own first → last quarter growth beside
    the soak's), and the last soak pass against the first, quarter by quarter (same tasks at the
    same phase; a leak shows there, the worst quarter is reported). With four or more passes the
    whole run's first and last quarters are whole passes over the same tasks, so first → last
    quarter of the run (``run_rss_growth_pct``) compares like with like as it stands."""
    out: dict[str, Any] = {
        "run_rss_growth_pct": round(growth(list(enumerate(run_rss))), 2) if run_rss else None,
        "reference_rss_growth_pct": round(growth(ref_rss), 2),
        "reference_rss_quarters_mb": quarters(ref_rss),
    }
    if len(passes) > 1:
        out["rss_last_vs_first_pass_pct"] = _worst_ratio_pct(
            passes[-1]["rss_quarters_mb"], passes[0]["rss_quarters_mb"]
        )
    return out


def pass_summary(
    lost: list[int], changed: list[int], statuses: Any, rss: list, wall: float
) -> dict[str, Any]:
    """One soak pass: what it lost or changed, its 5xx, its RSS growth and where RSS ended."""
    return {
        "lost": len(lost),
        "changed": len(changed),
        "server_errors_5xx": statuses.server_errors,
        "rss_growth_pct": round(growth(rss), 2),
        "rss_end_mb": round(rss[-1][1], 1) if rss else None,
        "rss_quarters_mb": quarters(rss),
        "wall_s": round(wall, 1),
    }


def report(
    args,
    reference,
    results,
    errors,
    lost,
    changed,
    tasks_left,
    statuses,
    ref_statuses,
    counts,
    rss,
    marks,
    wall,
    main,
) -> dict[str, Any]:
    engine = main.engine.counters()
    return {
        "agents": args.agents,
        "tasks": sum(len(r.transcript) for r in reference),
        "model_requests": sum(r.steps for r in results),
        "wall_s": round(wall, 1),
        "lost_transcripts": len(lost),
        "changed_transcripts": len(changed),
        "agent_errors": [e for e in errors if e][:5],
        "asyncio_tasks_left": len(tasks_left),
        "peak_rss_mb": round(max((v for _, v in rss), default=0.0), 1),
        "rss_growth_pct": round(growth(rss), 2),
        "server_errors_5xx": statuses.server_errors,
        "reference_server_errors_5xx": ref_statuses.server_errors,
        "responses": statuses.responses,
        "request_retries": sum(r.retries for r in results),
        "engine_resolved_calls": sum(r.engine_resolved for r in results),
        "engine_failed_requests": engine.get("failed_requests", 0),
        "engine_last_error": repr(main.engine.error) if main.engine.error is not None else None,
        "faults": counts.as_dict(),
        "rss_series": [[round(t, 2), round(v, 1)] for t, v in rss],
        "marks": marks,
        "process": "client and server in one process (embedded engine over localhost HTTP)",
        "main_model": f"embedded ({main.model_name}, spectool torch engine, CPU)",
        "drafter": "history λ=1 behind FaultyDrafter",
    }


def print_report(report: dict[str, Any]) -> None:
    rows = [
        ("transcripts lost / changed", f"{report['lost_transcripts']} / {report['changed_transcripts']}"),
        ("asyncio tasks / threads left", f"{report['asyncio_tasks_left']} / {report['threads_left']}"),
        ("peak RSS (client + server)", f"{report['peak_rss_mb']:.0f} MB"),
        ("RSS growth, first → last quarter (last pass)", f"{report['rss_growth_pct']:+.2f} %"),
        ("5xx responses", str(report["server_errors_5xx"])),
        ("model requests / retried", f"{report['model_requests']} / {report['request_retries']}"),
        ("calls answered by the engine", str(report["engine_resolved_calls"])),
        ("faults injected", ", ".join(f"{k} {v}" for k, v in report["faults"].items())),
    ]
    if report.get("run_rss_growth_pct") is not None and len(report.get("passes", ())) > 1:
        rows.append(
            (
                f"RSS growth, first → last quarter of the run ({len(report['passes'])} passes)",
                f"{report['run_rss_growth_pct']:+.2f} %",
            )
        )
    if "reference_rss_growth_pct" in report:
        rows.append(
            ("same growth, reference (no speculation)", f"{report['reference_rss_growth_pct']:+.2f} %")
        )
    if report.get("rss_last_vs_first_pass_pct") is not None:
        rows.append(
            ("RSS, last vs first pass (worst quarter)", f"{report['rss_last_vs_first_pass_pct']:+.2f} %")
        )
    if len(report.get("passes", ())) > 1:
        rows.append(
            (
                "per pass: RSS growth / end RSS",
                ", ".join(
                    f"{p['rss_growth_pct']:+.1f} % / {p['rss_end_mb']:.0f} MB" for p in report["passes"]
                ),
            )
        )
    head = f"soak: {report['agents']} agents, {report['tasks']} tasks, {report['wall_s']} s"
    print(f"{head} — {report['main_model']}")
    for name, value in rows:
        print(f"  {name:<52} {value}")


def plot(report: dict[str, Any], out: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    xs = [t for t, _ in report["rss_series"]]
    ys = [v for _, v in report["rss_series"]]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.plot(xs, ys, color="tab:blue")
    for t, label in report["marks"]:
        ax.axvline(t, color="tab:red", linestyle="--")
        ax.annotate(label, (t, max(ys or [0])), color="tab:red", fontsize=8)
    passes = len(report.get("passes", ())) or 1
    ax.set_xlabel("seconds into the soak pass" + (f" (the last of {passes})" if passes > 1 else ""))
    ax.set_ylabel("RSS (MB), client + server")
    growths = f"RSS growth {report['rss_growth_pct']:+.1f} % in this pass"
    if passes > 1 and report.get("run_rss_growth_pct") is not None:
        growths = f"RSS growth {report['run_rss_growth_pct']:+.1f} % over {passes} passes, " + growths
    ax.set_title(
        f"soak: {report['agents']} agents, lost {report['lost_transcripts']}, changed "
        f"{report['changed_transcripts']}; {growths}",
        fontsize=10,
    )
    fig.tight_layout()
    path = out / "soak_rss.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
