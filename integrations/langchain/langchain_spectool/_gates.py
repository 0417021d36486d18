"""Which tools of the running graph sit behind a human approval, read from LangGraph's own
configuration: a call behind a gate must not run before it is let through.

* ``HumanInTheLoopMiddleware(interrupt_on={...})`` in the agent: the tools it names (a ``when``
  policy is not evaluated: the tool is gated as a whole, a draft cannot answer it).
* ``interrupt_before`` / ``interrupt_after`` on the graph (compile or invoke time): every tool,
  since a pause anywhere may be the review of the model's calls.
* A tool whose own body calls LangGraph's ``interrupt()`` (the approval asked inside the
  tool): found in the function's code, it is gated wherever it runs.

The running graph is reached through LangGraph's run configuration (the loop that scheduled
this task). Those are LangGraph internals: if they cannot be read inside a run, every tool is
taken as gated (and a WARNING says so) rather than risk running a call a human has not seen.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterator
from typing import Any

__all__ = ["ALL", "Gates", "calls_interrupt", "graph_gates", "is_gated"]

log = logging.getLogger("langchain_spectool")

ALL = "*"
#: Tool names behind a gate, or ``ALL``.
Gates = frozenset[str]
_warned = False


def graph_gates() -> Gates:
    """The gated tool names of the LangGraph run this is called from (empty outside one)."""
    try:
        from langgraph.config import get_config

        configurable = get_config().get("configurable") or {}
    except (ImportError, RuntimeError):  # not inside a LangGraph run: no graph, no gates
        return frozenset()
    loop = _running_loop(configurable)
    if loop is None:
        _warn_once()
        return frozenset({ALL})
    if getattr(loop, "interrupt_before", None) or getattr(loop, "interrupt_after", None):
        return frozenset({ALL})
    names: set[str] = set()
    for middleware in _hitl_middleware(getattr(loop, "nodes", {}) or {}):
        names.update(getattr(middleware, "interrupt_on", None) or {})
    return frozenset(names)


def is_gated(gates: Gates, name: str) -> bool:
    return ALL in gates or name in gates


def calls_interrupt(fn: Any) -> bool:
    """True when ``fn`` calls LangGraph's ``interrupt``, by that name (module level or
    closure) or as ``<module>.interrupt``: what it does before the pause must not run early."""
    try:
        from langgraph.types import interrupt
    except ImportError:
        return False
    try:
        refs = inspect.getclosurevars(inspect.unwrap(fn))
    except (TypeError, ValueError):  # not a Python function: nothing to read
        return False
    seen = {**refs.globals, **refs.nonlocals}
    if any(v is interrupt for v in seen.values()):
        return True
    return "interrupt" in refs.unbound and any(
        inspect.ismodule(v) and getattr(v, "interrupt", None) is interrupt for v in seen.values()
    )


def _running_loop(configurable: dict[str, Any]) -> Any:
    call = configurable.get("__pregel_call")
    schedule = getattr(call, "keywords", {}).get("schedule_task") if call is not None else None
    loop = getattr(schedule, "__self__", None)
    return loop if loop is not None and hasattr(loop, "nodes") else None


def _hitl_middleware(nodes: dict[str, Any]) -> Iterator[Any]:
    """The HumanInTheLoopMiddleware instances whose hooks are nodes of the graph."""
    try:
        from langchain.agents.middleware import HumanInTheLoopMiddleware
    except ImportError:
        return
    for node in nodes.values():
        for fn in _callables(getattr(node, "bound", None), depth=0):
            owner = getattr(fn, "__self__", None)
            if isinstance(owner, HumanInTheLoopMiddleware):
                yield owner


def _callables(runnable: Any, depth: int) -> Iterator[Any]:
    if runnable is None or depth > 4:
        return
    for attr in ("func", "afunc"):
        fn = getattr(runnable, attr, None)
        if fn is not None:
            yield fn
    for step in getattr(runnable, "steps", None) or ():
        yield from _callables(step, depth + 1)


def _warn_once() -> None:
    global _warned
    if not _warned:
        _warned = True
        log.warning(
            "spectool: cannot read this LangGraph run's approval gates (interrupt_on, "
            "interrupt_before); no tool runs early in it"
        )
