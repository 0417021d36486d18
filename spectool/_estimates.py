"""Where ``samples="auto"`` keeps its estimates: per wrapped client, so they outlive a session.

An agent usually opens one session per task (``async with speculative(client, …)``), and a
single-step task has one model request: estimates that start cold in every session never get
past λ = 1. So the wrappers keep one :class:`~spectool._auto.AutoSamples` per (wrapped client,
drafter, ``max_samples``, ``sample_cost``) and hand it to each new session on that client; the
second session starts from what the first learnt. A user who wants the estimates elsewhere (one
per agent over several clients, or saved with the agent) passes an ``AutoSamples`` as
``samples=`` and keeps it.

The registry holds clients weakly (an entry goes with its client); drafters are held weakly
where they allow it, and each client keeps at most :data:`PER_CLIENT` estimators (oldest
dropped), so a drafter made per session cannot grow it without bound. A client that cannot be
weakly referenced gets no shared estimator: each session starts cold, as before.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

from ._auto import DEFAULT_RUN_COST_S, AutoSamples

__all__ = ["PER_CLIENT", "shared_estimator"]

PER_CLIENT = 8

_Entry = tuple[Any, tuple[int, float, float], AutoSamples]  # (drafter or its weakref, settings, estimator)
_registry: weakref.WeakKeyDictionary[Any, list[_Entry]] = weakref.WeakKeyDictionary()


def _same_drafter(held: Any, drafter: Any) -> bool:
    target = held() if isinstance(held, weakref.ref) else held
    return target is drafter


def shared_estimator(client: Any, drafter: Any, samples: Any, options: Mapping[str, Any]) -> Any:
    """``samples`` as a session should get it: ``"auto"`` becomes ``client``'s estimator for this
    drafter and these settings (made on first use); anything else is returned as it is."""
    if samples != "auto" or isinstance(samples, AutoSamples) or drafter is None:
        return samples
    max_samples, cost = options.get("max_samples", 9), options.get("sample_cost", 0.0)
    run_cost = options.get("run_cost", DEFAULT_RUN_COST_S)
    numbers = (cost, run_cost)
    if not isinstance(max_samples, int) or max_samples < 0 or not all(_non_negative(x) for x in numbers):
        return samples  # the Speculator reports the bad setting
    settings = (max_samples, float(cost), float(run_cost))
    try:
        entries = _registry.setdefault(client, [])
    except TypeError:  # not weakly referenceable (or unhashable): no sharing, start cold
        return samples
    for ref, seen, known in entries:
        if seen == settings and _same_drafter(ref, drafter):
            return known
    held: Any
    try:
        held = weakref.ref(drafter)
    except TypeError:
        held = drafter
    estimator = AutoSamples(max_samples, settings[1], cost_per_run_s=settings[2])
    entries[:] = [e for e in entries if not isinstance(e[0], weakref.ref) or e[0]() is not None]
    entries.append((held, settings, estimator))
    del entries[:-PER_CLIENT]
    return estimator


def _non_negative(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0
