"""Scoring drafts against ground truth: α, the ceiling, g and wasted runs (pure, no I/O).

One *step* is one model response of the ground truth: the calls it makes, which of them are
speculable (only those may run early), the calls the drafter proposed before it and how long
the drafter took. A ground-truth call is

* *predicted* when a proposal has its canonical key (each proposal serves one call);
* a *hit* when it is predicted and speculable: the speculator would have run it early.

Per set of steps: ``alpha_speculable`` = hits / speculable calls, ``alpha_all`` = hits / all
calls (what the bench reports as hit rate), ``ceiling`` = speculable calls / all calls (the
best ``alpha_all`` any drafter can reach), ``accuracy_all`` = predicted / all calls (mutating
calls included: what a drafter knows, speculable or not). A *wasted run* is a distinct
proposal of a speculable tool that matches no call of its step (a speculative run nobody
used); ``wasted_per_hit`` = wasted runs / hits.

*Speculable* means what the speculator admits (:func:`admitted_tools`): not mutating, not
``external`` unless the session opts in. Any other offered proposal (a mutating call, an
external read, a tool the session gates) is *refused*: the speculator never runs it, so it is
neither a hit nor a wasted run, and it gets its own columns: ``refused`` (distinct refused
proposals) and ``refused_right`` (of those, the ones that matched a call of their step: right
guesses that could not be used).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spectool import ToolCall, ToolSpec
from spectool.drafters import call_key

__all__ = ["StepScore", "admitted_tools", "percentile", "score_step", "summarize", "wilson_interval"]

#: the speculator's default cap on proposals per request (``Speculator(max_proposals=16)``)
MAX_PROPOSALS = 16


@dataclass(frozen=True)
class StepScore:
    calls: int
    speculable: int
    predicted: int
    hits: int
    wasted: int
    seconds: float
    failed: bool = False  # the drafter raised: scored as no proposals
    refused: int = 0  # distinct proposals the speculator would not run (mutating, external, gated)
    refused_right: int = 0  # of those, the ones that matched a call of the step
    misses: tuple[tuple[str, int], ...] = ()  # why speculable calls were missed (._misses)


def admitted_tools(tools: Iterable[ToolSpec], speculate_external: bool = False) -> set[str]:
    """The tools whose proposals the speculator would run early, by its own rule: speculable
    (pure or read-only) and, unless the session opts in, not external."""
    return {t.name for t in tools if t.speculable and (speculate_external or not t.external)}


def score_step(
    proposals: Sequence[ToolCall],
    calls: Sequence[ToolCall],
    speculable_tools: set[str],
    schemas: Mapping[str, Mapping[str, Any]],
    seconds: float,
    failed: bool = False,
) -> StepScore:
    """Score one step's proposals against its ground-truth calls."""
    offered = [p for p in proposals[:MAX_PROPOSALS] if p.name in schemas]
    # Distinct keys: the cache runs each once, however many samples agree on it.
    keys = {call_key(p, schemas): p.name for p in offered}
    unmatched = set(keys)
    predicted = hits = speculable = 0
    for call in calls:
        is_spec = call.name in speculable_tools
        speculable += is_spec
        key = call_key(call, schemas)
        if key in unmatched:
            unmatched.discard(key)
            predicted += 1
            hits += is_spec
    runs = sum(1 for name in keys.values() if name in speculable_tools)
    wasted = runs - hits
    refused = len(keys) - runs
    refused_right = predicted - hits
    return StepScore(len(calls), speculable, predicted, hits, wasted, seconds, failed, refused, refused_right)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0–100), linear between closest ranks; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def wilson_interval(hits: int, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """The Wilson score interval of a rate hits / n (95 % by default); None for n = 0.

    Wilson rather than the normal approximation: with 15–80 calls a row and rates near 0 or 1
    the normal interval leaves [0, 1] or shrinks to a point.
    """
    if n <= 0:
        return None
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def summarize(steps: Sequence[StepScore]) -> dict[str, Any]:
    """The row fields of a set of steps (None where a ratio has no denominator)."""
    n_calls = sum(s.calls for s in steps)
    n_spec = sum(s.speculable for s in steps)
    hits = sum(s.hits for s in steps)
    predicted = sum(s.predicted for s in steps)
    wasted = sum(s.wasted for s in steps)
    times = [s.seconds for s in steps]
    misses: dict[str, int] = {}
    for s in steps:
        for kind, n in s.misses:
            misses[kind] = misses.get(kind, 0) + n
    return {
        "n_steps": len(steps),
        "n_calls": n_calls,
        "n_speculable": n_spec,
        "hits": hits,
        "predicted": predicted,
        "wasted_runs": wasted,
        "refused": sum(s.refused for s in steps),
        "refused_right": sum(s.refused_right for s in steps),
        "draft_failures": sum(s.failed for s in steps),
        "alpha_speculable": _ratio(hits, n_spec),
        "alpha_speculable_ci95": wilson_interval(hits, n_spec),
        "alpha_all": _ratio(hits, n_calls),
        "accuracy_all": _ratio(predicted, n_calls),
        "ceiling": _ratio(n_spec, n_calls) if n_calls else 0.0,
        "wasted_per_hit": _ratio(wasted, hits),
        "g_median_s": percentile(times, 50),
        "g_p90_s": percentile(times, 90),
        "misses": misses,
    }
