"""decode-bench's numbers: repeated runs merged, per-category ratios summarised, the plot.

A 48-token prompt decodes in a second or two, so one run per prompt and method is at the
mercy of the machine's load. With ``--repeat N`` every method runs N times per prompt
(interleaved, so a burst of load falls on all of them); a row keeps the run of median time
(:func:`merge_repeats`) and the ratios of each repetition against the same repetition's
``engine_ar``, whose spread per category says how far a ratio is from noise.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["merge_repeats", "summarize", "plot", "geomean"]

TREE_POLICIES = ("unispec", "cast", "both")


def geomean(xs: list[float]) -> float:
    xs = [x for x in xs if x and x > 0]
    return float(math.exp(np.mean(np.log(xs)))) if xs else float("nan")


def merge_repeats(reps: list[dict[str, dict]]) -> dict[str, dict]:
    """Per method, the repetition of median time (the lower median for an even count, so its
    fields belong to one real run), with every run's seconds, whether every run was
    identical to its reference, and each run's tok/s against the same run's ``engine_ar``."""
    out: dict[str, dict] = {}
    for m in reps[0]:
        runs = [r[m] for r in reps]
        order = sorted(range(len(runs)), key=lambda i: runs[i]["seconds"])
        rec = dict(runs[order[(len(runs) - 1) // 2]])
        rec["seconds_runs"] = [r["seconds"] for r in runs]
        rec["identical"] = all(r["identical"] for r in runs)
        if "engine_ar" in reps[0]:
            rec["vs_engine_ar_runs"] = [r[m]["tok_s"] / r["engine_ar"]["tok_s"] for r in reps]
        out[m] = rec
    return out


def _per_category(
    rows: list[dict], cats: list[str], methods: list[str], key: str, base: str
) -> dict[str, dict[str, float]]:
    """method -> category -> geomean over the category's rows of ``key`` against ``base``'s."""
    return {
        m: {
            c: geomean([r["methods"][m][key] / r["methods"][base][key] for r in rows if r["category"] == c])
            for c in cats
        }
        for m in methods
    }


def _spread(rows: list[dict], cats: list[str], methods: list[str]) -> dict[str, dict[str, list[float]]]:
    """method -> category -> [lowest, highest] over repetitions of the category's geomean of
    paired ratios (repetition i of the method against repetition i of ``engine_ar``)."""
    out: dict[str, dict[str, list[float]]] = {}
    for m in methods:
        out[m] = {}
        for c in cats:
            runs = [r["methods"][m].get("vs_engine_ar_runs") for r in rows if r["category"] == c]
            if not runs or any(x is None for x in runs):
                continue
            per_rep = [geomean(list(col)) for col in zip(*runs)]
            out[m][c] = [min(per_rep), max(per_rep)]
    return out


def summarize(rows: list[dict]) -> dict:
    """Per batch size: geometric mean over categories of per-category mean speedups, and the
    speculation alone per category (each method against ``engine_ar``)."""
    out: dict[str, Any] = {}
    for bsz in sorted({r["batch"] for r in rows}):
        sub = [r for r in rows if r["batch"] == bsz]
        methods = list(sub[0]["methods"])
        cats = sorted({r["category"] for r in sub})
        per_cat = _per_category(sub, cats, methods, "tok_s", "ar")
        vs_ar = {m: geomean(list(per_cat[m].values())) for m in methods}
        phased = [m for m in methods if "decode_tok_s" in sub[0]["methods"][m]]
        if "engine_ar" not in phased:
            phased = []  # the phase is a ratio against engine_ar's
        phase_cat = _per_category(sub, cats, phased, "decode_tok_s", "engine_ar")
        vs_engine = _per_category(sub, cats, methods, "tok_s", "engine_ar") if "engine_ar" in methods else {}
        pls = [m for m in ("pl3", "pl10") if m in vs_ar]
        best_pl = max(pls, key=lambda m: vs_ar[m]) if pls else None
        out[f"batch{bsz}"] = {
            "speedup_vs_ar": vs_ar,
            "per_category": per_cat,
            "best_prompt_lookup": best_pl,
            "speedup_vs_best_pl": {m: vs_ar[m] / vs_ar[best_pl] for m in methods} if best_pl else None,
            "speedup_vs_engine_ar": (
                {m: vs_ar[m] / vs_ar["engine_ar"] for m in methods} if "engine_ar" in vs_ar else None
            ),
            # the speculation alone, whole request, per category: the "no category below 1.0×"
            "per_category_vs_engine_ar": vs_engine,
            "per_category_vs_engine_ar_spread": _spread(sub, cats, list(vs_engine)),
            "worst_category_vs_engine_ar": {
                m: min(v.items(), key=lambda kv: kv[1]) for m, v in vs_engine.items() if v
            },
            # speculation alone in the decode phase (prefill excluded on both sides)
            "decode_phase_vs_engine_ar": {m: geomean(list(v.values())) for m, v in phase_cat.items()},
            "decode_phase_per_category": phase_cat,
            "identical_rate": {
                m: float(np.mean([r["methods"][m]["identical"] for r in sub])) for m in methods
            },
            "tau": {
                m: float(np.mean([r["methods"][m]["tau"] for r in sub]))
                for m in methods
                if "tau" in sub[0]["methods"][m]
            },
            "draft": {
                m: float(np.mean([r["methods"][m]["draft"] for r in sub]))
                for m in methods
                if "draft" in sub[0]["methods"][m]
            },
        }
    return out


def category_table(summary: dict) -> str:
    """Batch 1's whole-request ratio against ``engine_ar`` per category, as a markdown table
    (with the spread over repetitions where there were several)."""
    b1 = summary.get("batch1", {})
    vs = b1.get("per_category_vs_engine_ar") or {}
    spread = b1.get("per_category_vs_engine_ar_spread") or {}
    pols = [m for m in TREE_POLICIES if m in vs]
    if not pols:
        return ""
    cats = list(vs[pols[0]])
    lines = ["| / engine_ar | " + " | ".join(cats) + " |", "|---" * (len(cats) + 1) + "|"]
    for m in pols:
        cells = []
        for c in cats:
            lo_hi = spread.get(m, {}).get(c)
            rng = f" ({lo_hi[0]:.2f}–{lo_hi[1]:.2f})" if lo_hi and lo_hi[0] != lo_hi[1] else ""
            cells.append(f"{vs[m][c]:.2f}{rng}")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(results: dict, path: Path) -> None:
    """Left: the calibration's speed-vs-draft-size curve with the measured policies; right:
    batch 1's per-category ratio against ``engine_ar`` (bars: the median run; whiskers: the
    spread over repetitions), with the 1.0× line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, cat_ax) = plt.subplots(1, 2, figsize=(12, 4))
    dtypes = list(results["dtypes"].items())
    for dtype, res in dtypes:
        cal = res["calibration"]
        s1 = cal["s"][0]
        speed = [t * s1 / s for t, s in zip(cal["tau"], cal["s"])]
        (line,) = ax.plot(cal["gs"], speed, marker="o", label=f"{dtype}: τ(g)·s(1)/s(g)")
        gi = cal["gs"].index(cal["g_star"]) if cal["g_star"] in cal["gs"] else None
        ax.axvline(cal["g_star"], color=line.get_color(), ls="--", lw=1)
        if gi is not None:
            ax.plot([cal["g_star"]], [speed[gi]], marker="*", ms=14, color=line.get_color())
        b1 = res["summary"]["batch1"]
        # the curve is relative to a one-token forward of the same engine: so are the points
        rel = b1.get("speedup_vs_engine_ar") or b1["speedup_vs_ar"]
        for policy, marker in (("unispec", "s"), ("both", "D")):
            ax.plot(
                [b1["draft"][policy]],
                [rel[policy]],
                marker=marker,
                color=line.get_color(),
                ls="none",
                label=f"{dtype}: measured {policy} (bench)",
            )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("draft size g (tokens verified per step)")
    ax.set_ylabel("speedup vs one-token decoding, same forward")
    ax.set_title("SmolLM2-135M tree decoding (g* dashed)")
    ax.legend(fontsize=7)
    _category_bars(cat_ax, dtypes)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _category_bars(ax: Any, dtypes: list[tuple[str, dict]]) -> None:
    bars = [
        (f"{dtype} {m}", vs, res["summary"]["batch1"].get("per_category_vs_engine_ar_spread", {}).get(m, {}))
        for dtype, res in dtypes
        for m, vs in (res["summary"]["batch1"].get("per_category_vs_engine_ar") or {}).items()
        if m in TREE_POLICIES
    ]
    if not bars:
        return
    cats = list(bars[0][1])
    width = 0.8 / len(bars)
    for i, (label, vs, spread) in enumerate(bars):
        xs = [j + i * width for j in range(len(cats))]
        ys = [vs[c] for c in cats]
        err = [
            [y - spread.get(c, [y, y])[0] for c, y in zip(cats, ys)],
            [spread.get(c, [y, y])[1] - y for c, y in zip(cats, ys)],
        ]
        ax.bar(xs, ys, width, yerr=err, capsize=2, label=label)
    ax.axhline(1.0, color="k", lw=1)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cats))])
    ax.set_xticklabels(cats, rotation=30, fontsize=8)
    ax.set_ylabel("tok/s / engine_ar (whole request, batch 1)")
    ax.set_title("speculation alone, per category")
    ax.legend(fontsize=7)
