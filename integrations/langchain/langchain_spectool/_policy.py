"""Per conversation: which drafted calls may start early this turn (gates, budgets).

spectool's core starts a tool early only for a call its drafter proposed, so this module
stands between the drafter and the core: :class:`PolicyDrafter` drops proposals of gated
tools, and of limited tools beyond what the user's ``ToolCallLimitMiddleware`` still lets
through. An early run counts against a limit from the moment it starts: a run the model
then used is counted by the limit middleware itself; one it did not use (a wrong draft, or a
call the limit blocked) keeps counting for the rest of the conversation.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._compose import Composition

__all__ = ["Plan", "PolicyDrafter", "policy_for"]


@dataclass
class Plan:
    """One turn's rules: tool names that may not run early, and per limiter how many early
    runs it still allows (None: the limiter does not apply)."""

    blocked: frozenset[str] = frozenset()
    allowance: list[int] = field(default_factory=list)
    composition: Composition = field(default_factory=Composition)

    def may_run(self, name: str) -> bool:
        if name in self.blocked or self.composition.is_gated(name):
            return False
        return all(a > 0 for lim, a in zip(self.composition.limiters, self.allowance) if lim.covers(name))


def _name_and_key(raw: Any) -> tuple[str | None, str]:
    if isinstance(raw, Mapping):
        name, args = raw.get("name"), raw.get("arguments", raw.get("args"))
    else:
        name, args = getattr(raw, "name", None), getattr(raw, "arguments", None)
    try:
        key = json.dumps(args, sort_keys=True, default=repr)
    except (TypeError, ValueError):
        key = repr(args)
    return (name if isinstance(name, str) else None), f"{name}\x1f{key}"


class PolicyDrafter:
    """Wraps the drafter of one conversation; the middleware sets each turn's :class:`Plan`."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._plan = Plan()
        self._lock = threading.Lock()
        self.started: list[int] = []  # per limiter: early runs let through so far
        self.served: list[int] = []  # per limiter: of those, served to the model's call

    @property
    def name(self) -> str:  # what traces call the drafter
        return getattr(self.inner, "name", None) or type(self.inner).__name__

    def unused(self, i: int) -> int:
        with self._lock:
            return (self.started[i] - self.served[i]) if i < len(self.started) else 0

    def set_plan(self, plan: Plan) -> None:
        with self._lock:
            n = len(plan.composition.limiters)
            self.started += [0] * (n - len(self.started))
            self.served += [0] * (n - len(self.served))
            self._plan = plan

    def note_served(self, name: str) -> None:
        """The model's call of ``name`` was served by an early run (the limit counts it now)."""
        with self._lock:
            for i, lim in enumerate(self._plan.composition.limiters):
                if lim.covers(name) and i < len(self.served):
                    self.served[i] += 1

    async def propose(self, request: Any) -> Any:
        proposals = await self.inner.propose(request)
        if not isinstance(proposals, (list, tuple)):
            return proposals  # the core counts it as the drafter's failure
        return self.admit(proposals)

    def admit(self, proposals: Any) -> list[Any]:
        kept, seen = [], set()
        with self._lock:
            plan = self._plan
            limiters = plan.composition.limiters
            for raw in proposals:
                name, key = _name_and_key(raw)
                # kept as they are: a malformed one (the core rejects and counts it) and λ
                # samples agreeing with one let through (the same run)
                if name is not None and key not in seen:
                    if not plan.may_run(name):
                        continue
                    for i, lim in enumerate(limiters):
                        if lim.covers(name):  # an early run counts against the limit
                            plan.allowance[i] -= 1
                            self.started[i] += 1
                    seen.add(key)
                kept.append(raw)
        return kept

    def __getattr__(self, attr: str) -> Any:  # anything else the core asks a drafter
        if attr == "inner":
            raise AttributeError(attr)
        return getattr(self.inner, attr)

    # The core logs a drafter's first failure once per drafter: the user's, not this wrapper.
    def __eq__(self, other: object) -> bool:
        return isinstance(other, PolicyDrafter) and other.inner is self.inner

    def __hash__(self) -> int:
        return hash(id(self.inner))


_named: dict[type, type[PolicyDrafter]] = {}


def policy_for(inner: Any) -> PolicyDrafter:
    """A PolicyDrafter that the core's log lines call by the user's drafter's class name."""
    cls = type(inner)
    if cls not in _named:
        _named[cls] = type(cls.__name__, (PolicyDrafter,), {"__module__": __name__})
    return _named[cls](inner)
