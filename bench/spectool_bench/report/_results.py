"""The summary table, ``results.json`` and the PNG plots (in the paper's shapes)."""

from __future__ import annotations

import json
import textwrap
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spectool.errors import missing_extra

__all__ = [
    "aggregate_throughput",
    "hit_rate_figure",
    "latency_figure",
    "predicted_figure",
    "summary_table",
    "throughput_vs_agents_plot",
    "write_plots",
    "write_results",
]

_COLUMNS = [
    ("config", "config", "{}"),
    ("agents", "M", "{:g}"),
    ("samples", "λ", "{:g}"),
    ("drafter", "drafter", "{}"),
    ("tool_latency_mean", "T̄ s", "{:.2f}"),
    ("time_saved_pct", "saved %", "{:+.1f}"),
    ("time_saved_ci95", "95% CI", "ci"),
    ("time_saved_vs_eager_pct", "vs eager %", "{:+.1f}"),
    ("throughput_tok_s", "tok/s", "{:.1f}"),
    ("hit_rate", "α", "{:.2f}"),
    ("g_mean_s", "g s", "{:.2f}"),
    ("wasted_tool_runs", "wasted", "{}"),
    ("predicted_speedup", "pred S", "{:.3f}"),
    ("measured_speedup", "meas S", "{:.3f}"),
    ("measured_over_predicted", "meas/pred", "{:.3f}"),
]


_OPTIONAL = [
    ("engine_hit_rate", "α_eng", "{:.2f}"),
    ("same", "same", "{}"),
    ("drafter_cpu_cores", "drafter CPU", "{:.2f}"),
    ("samples_chosen", "λ chosen", "lambdas"),
]


def _lambdas(chosen: Mapping[str, int]) -> str:
    """Requests per λ drafted: ``1×3 0×5`` (auto drafted λ = 1 three times, skipped five)."""
    ordered = sorted(chosen.items(), key=lambda kv: -int(kv[0]))
    return " ".join(f"{lam}×{n}" for lam, n in ordered) or "—"


def _avg(values: list[Any]) -> Any:
    """Mean of numbers (None where any is None), all() of booleans, else the first value."""
    if any(v is None for v in values):
        return None
    if isinstance(values[0], bool):
        return all(values)
    if isinstance(values[0], Mapping):  # counts (λ chosen): summed over the repeats
        total: dict[str, Any] = {}
        for v in values:
            for k, n in v.items():
                total[k] = total.get(k, 0) + n
        return dict(sorted(total.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0))
    if isinstance(values[0], (int, float)):
        return sum(values) / len(values)
    return values[0]


def _cell(value: Any, fmt: str, column: str) -> str:
    if value is None:
        return "—"
    if value is True or value is False:
        return "yes" if value else "NO"
    if isinstance(value, str):
        return value
    if fmt == "ci":
        return f"[{value[0]:+.1f}, {value[1]:+.1f}]"
    if fmt == "lambdas":
        return _lambdas(value)
    return fmt.format(round(value) if column == "wasted_tool_runs" else value)


def summary_table(runs: Sequence[Mapping[str, Any]]) -> str:
    """Runs averaged over repeats, one line per (config, M, λ, drafter, latency). ``α_eng`` (calls
    the engine resolved in place) appears when an engine calibration is present; ``same`` says
    whether every speculative transcript equals its baseline's; ``vs eager %`` (time saved over
    eager dispatch alone) when the run had an eager arm. ``—``: not defined for that row."""
    columns = [
        c for c in _COLUMNS if c[0] != "time_saved_vs_eager_pct" or any(r.get(c[0]) is not None for r in runs)
    ]
    shown = {
        "drafter_cpu_cores": any("drafter_cpu_cores" in r for r in runs),
        "samples_chosen": any(r.get("samples") == "auto" and r.get("samples_chosen") for r in runs),
    }
    columns += [c for c in _OPTIONAL if runs and shown.get(c[0], all(c[0] in r for r in runs))]
    groups: dict[tuple, list[Mapping[str, Any]]] = defaultdict(list)
    for r in runs:
        groups[(r["config"], r["agents"], str(r["samples"]), r["drafter"], r["tool_latency_mean"])].append(r)
    order = {"baseline": 0, "eager": 1}
    rows = []
    for key in sorted(groups, key=lambda k: (k[1], k[4], order.get(k[0], 2), k[3], k[2], k[0])):
        rs = groups[key]
        rows.append([_cell(_avg([r.get(c) for r in rs]), fmt, c) for c, _, fmt in columns])
        if rs[0].get("samples") != "auto" and "samples_chosen" in [c[0] for c in columns]:
            rows[-1][-1] = "—"  # a fixed λ chose nothing
    heads = [h for _, h, _ in columns]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(heads)]
    line = lambda cells: "  ".join(
        c.rjust(w) if i > 3 else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))
    )
    return "\n".join([line(heads), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def write_results(results: Mapping[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    path.write_text(json.dumps(results, indent=2, default=str, ensure_ascii=False))
    return path


def write_plots(runs: Sequence[Mapping[str, Any]], out: Path, title: str = "") -> list[Path]:
    """The PNGs: time saved vs α; time saved vs tool latency (only when some arm was run at
    ≥ 2 latencies: one point is no curve); throughput vs hit rate (λ); measured vs predicted;
    throughput vs agents (only with ≥ 2 agent counts)."""
    plt = _pyplot()
    out.mkdir(parents=True, exist_ok=True)
    paths = [saved_vs_alpha_plot(runs, out / "time_saved_vs_alpha.png", plt, title)]
    fig = latency_figure(runs, plt, title)
    if fig is not None:
        paths.append(_save(fig, out / "time_saved_vs_latency.png", plt))
    paths.append(_save(hit_rate_figure(runs, plt, title), out / "throughput_vs_hit_rate.png", plt))
    paths.append(_save(predicted_figure(runs, plt, title), out / "measured_vs_predicted.png", plt))
    if len({r["agents"] for r in runs}) > 1:
        paths.append(throughput_vs_agents_plot(runs, out / "throughput_vs_agents.png", plt, title))
    return paths


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise missing_extra("matplotlib", "bench") from exc
    return plt


def _title(head: str, title: str) -> str:
    """The plot's name over the run's title, wrapped so that neither end is cut off."""
    return "\n".join([head, *textwrap.wrap(title, 60)])


def _arm(r: Mapping[str, Any]) -> str:
    return f"{r['config']} · {r['drafter']}"


def _scatter_arms(
    ax: Any, plt: Any, runs: Sequence[Mapping[str, Any]], xs: Sequence[float], ys: Sequence[float]
) -> None:
    """``runs`` at (``xs``, ``ys``): one colour per arm (config · drafter), each point labelled λ."""
    palette = plt.get_cmap("tab10")
    for i, arm in enumerate(sorted({_arm(r) for r in runs})):
        pts = [(x, y) for r, x, y in zip(runs, xs, ys, strict=True) if _arm(r) == arm]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=18, color=palette(i % 10), label=arm)
    for r, x, y in zip(runs, xs, ys, strict=True):
        ax.annotate(f"λ={r['samples']}", (x, y), fontsize=6, xytext=(3, 2), textcoords="offset points")


def _legend(ax: Any, **kw: Any) -> None:
    """A legend only when something is labelled (else matplotlib warns "No artists…")."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kw)


def _titled(fig: Any, ax: Any, head: str, title: str, legend_size: float) -> Any:
    """``fig`` with ``head`` over the run's title and a legend."""
    ax.set_title(_title(head, title), fontsize=9)
    _legend(ax, fontsize=legend_size)
    return fig


def latency_figure(runs: Sequence[Mapping[str, Any]], plt: Any, title: str = "") -> Any | None:
    """Time saved against mean tool latency, one line per series with ≥ 2 latencies; None if none."""
    series: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        if r["config"] != "baseline":
            name = f"{_arm(r)} · λ={r['samples']} · M={r['agents']}"
            series[name][r["tool_latency_mean"]].append(r["time_saved_pct"])
    series = {k: v for k, v in series.items() if len(v) >= 2}
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for name, pts in sorted(series.items()):
        xs = sorted(pts)
        ax.plot(xs, [sum(pts[x]) / len(pts[x]) for x in xs], marker="o", label=name)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set(xlabel="mean tool latency (s)", ylabel="time saved per agent (%)")
    return _titled(fig, ax, "Time saved vs tool latency", title, 6)


def hit_rate_figure(runs: Sequence[Mapping[str, Any]], plt: Any, title: str = "") -> Any:
    """Per-agent throughput against hit rate; colour = arm (config · drafter), text = λ."""
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    arms = [r for r in runs if r["config"] != "baseline"]
    _scatter_arms(ax, plt, arms, [r["hit_rate"] for r in arms], [r["throughput_tok_s"] for r in arms])
    for r in runs:
        if r["config"] == "baseline":
            ax.axhline(r["throughput_tok_s"], color="grey", lw=0.5, ls=":")
    ax.set(xlabel="hit rate α", ylabel="throughput per agent (gen. tok/s)")
    return _titled(fig, ax, "Throughput vs hit rate (dotted: baselines)", title, 7)


def predicted_figure(runs: Sequence[Mapping[str, Any]], plt: Any, title: str = "") -> Any:
    """Measured against predicted speedup, each point labelled arm · λ, with the y = x line."""
    fig, ax = plt.subplots(figsize=(5.5, 5.5))
    predicted = [r for r in runs if r["config"] != "baseline" and r.get("predicted_speedup") is not None]
    xs = [r["predicted_speedup"] for r in predicted]
    ys = [r["measured_speedup"] for r in predicted]
    _scatter_arms(ax, plt, predicted, xs, ys)
    lo, hi = min(xs + ys + [1.0]) * 0.98, max(xs + ys + [1.0]) * 1.02
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="measured = predicted")
    ax.plot([lo, hi], [0.95 * lo, 0.95 * hi], ":", color="grey", lw=0.8, label="0.95 × predicted")
    ax.set(
        xlabel="predicted speedup (client: Eq. 2; engine: Eq. 4/Eq. 6)",
        ylabel="measured speedup",
        xlim=(lo, hi),
        ylim=(lo, hi),
    )
    return _titled(fig, ax, "Measured vs predicted", title, 7)


def aggregate_throughput(runs: Sequence[Mapping[str, Any]]) -> dict[str, dict[int, float]]:
    """Per config (baseline, client, engine…): M → aggregate generated tokens/s, i.e. M times
    the mean per-agent throughput of that config's runs at M agents."""
    per: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        per[r["config"]][int(r["agents"])].append(float(r["throughput_tok_s"]))
    return {c: {m: m * sum(v) / len(v) for m, v in sorted(ms.items())} for c, ms in per.items()}


def throughput_vs_agents_plot(
    runs: Sequence[Mapping[str, Any]], path: Path, plt: Any, title: str = ""
) -> Path:
    """Aggregate tokens/s against the number of concurrent agents M, one line per config."""
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for config, points in sorted(aggregate_throughput(runs).items()):
        xs = sorted(points)
        ax.plot(xs, [points[m] for m in xs], marker="o", label=config)
    xs = sorted({int(r["agents"]) for r in runs})
    ax.set_xscale("log")
    ax.set_xticks(xs, [str(m) for m in xs])
    ax.set(xlabel="concurrent agents M", ylabel="aggregate generated tok/s")
    _titled(fig, ax, "Throughput vs agents", title, 7)
    return _save(fig, path, plt)


def saved_vs_alpha_plot(runs: Sequence[Mapping[str, Any]], path: Path, plt: Any, title: str = "") -> Path:
    """The headline plot: time saved (against the sequential baseline) against the hit rate α.

    One point per arm (marker: config; colour: drafter), the eager-dispatch-alone arm at α = 0,
    and per drafter the model's curve (Eq. 2 over the reference run with that drafter's g)."""
    fig, ax = plt.subplots(figsize=(7.2, 4.6))
    colours: dict[str, Any] = {}
    palette = plt.get_cmap("tab10")
    ax.axhline(0, color="grey", lw=0.8)
    ax.annotate(
        "sequential baseline (no eager dispatch, no drafter)",
        (1.0, 0),
        fontsize=7,
        color="grey",
        xytext=(0, -10),
        textcoords="offset points",
        ha="right",
    )
    drawn: set[str] = set()
    for r in runs:
        if r["config"] == "baseline":
            continue
        if r["config"] == "eager":
            ax.axhline(r["time_saved_pct"], color="black", lw=0.8, ls="--")
            ax.scatter(
                [0],
                [r["time_saved_pct"]],
                color="black",
                marker="s",
                s=36,
                zorder=3,
                label=f"eager dispatch alone ({r['time_saved_pct']:+.1f} %)",
            )
            continue
        colour = colours.setdefault(r["drafter"], palette(len(colours) % 10))
        curve = r.get("model_curve")
        if curve and r["drafter"] not in drawn:
            drawn.add(r["drafter"])
            ax.plot(
                [c[0] for c in curve],
                [c[1] for c in curve],
                color=colour,
                lw=1,
                alpha=0.6,
                label=f"model (Eq. 2), g = {r['g_mean_s']:.2f} s: {r['drafter']}",
            )
        marker = {"1": "o", "3": "^", "auto": "*"}.get(str(r["samples"]), "D")
        ax.scatter(
            [r["hit_rate"]],
            [r["time_saved_pct"]],
            color=colour,
            marker=marker,
            s=60,
            zorder=3,
            edgecolor="black",
            linewidth=0.5,
            label=f"{r['drafter']} λ={r['samples']}: {r['time_saved_pct']:+.1f} %",
        )
    ax.set(
        xlabel="hit rate α (share of the model's calls a draft started early)",
        ylabel="time saved per agent (%)",
        xlim=(-0.03, 1.03),
        title=title or "Time saved against hit rate: measured points, model curves",
    )
    _legend(ax, fontsize=6.5, loc="upper left")
    return _save(fig, path, plt)


def _save(fig: Any, path: Path, plt: Any) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
