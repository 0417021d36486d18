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
from ._cache import CacheCounters, Outcome, ToolCache
from ._keys import canonical_key
from ._loop import AgentResult, run_agent
from ._openai import (
    EngineSink,
    ModelRequest,
    RequestHook,
    SpeculativeOpenAI,
    SpeculativeStream,
    speculative,
)
from ._speculator import DraftCounters, Speculator, Turn
from ._sync import SyncSpeculator
from ._tools import Effect, Toolbox, ToolSpec, tool, tool_spec
from ._traces import TraceExample, TraceRecorder, load_traces
from ._types import Drafter, DraftRequest, ToolCall
from .drafters import CombinedDrafter, EndpointDrafter, HistoryDrafter, LocalDrafter

__version__ = "0.1.0"

__all__ = [
    "AgentResult",
    "CacheCounters",
    "CombinedDrafter",
    "ConfigError",
    "DraftCounters",
    "DraftRequest",
    "Drafter",
    "DrafterError",
    "Effect",
    "EndpointDrafter",
    "EngineError",
    "EngineSink",
    "HistoryDrafter",
    "LocalDrafter",
    "ModelOutputError",
    "ModelRequest",
    "Outcome",
    "RequestHook",
    "SpectoolError",
    "SpeculativeOpenAI",
    "SpeculativeStream",
    "Speculator",
    "SyncSpeculator",
    "ToolArgumentsError",
    "ToolCache",
    "ToolCacheError",
    "ToolCall",
    "ToolDefinitionError",
    "ToolError",
    "ToolNotFoundError",
    "ToolSpec",
    "Toolbox",
    "TraceExample",
    "TraceRecorder",
    "Turn",
    "canonical_key",
    "load_traces",
    "run_agent",
    "speculative",
    "tool",
    "tool_spec",
]
