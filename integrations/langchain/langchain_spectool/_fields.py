"""The ``BaseTool`` fields a stand-in copies from the tool it stands for, in one place.

Two stand-ins exist: ``ReplayTool`` (one call, replays an early run's outcome: LangChain runs
it as the real tool, so it takes the running fields too) and ``SpeculativeTool`` (wraps a tool
for a prebuilt graph and calls the tool itself, whose own error handling and callbacks then
act: copying those would apply them twice). Every field of ``BaseTool`` is in exactly one of
the groups below; a test keeps that true when LangChain adds one.
"""

from __future__ import annotations

from typing import Any

from langchain_core.tools import BaseTool

__all__ = ["FACE", "RUNNING", "stand_in_fields"]

#: What the model and the graph see: schema, name, how the result is returned, labels.
FACE = ("name", "description", "args_schema", "return_direct", "response_format", "metadata", "tags")
#: How LangChain runs the tool: callbacks and error handling, provider extras.
RUNNING = ("verbose", "callbacks", "handle_tool_error", "handle_validation_error", "extras")


def stand_in_fields(tool: BaseTool, *, runs_as_the_tool: bool) -> dict[str, Any]:
    """Keyword arguments for a stand-in of ``tool``: its face, and with ``runs_as_the_tool``
    (LangChain runs the stand-in in the tool's place) how it runs as well."""
    names = FACE + RUNNING if runs_as_the_tool else FACE
    return {name: getattr(tool, name) for name in names}
