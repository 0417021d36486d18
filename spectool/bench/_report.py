"""The summary table, ``results.json`` and the PNG plots (in the paper's shapes)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Mapping, Sequence

from .._errors import missing_extra

__all__ = ["summary_table", "write_plots", "write_results"]

_COLUMNS = [
    ("config", "config", "{}"), ("agents", "M", "{:g}"), ("samples", "λ", "{:g}"), ("drafter", "drafter", "{}"),
    ("tool_latency_mean", "T̄ s", "{:.2f}"), ("time_saved_pct", "saved %", "{:+.1f}"),
    ("throughput_tok_s", "tok/s", "{:.1f}"), ("hit_rate", "α", "{:.2f}"),
    ("wasted_tool_runs", "wasted", "{}"), ("predicted_speedup", "pred S", "{:.3f}"),
    ("measured_speedup", "meas S", "{:.3f}"), ("measured_over_predicted", "meas/pred", "{:.3f}"),
]


_OPTIONAL = [("engine_hit_rate", "α_eng", "{:.2f}"), ("same_transcripts", "same", "{}")]


def summary_table(runs: Sequence[Mapping[str, Any]]) -> str:
    """Runs averaged over repeats, one line per (config, M, λ, drafter, latency). ``α_eng`` (calls
    the engine resolved in place) appears when an engine calibration is present; ``same`` says
    whether every speculative transcript equals its baseline's."""
    columns = _COLUMNS + [c for c in _OPTIONAL if runs and all(c[0] in r for r in runs)]
    groups: dict[tuple, list[Mapping[str, Any]]] = defaultdict(list)
    for r in runs:
        groups[(r["config"], r["agents"], r["samples"], r["drafter"], r["tool_latency_mean"])].append(r)
    rows = []
    for key in sorted(groups, key=lambda k: (k[0] != "baseline", k[1], k[4], k[3], k[2], k[0])):
        rs = groups[key]
        avg = {c: (sum(r[c] for r in rs) / len(rs) if isinstance(rs[0][c], (int, float)) and not isinstance(rs[0][c], bool)
                   else all(r[c] for r in rs) if isinstance(rs[0][c], bool) else rs[0][c]) for c, _, _ in columns}
        rows.append([fmt.format(round(avg[c]) if c == "wasted_tool_runs" else "yes" if avg[c] is True
                                else "NO" if avg[c] is False else avg[c]) for c, _, fmt in columns])
    heads = [h for _, h, _ in columns]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(heads)]
    line = lambda cells: "  ".join(c.rjust(w) if i > 3 else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([line(heads), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def write_results(results: Mapping[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    path.write_text(json.dumps(results, indent=2, default=str, ensure_ascii=False))
    return path


def write_plots(runs: Sequence[Mapping[str, Any]], out: Path, title: str = "") -> list[Path]:
    """Three PNGs: time saved vs tool latency; throughput vs hit rate (λ); measured vs predicted."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise missing_extra("matplotlib", "bench") from exc
    out.mkdir(parents=True, exist_ok=True)
    spec = [r for r in runs if r["config"] != "baseline"]
    paths = []

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    series: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in spec:
        series[f"{r['config']} · {r['drafter']} · λ={r['samples']} · M={r['agents']}"][r["tool_latency_mean"]].append(r["time_saved_pct"])
    for name, pts in sorted(series.items()):
        xs = sorted(pts)
        ax.plot(xs, [sum(pts[x]) / len(pts[x]) for x in xs], marker="o", label=name)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set(xlabel="mean tool latency (s)", ylabel="time saved per agent (%)", title=f"Time saved vs tool latency {title}")
    ax.legend(fontsize=6)
    paths.append(_save(fig, out / "time_saved_vs_latency.png", plt))

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for r in spec:
        ax.scatter(r["hit_rate"], r["throughput_tok_s"], s=18)
        ax.annotate(f"λ={r['samples']}", (r["hit_rate"], r["throughput_tok_s"]), fontsize=6, xytext=(3, 2),
                    textcoords="offset points")
    for r in runs:
        if r["config"] == "baseline":
            ax.axhline(r["throughput_tok_s"], color="grey", lw=0.5, ls=":")
    ax.set(xlabel="hit rate α", ylabel="throughput per agent (generated tok/s)",
           title=f"Throughput vs hit rate (dotted: baselines) {title}")
    paths.append(_save(fig, out / "throughput_vs_hit_rate.png", plt))

    fig, ax = plt.subplots(figsize=(5, 5))
    xs = [r["predicted_speedup"] for r in spec]
    ys = [r["measured_speedup"] for r in spec]
    ax.scatter(xs, ys, s=18)
    lo, hi = min(xs + ys + [1.0]) * 0.98, max(xs + ys + [1.0]) * 1.02
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="measured = predicted")
    ax.plot([lo, hi], [0.95 * lo, 0.95 * hi], ":", color="grey", lw=0.8, label="0.95 × predicted")
    ax.set(xlabel="predicted speedup (client: Eq. 2; engine: Eq. 4/Eq. 6)", ylabel="measured speedup",
           title=f"Measured vs predicted {title}", xlim=(lo, hi), ylim=(lo, hi))
    ax.legend(fontsize=7)
    paths.append(_save(fig, out / "measured_vs_predicted.png", plt))
    return paths


def _save(fig: Any, path: Path, plt: Any) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
