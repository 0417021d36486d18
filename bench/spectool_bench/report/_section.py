"""One section of the main job as text: its table and what each figure is (and is not)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ._results import summary_table

__all__ = ["section_text", "tasks_for_half_width"]


def tasks_for_half_width(n: int, half_width: float, target: float = 3.0) -> int:
    """Tasks a CI of ``half_width`` over ``n`` tasks needs to shrink to ``target`` (≈ 1/√n)."""
    if n <= 0 or half_width <= target:
        return n
    return math.ceil(n * (half_width / target) ** 2)


def _ci_lines(runs: list[Mapping[str, Any]]) -> list[str]:
    out = []
    for r in runs:
        ci, n = r.get("time_saved_ci95"), r.get("tasks_n") or 0
        if r.get("config") == "baseline" or not ci:
            continue
        hw = (ci[1] - ci[0]) / 2
        need = tasks_for_half_width(n, hw)
        verdict = "≤ 3 points" if need <= n else f"≤ 3 points needs ≈ {need} tasks"
        arm = r["drafter"] if r.get("config") == "eager" else f"{r['drafter']} λ={r['samples']}"
        out.append(f"  {arm}: ±{hw:.1f} points over {n} tasks ({verdict})")
    return out


def section_text(section: Mapping[str, Any]) -> str:
    runs = list(section["runs"])
    lines = []
    if section.get("title"):
        lines.append(f"\n== {section['title']}")
    lines.append(f"main model: {section['main_model']}")
    lines.append(summary_table(runs))
    lines.append(
        "saved %: time saved against the sequential baseline over all tasks; 95% CI: paired "
        "bootstrap over tasks. same: transcripts AND final world state equal an independent run "
        "without speculation (the baseline row is checked against it too)."
    )
    half = _ci_lines(runs)
    if half:
        lines.append("CI half-widths:")
        lines.extend(half)
    if section.get("plan", {}).get("main") == "replay":
        lines.append(
            "meas/pred on the replay is a harness check (G and T are scripted sleeps, the model "
            "is Eq. 2 on them), not evidence for the model; drafter CPU: cores the drafter kept "
            "busy beside the agent (the replay model itself uses no CPU, as a remote model would not)."
        )
    chosen = [r for r in runs if r.get("samples") == "auto"]
    if chosen and not any(r.get("samples_chosen") for r in chosen):
        lines.append("λ chosen: this spectool does not record λ = auto's choices per request")
    skipped = {c: n for c, n in (section.get("skipped_no_gold_calls") or {}).items() if n}
    if skipped:
        lines.append("tasks skipped (no gold call): " + ", ".join(f"{c} {n}" for c, n in skipped.items()))
    return "\n".join(lines)
