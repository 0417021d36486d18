"""spectool's companion serving engine: OpenAI-compatible, with the engine-side tool cache.

Build a server in-process::

    from spectool_serving import build_server
    app = build_server()          # embedded SmolLM2 on CPU; serve with uvicorn

Pieces are importable on their own; :mod:`.store`, :mod:`.toolcalls` and :mod:`.grammar`
do not depend on this engine (a vLLM backend reuses them).
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> module; imported on first use, so ``spectool serve --help``, the vLLM plugins and
# the tool-output store do not pay for torch, transformers and FastAPI up front
_EXPORTS = {
    "Engine": ".engine",
    "EngineStats": ".engine",
    "LoadedModel": ".models",
    "Runner": ".runner",
    "Scheduler": ".scheduler",
    "StoredOutput": ".store",
    "ToolOutputStore": ".store",
    "build_engine": ".server",
    "build_server": ".server",
    "create_app": ".app",
    "load_model": ".models",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
