"""The one exception tree, as a public module (the tree is drawn in :mod:`spectool._errors`).

Also re-exported from :mod:`spectool`; the serving engine and integrations import it here.
"""

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
    missing_extra,
)

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
