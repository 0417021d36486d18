"""Output of ``spectool drafters eval``: the printed table, ``results.json`` and one PNG."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spectool.errors import missing_extra

__all__ = ["drafter_table", "miss_table", "write_drafter_plot", "write_drafter_results"]

_COLUMNS = [  # (field, heading, format); None prints as "n/a"
    ("drafter", "drafter", "{}"),
    ("category", "category", "{}"),
    ("split", "split", "{}"),
    ("samples", "λ", "{}"),
    ("n_tasks", "tasks", "{}"),
    ("n_calls", "calls", "{}"),
    ("ceiling", "ceiling", "{:.2f}"),
    ("alpha_speculable", "α spec", "{:.2f}"),
    ("alpha_speculable_ci95", "α spec 95 %", "{0[0]:.2f}–{0[1]:.2f}"),
    ("alpha_all", "α all", "{:.2f}"),
    ("refused", "refused", "{}"),
    ("refused_right", "refused ✓", "{}"),
    ("g_median_s", "g med s", "{:.4f}"),
    ("g_p90_s", "g p90 s", "{:.4f}"),
    ("wasted_per_hit", "waste/hit", "{:.2f}"),
    ("wasted_runs", "wasted", "{}"),
]


def _cell(value: Any, fmt: str) -> str:
    return "n/a" if value is None else fmt.format(value)


def drafter_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Fixed-width table, one line per row (text columns left, figures right)."""
    heads = [h for _, h, _ in _COLUMNS]
    body = [[_cell(r.get(f), fmt) for f, _, fmt in _COLUMNS] for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(heads)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([line(heads), line(["-" * w for w in widths]), *(line(b) for b in body)])


_MISS_COLUMNS = [  # (kind, heading); see ._misses for what each kind means
    ("no_call", "no call"),
    ("wrong_tool", "wrong tool"),
    ("wrong_args", "wrong args"),
    ("wrong_value", "wrong value"),
    ("wrong_value_copyable", "of which copyable"),
    ("repeat", "repeat"),
    ("bfcl_accepted", "BFCL would accept"),
]


def miss_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Why speculable calls were missed, one line per row: the kinds' counts (they add up to
    the missed calls; "of which copyable" and "BFCL would accept" are parts of them) and each
    kind's share of them."""
    heads = ["drafter", "category", "λ", "missed", *(h for _, h in _MISS_COLUMNS)]
    body = []
    for r in rows:
        misses = r.get("misses") or {}
        missed = (r.get("n_speculable") or 0) - (r.get("hits") or 0)
        cells = [str(r["drafter"]), str(r["category"]), str(r["samples"]), str(missed)]
        for kind, _ in _MISS_COLUMNS:
            n = misses.get(kind, 0)
            cells.append(f"{n} ({n / missed:.0%})" if missed and n else str(n))
        body.append(cells)
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(heads)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([line(heads), line(["-" * w for w in widths]), *(line(b) for b in body)])


def write_drafter_results(rows: Sequence[Mapping[str, Any]], meta: Mapping[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    path.write_text(json.dumps({**meta, "rows": list(rows)}, indent=2, ensure_ascii=False))
    return path


def write_drafter_plot(rows: Sequence[Mapping[str, Any]], out: Path) -> Path:
    """α over all calls per category, one bar per drafter and λ, against the ceiling (grey), and
    the median draft time g per drafter (log scale) beside it."""
    try:
        import matplotlib
        import matplotlib.ticker

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise missing_extra("matplotlib", "bench") from exc
    categories = list(dict.fromkeys(r["category"] for r in rows))
    series = list(dict.fromkeys((r["drafter"], r["samples"]) for r in rows))
    by = {(r["category"], r["drafter"], r["samples"]): r for r in rows}
    fig, (ax, ag) = plt.subplots(
        1,
        2,
        figsize=(min(18.0, max(8.0, 0.9 * len(categories) + 5)), 4.6),
        gridspec_kw={"width_ratios": [max(3, len(categories)), 2]},
    )
    width = 0.8 / max(1, len(series))
    for ci, cat in enumerate(categories):
        ceiling = next((by[(cat, d, s)]["ceiling"] for d, s in series if (cat, d, s) in by), 0.0)
        ax.bar(
            ci,
            ceiling,
            width=0.9,
            color="#dddddd",
            zorder=0,
            label="ceiling (speculable share)" if ci == 0 else None,
        )
    for si, (drafter, lam) in enumerate(series):
        xs = [ci - 0.4 + width * (si + 0.5) for ci in range(len(categories))]
        ys = [(by.get((c, drafter, lam)) or {}).get("alpha_all") or 0.0 for c in categories]
        ax.bar(xs, ys, width=width, label=f"{drafter} λ={lam}", zorder=2)
    ax.set_xticks(range(len(categories)), categories, rotation=35, ha="right", fontsize=8)
    ax.set(
        ylim=(0, 1.05),
        ylabel="α over all calls (hits / calls)",
        title=f"Drafter hit rate vs the ceiling ({rows[0]['split'] if rows else ''} split)",
    )
    ax.legend(fontsize=7)
    names = list(dict.fromkeys(d for d, _ in series))
    medians = []
    for d in names:
        gs = [r["g_median_s"] for r in rows if r["drafter"] == d and r["g_median_s"] is not None]
        medians.append(max(sorted(gs)[len(gs) // 2], 1e-6) if gs else 1e-6)
    ag.barh(range(len(names)), medians, color="#4c72b0")
    for i, g in enumerate(medians):
        ag.text(g, i, f" {g * 1000:.1f} ms" if g < 1 else f" {g:.2f} s", va="center", fontsize=8)
    ag.set_yticks(range(len(names)), names)
    ag.set_xscale("log")
    ag.set_xlim(min(medians) / 3, max(medians) * 30)  # whole decades, room for the labels
    ag.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ag.set(xlabel="median draft time g (s, log)", title="Draft time")
    fig.tight_layout()
    path = out / "drafter_eval.png"
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
