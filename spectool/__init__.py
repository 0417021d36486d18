"""spectool: speculative tool calling for LLM agents."""

from ._errors import (
    ConfigError,
    DrafterError,
    EngineError,
    ModelOutputError,
    SpectoolError,
    ToolArgumentsError,
    ToolCacheError,
    ToolDefinitionError,
    ToolError,
    ToolNotFoundError,
)
from ._keys import canonical_key
from ._tools import Effect, Toolbox, ToolSpec, tool, tool_spec
from ._types import Drafter, DraftRequest, ToolCall

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "DraftRequest",
    "Drafter",
    "DrafterError",
    "Effect",
    "EngineError",
    "ModelOutputError",
    "SpectoolError",
    "ToolArgumentsError",
    "ToolCacheError",
    "ToolCall",
    "ToolDefinitionError",
    "ToolError",
    "ToolNotFoundError",
    "ToolSpec",
    "Toolbox",
    "canonical_key",
    "tool",
    "tool_spec",
]
