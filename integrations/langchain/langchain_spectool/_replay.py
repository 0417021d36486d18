"""Run a LangChain tool's body early, then replay it through LangChain's own tool machinery.

Speculation runs only the *body* of a tool (``_run`` / ``_arun``); spectool's cache records
what it returned or raised. When the model really calls the tool, a :class:`ReplayTool`
stands in for it: it parses and validates the real arguments with the original tool, fires
the same callbacks, and returns or raises the recorded outcome from its body. So
``ToolException`` handling, output formatting (``ToolMessage``, artifacts, ``tool_call_id``)
and ToolNode's ``handle_tool_errors`` act exactly as on a real run: they are the same code.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config
from langchain_core.tools import BaseTool
from langgraph.errors import GraphBubbleUp
from pydantic import PrivateAttr

from spectool import Outcome

from ._effects import copy_declaration
from ._fields import stand_in_fields
from ._gates import EarlyInterrupt, interrupted, mark_interrupting

__all__ = ["ReplayTool", "body_runner"]


def _config_param(fn: Any) -> str | None:
    """The parameter through which LangChain hands a tool body its RunnableConfig."""
    try:
        # The same lookup BaseTool.run uses, so the body gets its config the same way.
        from langchain_core.tools.base import _get_runnable_config_param
    except ImportError:  # pragma: no cover - fallback if langchain-core moves it
        params = inspect.signature(fn).parameters
        return "config" if "config" in params else None
    return _get_runnable_config_param(fn)


def _wants_run_manager(fn: Any) -> bool:
    return "run_manager" in inspect.signature(fn).parameters


def _prepare(tool: BaseTool, arguments: dict[str, Any], fn: Any) -> tuple[tuple, dict]:
    args, kwargs = tool._to_args_and_kwargs(dict(arguments), None)  # noqa: SLF001
    if _wants_run_manager(fn):
        kwargs["run_manager"] = None  # speculative runs are not traced
    if param := _config_param(fn):
        # A fresh config, not the graph's: an early run is not part of the traced run.
        kwargs[param] = RunnableConfig(tags=[], metadata={}, callbacks=None, configurable={})
    return args, kwargs


@contextmanager
def _outside_the_graph(tool: BaseTool) -> Iterator[None]:
    """An early run sees no graph run context (an ``interrupt()`` there raises instead of
    pausing the graph or reading another node's resume values); one that reached
    ``interrupt()`` is dropped and its tool gated from then on (see ``_gates``)."""
    token = var_child_runnable_config.set(None)
    try:
        yield
    except BaseException as exc:
        if isinstance(exc, Exception | GraphBubbleUp) and interrupted(exc):
            mark_interrupting(tool)
            raise EarlyInterrupt(f"{tool.name} called interrupt() while running early") from exc
        raise
    finally:
        var_child_runnable_config.reset(token)


def body_runner(tool: BaseTool, *, asynchronous: bool) -> Any:
    """A function ``(**arguments)`` that runs the tool's body once, as a real run would.

    ``asynchronous`` picks the body a real run on that path would use: ``_run`` for
    ``invoke()``, ``_arun`` for ``ainvoke()`` (a tool may define both and they may differ).
    Validation errors and the body's own exceptions propagate: the cache stores them and
    the replay re-validates the real call, so both surface exactly where a real run has them.
    """
    if asynchronous:
        uses_arun = type(tool)._arun is not BaseTool._arun  # noqa: SLF001

        async def run_async(**arguments: Any) -> Any:
            check = tool._arun if uses_arun else tool._run  # noqa: SLF001
            args, kwargs = _prepare(tool, arguments, check)
            with _outside_the_graph(tool):
                return await tool._arun(*args, **kwargs)  # noqa: SLF001

        return run_async

    def run_sync(**arguments: Any) -> Any:
        args, kwargs = _prepare(tool, arguments, tool._run)  # noqa: SLF001
        with _outside_the_graph(tool):
            return tool._run(*args, **kwargs)  # noqa: SLF001

    return run_sync


class ReplayTool(BaseTool):
    """Stands in for ``origin`` on one call; its body replays a recorded outcome once. A
    middleware that runs the call again (``ToolRetryMiddleware`` after a replayed failure)
    runs the real tool: a recorded outcome is never served twice."""

    _origin: BaseTool = PrivateAttr()
    _outcome: Outcome = PrivateAttr()
    _spent: bool = PrivateAttr(default=False)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @classmethod
    def of(cls, origin: BaseTool, outcome: Outcome) -> ReplayTool:
        replay = cls(**stand_in_fields(origin, runs_as_the_tool=True))
        replay._origin = origin
        copy_declaration(origin, replay)
        replay._outcome = outcome
        return replay

    @property
    def origin(self) -> BaseTool:
        return self._origin

    def _to_args_and_kwargs(self, tool_input: Any, tool_call_id: str | None) -> Any:
        # The original tool parses and validates the real call, as on a real run.
        return self._origin._to_args_and_kwargs(tool_input, tool_call_id)  # noqa: SLF001

    def _take(self) -> bool:
        with self._lock:
            first, self._spent = not self._spent, True
            return first

    def _run(self, *args: Any, config: RunnableConfig, run_manager: Any = None, **kwargs: Any) -> Any:
        if self._take():
            return self._outcome.unwrap()
        body = self._origin._run  # noqa: SLF001
        return body(*args, **_extras(body, kwargs, config, run_manager))

    async def _arun(self, *args: Any, config: RunnableConfig, run_manager: Any = None, **kwargs: Any) -> Any:
        if self._take():
            return self._outcome.unwrap()
        origin = self._origin
        check = origin._arun if type(origin)._arun is not BaseTool._arun else origin._run  # noqa: SLF001
        return await origin._arun(*args, **_extras(check, kwargs, config, run_manager))  # noqa: SLF001


def _extras(body: Any, kwargs: dict[str, Any], config: RunnableConfig, run_manager: Any) -> dict[str, Any]:
    """What ``BaseTool.run`` hands ``body`` besides the arguments (its config, run manager)."""
    out = dict(kwargs)
    if param := _config_param(body):
        out[param] = config
    if run_manager is not None and _wants_run_manager(body):
        out["run_manager"] = run_manager
    return out
