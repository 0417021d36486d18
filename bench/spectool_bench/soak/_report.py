"""The soak's report: what was lost, left, leaked and injected, as a table, JSON fields and a
plot of RSS over the last pass beside the end-of-pass series (:mod:`._cli` runs the passes,
:mod:`._leak` judges the series)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["pass_summary", "plot", "print_report", "report"]


def pass_summary(
    lost: list[int], changed: list[int], statuses: Any, rss: list, wall: float
) -> dict[str, Any]:
    """One soak pass: what it lost or changed, its 5xx, its peak RSS (``rss_end_mb``, read once
    the pass's work is done and collected, is added by the pass loop)."""
    return {
        "lost": len(lost),
        "changed": len(changed),
        "server_errors_5xx": statuses.server_errors,
        "rss_peak_mb": round(max((v for _, v in rss), default=0.0), 1),
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
    leak = report.get("rss_leak")
    verdict = {True: "LEAK", False: "ok", None: report.get("rss_leak_note") or "not judged"}[leak]
    rows = [
        ("transcripts lost / changed", f"{report['lost_transcripts']} / {report['changed_transcripts']}"),
        (
            "world states changed (MCP server vs reference)",
            f"{report.get('changed_world_states', 0)} of {len(report.get('passes', ()))} passes"
            + ("" if report.get("mcp", True) else " (--no-mcp)"),
        ),
        ("asyncio tasks / threads left", f"{report['asyncio_tasks_left']} / {report['threads_left']}"),
        ("peak RSS (client + server)", f"{report['peak_rss_mb']:.0f} MB"),
        (
            "RSS at the end of each pass (collected)",
            ", ".join(f"{v:.0f}" for v in report["rss_end_of_pass_mb"]) + " MB",
        ),
        (
            "slope per pass (least squares)",
            f"{report['rss_slope_mb_per_pass']:+.1f} MB = {report['rss_slope_pct_per_pass']:+.2f} % "
            f"(limit {report['rss_max_slope_pct_per_pass']:g} %): {verdict}",
        ),
        ("5xx responses", str(report["server_errors_5xx"])),
        ("model requests / retried", f"{report['model_requests']} / {report['request_retries']}"),
        ("calls answered by the engine", str(report["engine_resolved_calls"])),
        ("faults injected", ", ".join(f"{k} {v}" for k, v in report["faults"].items())),
    ]
    if "reference_rss_end_mb" in report:
        ref_end = f"{report['reference_rss_end_mb']:.0f} MB"
        rows.insert(4, ("reference pass (no speculation): end RSS", ref_end))
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
    ends = report["rss_end_of_pass_mb"]
    fig, (ax, ax_end) = plt.subplots(1, 2, figsize=(10, 3.5), gridspec_kw={"width_ratios": [3, 1]})
    ax.plot(xs, ys, color="tab:blue")
    for t, label in report["marks"]:
        ax.axvline(t, color="tab:red", linestyle="--")
        ax.annotate(label, (t, max(ys or [0])), color="tab:red", fontsize=8)
    passes = len(report.get("passes", ())) or 1
    ax.set_xlabel("seconds into the soak pass" + (f" (the last of {passes})" if passes > 1 else ""))
    ax.set_ylabel("RSS (MB), client + server")
    ax.set_title(
        f"soak: {report['agents']} agents, lost {report['lost_transcripts']}, changed "
        f"{report['changed_transcripts']}",
        fontsize=10,
    )
    ax_end.plot(range(1, len(ends) + 1), ends, marker="o", color="tab:green")
    ax_end.set_xlabel("pass")
    ax_end.set_ylabel("end-of-pass RSS (MB), collected")
    ax_end.set_title(f"slope {report['rss_slope_pct_per_pass']:+.2f} % / pass", fontsize=10)
    fig.tight_layout()
    path = out / "soak_rss.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
