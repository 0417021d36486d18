"""Metrics of one paired run, and the model's prediction from what was measured.

``time_saved_pct`` = 100·(T_base − T_spec)/T_base per agent, on the same tasks, tool outputs and
latency draws, then averaged over agents. ``predicted_speedup`` applies Eq. 2 step by step to
the baseline's measured G_i and T_i, the speculative run's hit rate α and mean drafter time g:

    T_pred = Σ_steps with a call [α·max{G_i, g + T_i} + (1 − α)(G_i + T_i)] + Σ_other steps G_i
"""

from __future__ import annotations

from statistics import fmean
from typing import Any, Mapping, Sequence

from ._harness import AgentResult

__all__ = ["PRICES", "predicted_speedup", "run_row"]

#: USD per million tokens, overridable (``--price main=…,drafter=…``).
PRICES = {"main": 0.0, "drafter": 0.0}


def predicted_speedup(base: AgentResult, alpha: float, g: float) -> float:
    std = sum(base.G) + sum(base.T)
    pred = sum(
        alpha * max(G, g + T) + (1 - alpha) * (G + T) if T > 0 else G for G, T in zip(base.G, base.T)
    )
    return std / pred if pred > 0 else 1.0


def _mean(xs: Sequence[float]) -> float:
    return fmean(xs) if xs else 0.0


def run_row(meta: Mapping[str, Any], base: Sequence[AgentResult], spec: Sequence[AgentResult],
            prices: Mapping[str, float] = PRICES) -> dict[str, Any]:
    """One results.json run: ``meta`` (config, agents, samples, drafter, …) plus the metrics."""
    saved, measured, predicted, alphas, gs = [], [], [], [], []
    for b, s in zip(base, spec):
        g = _mean(s.draft_seconds)
        alpha = s.hit_rate
        saved.append(100.0 * (b.wall_s - s.wall_s) / b.wall_s if b.wall_s else 0.0)
        measured.append(b.wall_s / s.wall_s if s.wall_s else 1.0)
        predicted.append(predicted_speedup(b, alpha, g))
        alphas.append(alpha)
        gs.append(g)
    turns = sum(s.steps for s in spec) or 1
    main_tokens = sum(s.completion_tokens for s in spec)
    drafter_tokens = sum(s.drafter_tokens for s in spec)
    cost = (main_tokens * prices.get("main", 0.0) + drafter_tokens * prices.get("drafter", 0.0)) / 1e6
    return {
        **meta,
        "time_saved_pct": _mean(saved),
        "throughput_tok_s": _mean([s.completion_tokens / s.wall_s for s in spec if s.wall_s]),
        "baseline_throughput_tok_s": _mean([b.completion_tokens / b.wall_s for b in base if b.wall_s]),
        "hit_rate": _mean(alphas),
        "wasted_tool_runs": sum(s.tool_runs for s in spec) - sum(b.tool_runs for b in base),
        "predicted_speedup": _mean(predicted),
        "measured_speedup": _mean(measured),
        "measured_over_predicted": _mean(measured) / _mean(predicted) if predicted else 1.0,
        "G_mean_s": _mean([x for b in base for x in b.G]),
        "T_mean_s": _mean([x for b in base for x in b.T if x > 0]),
        "g_mean_s": _mean(gs),
        "wall_base_s": _mean([b.wall_s for b in base]),
        "wall_spec_s": _mean([s.wall_s for s in spec]),
        "steps": sum(s.steps for s in spec),
        "calls": sum(s.calls for s in spec),
        "extra_drafter_tokens": drafter_tokens,
        "cost_per_100_turns_usd": 100.0 * cost / turns,
        "same_transcripts": all(_same(b, s) for b, s in zip(base, spec)),
    }


def _same(b: AgentResult, s: AgentResult) -> bool:
    """Speculation must not change what the agent saw (tool call ids aside)."""
    def strip(ts: list[list[dict[str, Any]]]) -> list[Any]:
        return [[(m.get("role"), m.get("content"), [c["function"] for c in m.get("tool_calls") or []])
                 for m in t] for t in ts]
    return strip(b.transcript) == strip(s.transcript)
