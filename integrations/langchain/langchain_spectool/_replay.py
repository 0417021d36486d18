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
from typing import Any, Protocol

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from pydantic import PrivateAttr

from ._effects import copy_declaration
from ._fields import stand_in_fields

__all__ = ["ReplayTool", "body_runner"]


class _Unwrappable(Protocol):
    def unwrap(self) -> Any: ...


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
            return await tool._arun(*args, **kwargs)  # noqa: SLF001

        return run_async

    def run_sync(**arguments: Any) -> Any:
        args, kwargs = _prepare(tool, arguments, tool._run)  # noqa: SLF001
        return tool._run(*args, **kwargs)  # noqa: SLF001

    return run_sync


class ReplayTool(BaseTool):
    """Stands in for ``origin`` on one call; its body replays a recorded outcome."""

    _origin: BaseTool = PrivateAttr()
    _outcome: _Unwrappable = PrivateAttr()

    @classmethod
    def of(cls, origin: BaseTool, outcome: _Unwrappable) -> ReplayTool:
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

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        return self._outcome.unwrap()

    async def _arun(self, *args: Any, **kwargs: Any) -> Any:
        return self._outcome.unwrap()
