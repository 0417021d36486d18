"""spectool: speculative tool calling for LLM agents."""

from ._auto import AutoSamples
from ._cache import ToolCache
from ._engine_client import resolved_messages
from ._loop import AgentResult, run_agent
from ._observe import Observer, add_observer, remove_observer
from ._openai import (
    EngineSink,
    ModelRequest,
    RequestHook,
    SpeculativeOpenAI,
    SpeculativeStream,
    speculative,
)
from ._outcome import CacheCounters, Outcome
from ._speculator import DraftCounters, Speculator, Turn
from ._sync import SyncSpeculator
from ._sync_openai import SyncSpeculativeOpenAI, SyncSpeculativeStream, speculative_sync
from ._tools import Effect, Toolbox, ToolSpec, tool, tool_spec
from ._traces import TraceExample, TraceRecorder, load_traces
from ._tracing import instrument, uninstrument
from ._types import Drafter, DraftRequest, ToolCall
from ._wire import responses_input_to_messages
from .drafters import (
    CombinedDrafter,
    EndpointDrafter,
    HistoryDrafter,
    LearningDrafter,
    LocalDrafter,
    LocalDrafterOptions,
    resolve_drafter,
)
from .errors import (
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
from .keys import canonical_key

__version__ = "0.1.0"

__all__ = [
    "AgentResult",
    "AutoSamples",
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
    "LearningDrafter",
    "LocalDrafter",
    "LocalDrafterOptions",
    "ModelOutputError",
    "ModelRequest",
    "Observer",
    "Outcome",
    "RequestHook",
    "SpectoolError",
    "SpectoolInstrumentor",
    "SpeculativeOpenAI",
    "SpeculativeStream",
    "Speculator",
    "SyncSpeculativeOpenAI",
    "SyncSpeculativeStream",
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
    "add_observer",
    "canonical_key",
    "instrument",
    "load_traces",
    "remove_observer",
    "resolve_drafter",
    "resolved_messages",
    "responses_input_to_messages",
    "run_agent",
    "speculative",
    "speculative_sync",
    "tool",
    "tool_spec",
    "uninstrument",
]


def __getattr__(name: str) -> object:
    # the OpenTelemetry instrumentor imports opentelemetry: only when asked for by name
    if name == "SpectoolInstrumentor":
        from ._otel_instrumentor import SpectoolInstrumentor

        return SpectoolInstrumentor
    raise AttributeError(f"module 'spectool' has no attribute {name!r}")
