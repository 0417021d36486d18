"""``create_agent`` that tells its ``SpeculativeToolMiddleware`` what it is composed with.

The same call as ``langchain.agents.create_agent``; before building the agent it hands the
middleware list (and ``interrupt_before`` / ``interrupt_after``) to every
``SpeculativeToolMiddleware`` in it, so spectool knows which approvals, limits, emulators and
retries stand between the model's calls and the tools (see ``_compose``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._middleware import SpeculativeToolMiddleware

__all__ = ["create_agent"]


def create_agent(model: Any, tools: Any = None, *, middleware: Sequence[Any] = (), **kwargs: Any) -> Any:
    """``langchain.agents.create_agent(model, tools, middleware=..., **kwargs)``, with each
    ``SpeculativeToolMiddleware`` in ``middleware`` told the list it is part of."""
    from langchain.agents import create_agent as build

    middleware = list(middleware)
    for m in middleware:
        if isinstance(m, SpeculativeToolMiddleware):
            m.compose(
                middleware,
                interrupt_before=kwargs.get("interrupt_before"),
                interrupt_after=kwargs.get("interrupt_after"),
            )
    return build(model, tools, middleware=middleware, **kwargs)
