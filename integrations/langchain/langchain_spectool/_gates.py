"""Tools that ask LangGraph's ``interrupt()`` for a human's answer: they never run early.

* A tool whose own body calls ``interrupt`` (by that name, module level or closure, or as
  ``<module>.interrupt``) is found in its code and gated wherever it runs.
* A tool that reaches ``interrupt`` another way (through a helper function) is found when it
  does so while running early: that run is dropped (the model's call runs the tool through
  LangGraph, where the interrupt works), the tool is gated from then on, and a WARNING says so.

Early runs execute outside the graph's run context, so an ``interrupt()`` there raises
instead of pausing the graph or reading another node's resume values.

Gates from the agent's middleware (``interrupt_on``, unknown approval middleware,
``interrupt_before``) are read from the middleware list: see ``_compose``.
"""

from __future__ import annotations

import inspect
import logging
import types
import weakref
from typing import Any

from langchain_core.tools import BaseTool

from spectool import SpectoolError

__all__ = ["EarlyInterrupt", "calls_interrupt", "interrupted", "mark_interrupting", "marked_interrupting"]

log = logging.getLogger("langchain_spectool")

# id(tool) -> name, for tools that called interrupt() while running early (entry goes with the tool)
_INTERRUPTING: dict[int, str] = {}


class EarlyInterrupt(SpectoolError):
    """An early run reached ``interrupt()``: its outcome is never served (the model's call
    runs the tool for real)."""


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


def interrupted(exc: BaseException) -> bool:
    """True when ``exc`` comes out of LangGraph's ``interrupt()`` (a GraphBubbleUp, or the
    error ``interrupt`` raises outside a graph run), found by the function's own code."""
    try:
        from langgraph.errors import GraphBubbleUp
        from langgraph.types import interrupt
    except ImportError:
        return False
    if isinstance(exc, GraphBubbleUp):
        return True
    code = inspect.unwrap(interrupt).__code__
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        tb: types.TracebackType | None = e.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code is code:
                return True
            tb = tb.tb_next
        e = e.__cause__ or e.__context__
    return False


def mark_interrupting(tool: BaseTool) -> None:
    """``tool`` called interrupt() while running early: gated from now on (WARNING once)."""
    key = id(tool)
    if key in _INTERRUPTING:
        return
    _INTERRUPTING[key] = tool.name
    weakref.finalize(tool, _INTERRUPTING.pop, key, None)  # the entry goes with the tool
    log.warning(
        "spectool: tool %r called interrupt() while running early; it never runs early from "
        "now on (declare it with speculable(..., gated=True) to say so up front)",
        tool.name,
    )


def marked_interrupting(tool: Any) -> bool:
    return id(tool) in _INTERRUPTING
