"""spectool's companion serving engine: OpenAI-compatible, with the engine-side tool cache.

Build a server in-process::

    from spectool_serving import build_server
    app = build_server()          # embedded SmolLM2 on CPU; serve with uvicorn

Pieces are importable on their own; :mod:`.store`, :mod:`.toolcalls` and :mod:`.grammar`
do not depend on this engine (a vLLM backend reuses them).
"""

from __future__ import annotations

from .app import create_app
from .engine import Engine, EngineStats
from .models import LoadedModel, load_model
from .runner import Runner
from .scheduler import Scheduler
from .server import build_engine, build_server
from .store import StoredOutput, ToolOutputStore

__all__ = ["Engine", "EngineStats", "LoadedModel", "Runner", "Scheduler", "StoredOutput", "ToolOutputStore",
           "build_engine", "build_server", "create_app", "load_model"]
