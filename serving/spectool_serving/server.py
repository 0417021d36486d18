"""Wiring: a model source -> engine -> app, and running it with uvicorn."""

from __future__ import annotations

import socket
from typing import Any

from .app import create_app
from .engine import Engine
from .models import load_model
from .runner import Runner
from .scheduler import Scheduler
from .store import ToolOutputStore

__all__ = ["build_engine", "build_server", "serve"]


def build_engine(
    source: str | None = None,
    *,
    dtype: str = "float32",
    device: str = "cpu",
    prompt_format: str | None = None,
    max_batch: int = 16,
    kv_slots: int = 65536,
    tool_cache: bool = True,
    loaded: Any = None,
    decoding: str = "off",
    cuda_graphs: str = "auto",
) -> Engine:
    lm = loaded or load_model(source, dtype=dtype, device=device, prompt_format=prompt_format)
    return Engine(
        Runner(lm.model, lm.device, graphs=cuda_graphs),
        lm.tokenizer,
        lm.fmt,
        store=ToolOutputStore() if tool_cache else None,
        scheduler=Scheduler(max_batch=max_batch, max_slots=kv_slots),
        model_name=lm.name,
        decoding=_decoding_policy(decoding, lm),
    )


def _decoding_policy(mode: str, lm: Any) -> Any:
    """off | unispec | cast | both (tree drafts for ordinary text; see docs/tree-decoding.md)."""
    if mode == "off":
        return None
    from .tree.calibrate import cost_table
    from .tree.policy import DecodingPolicy

    dtype = str(lm.model.dtype).removeprefix("torch.")
    table = cost_table(lm.model, dtype, [1, 4], name=lm.name) if mode in ("cast", "both") else None
    return DecodingPolicy(mode, lm.model.config.vocab_size, g=8, table=table)


def build_server(source: str | None = None, *, api_keys: set[str] | None = None, **kwargs: Any):
    return create_app(build_engine(source, **kwargs), api_keys=api_keys)


def serve(
    app: Any,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    sock: socket.socket | None = None,
    log_level: str = "warning",
    access_log: bool = False,
) -> None:
    """Run ``app`` with uvicorn until interrupted; ``sock``: a socket bound already (see
    :func:`spectool_serving._bind.bind`), so the port was taken before the model loaded."""
    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=access_log)
    try:
        uvicorn.Server(config).run(sockets=[sock] if sock is not None else None)
    finally:
        app.state.engine.stop()
