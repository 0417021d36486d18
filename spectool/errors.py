"""The one exception tree of spectool (also re-exported from :mod:`spectool`).

Every error spectool raises on purpose derives from :class:`SpectoolError`. Errors from
foreign libraries (openai, httpx, pydantic, torch) are mapped to these at one boundary with
``raise ... from exc`` so callers can catch ours without importing theirs.

    SpectoolError
    ├── ToolError
    │   ├── ToolNotFoundError        the model named a tool the registry does not have
    │   ├── ToolArgumentsError       arguments failed validation (names tool and field)
    │   └── ToolDefinitionError      a decorated function cannot become a tool
    ├── DrafterError                 a drafter failed (never escapes the main path)
    ├── ModelOutputError             the main model's output cannot be parsed
    ├── EngineError                  the serving engine / its HTTP API failed
    │   └── ToolCacheError           a /cache-tool-output post was refused
    └── ConfigError                  bad options, missing optional dependency, bad CLI input
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "DrafterError",
    "EngineError",
    "ModelOutputError",
    "SpectoolError",
    "ToolArgumentsError",
    "ToolCacheError",
    "ToolDefinitionError",
    "ToolError",
    "ToolNotFoundError",
    "missing_extra",
]


class SpectoolError(Exception):
    """Base class of every error spectool raises on purpose."""


class ToolError(SpectoolError):
    """A problem with a tool or a call to it."""

    def __init__(self, message: str, *, tool: str | None = None) -> None:
        super().__init__(message)
        self.tool = tool


class ToolNotFoundError(ToolError, KeyError):
    """The model called a tool that is not registered."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class ToolArgumentsError(ToolError, ValueError):
    """Arguments for a tool call are malformed or fail validation.

    ``field`` names the first offending argument (dotted path) when one can be named.
    """

    def __init__(self, message: str, *, tool: str | None = None, field: str | None = None) -> None:
        super().__init__(message, tool=tool)
        self.field = field


class ToolDefinitionError(ToolError, TypeError):
    """A function cannot be turned into a tool (bad options, unsupported signature)."""


class DrafterError(SpectoolError):
    """A drafter failed. Speculation swallows these; they never reach the agent."""


class ModelOutputError(SpectoolError, ValueError):
    """Model output could not be parsed into text or tool calls."""


class EngineError(SpectoolError):
    """The serving engine or its HTTP API failed."""

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class ToolCacheError(EngineError):
    """A post to ``/cache-tool-output/{response_id}`` was refused."""


class ConfigError(SpectoolError, ValueError):
    """Bad configuration: options, CLI input, or a missing optional dependency."""


def missing_extra(module: str, extra: str) -> ConfigError:
    """The error for an optional dependency that is not installed."""
    return ConfigError(
        f"{module!r} is not installed; install the extra with: pip install 'spectool[{extra}]'"
    )
