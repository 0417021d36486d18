"""The embedded main model (SmolLM2 on CPU) on a localhost port, on one of two backends.

``backend="torch"``: :class:`EmbeddedMain` builds spectool's serving engine with
``spectool_serving``'s public factories, serves it with uvicorn on a free port in a background
thread, waits for ``/health`` and shuts down on exit; the engine stays reachable as ``.engine``.
``backend="vllm"``: vLLM's OpenAI server with spectool's plugins, a subprocess from
``.venv-vllm`` (:class:`spectool_serving.vllm.serve.VllmServer`). Both serve the same API
(chat completions, ``/cache-tool-output``), so the bench talks to either over HTTP only;
:meth:`calibrate` times one prefill and one decode for the engine-side model's φ and δ.
Imports are lazy: the core never loads torch or FastAPI.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from spectool.errors import ConfigError

__all__ = ["BACKENDS", "Calibration", "EmbeddedMain"]

BACKENDS = ("torch", "vllm")


@dataclass(frozen=True)
class Calibration:
    """Measured on the idle engine: prefill s/token (φ) and decode s/token (δ), batch of one."""

    prefill_s_per_token: float
    decode_s_per_token: float
    prefill_tokens: int
    decode_tokens: int


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EmbeddedMain:
    """``with EmbeddedMain() as main: main.base_url`` — an OpenAI-compatible engine in-process."""

    def __init__(
        self,
        source: str | None = None,
        *,
        max_batch: int = 16,
        threads: int | None = None,
        startup_timeout: float = 300.0,
        backend: str = "torch",
        dtype: str = "float32",
        max_rounds: int | None = None,
        log_path: str | None = None,
    ) -> None:
        if backend not in BACKENDS:
            raise ConfigError(f"backend must be one of {BACKENDS}, got {backend!r}")
        self.source, self.max_batch, self.startup_timeout = source, max_batch, startup_timeout
        self.threads = threads  # torch CPU threads; 1 avoids OpenMP spin-waits on a shared, busy CPU
        self.backend, self.dtype, self.max_rounds, self.log_path = backend, dtype, max_rounds, log_path
        self.app: Any = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._vllm: Any = None
        self._port = 0
        self.base_url = ""
        self.model_name = ""
        self.startup_s = 0.0

    @property
    def engine(self) -> Any:
        """The torch engine object (counters, ctx); vLLM's engine lives in another process."""
        if self.app is None:
            raise ConfigError(f"the {self.backend} backend has no in-process engine")
        return self.app.state.engine

    @property
    def label(self) -> str:
        return {
            "torch": "embedded (spectool serving engine, SmolLM2-135M-Instruct, CPU)",
            "vllm": "embedded (vLLM + spectool plugins, SmolLM2-135M-Instruct, CPU)",
        }[self.backend]

    def __enter__(self) -> EmbeddedMain:
        t0 = time.perf_counter()
        if self.backend == "vllm":
            self._enter_vllm()
        else:
            self._enter_torch()
        self.startup_s = time.perf_counter() - t0
        return self

    def _enter_vllm(self) -> None:
        from spectool_serving.vllm.serve import VllmServer, build_command, server_env, vllm_env_missing

        missing = vllm_env_missing()
        if missing:
            raise ConfigError(missing)
        port = _free_port()
        cmd = build_command(self.source or "embedded", port=port, dtype=self.dtype)
        env = server_env()
        if self.max_rounds is not None:
            env["SPECTOOL_VLLM_MAX_HOPS"] = str(self.max_rounds)
        self._vllm = VllmServer(
            cmd, port=port, env=env, log_path=self.log_path, start_timeout=max(self.startup_timeout, 600.0)
        ).__enter__()
        self.model_name = cmd[cmd.index("--served-model-name") + 1]
        self.base_url = f"{self._vllm.url}/v1"

    def _enter_torch(self) -> None:
        try:
            import uvicorn  # noqa: F401  # an ImportError here means the [serve] extra is missing

            from spectool_serving.server import build_server
        except ImportError as exc:
            from spectool.errors import missing_extra

            raise missing_extra("spectool_serving", "serve") from exc
        if self.threads:
            import torch

            torch.set_num_threads(self.threads)
        self.app = build_server(self.source, max_batch=self.max_batch, dtype=self.dtype)
        self.model_name = self.engine.model_name
        if self.max_rounds is not None:
            self.engine.ctx.max_rounds = self.max_rounds
        self._port = _free_port()
        self._serve_http()
        self.base_url = f"http://127.0.0.1:{self._port}/v1"
        try:
            self._wait_healthy(self._port)
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def _serve_http(self) -> None:
        import uvicorn

        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=self._port, log_level="warning", timeout_graceful_shutdown=1
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="spectool-bench-main", daemon=True)
        self._thread.start()

    def restart_http(self, down_s: float = 1.0) -> None:
        """Stop the HTTP server (open connections are dropped), stay down ``down_s`` seconds,
        then serve the same engine on the same port again: a server restart as clients see it."""
        if self._server is None or self._thread is None:
            raise ConfigError("restart_http needs the torch backend, entered")
        self._server.should_exit = True
        self._thread.join(timeout=30)
        time.sleep(down_s)
        self._serve_http()
        self._wait_healthy(self._port, serving_only=True)

    def _wait_healthy(self, port: int, *, serving_only: bool = False) -> None:
        """Until ``/health`` says ok (or, with ``serving_only``, answers at all: a restarted
        server over an engine that once failed a step reports itself degraded)."""
        import httpx

        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._thread is not None and not self._thread.is_alive():
                raise ConfigError(f"the embedded engine's server on port {port} exited during startup")
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2.0)
                if r.status_code == 200 and (serving_only or r.json().get("status") == "ok"):
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise ConfigError(f"the embedded engine did not become healthy within {self.startup_timeout:.0f} s")

    def __exit__(self, *exc: Any) -> None:
        if self._vllm is not None:
            self._vllm.__exit__()
            self._vllm = None
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        if self.app is not None:
            self.engine.stop()
            self.app = None

    def calibrate(self, prefill_tokens: int = 1024, decode_tokens: int = 32) -> Calibration:
        """Time the engine through its own HTTP path before any other request: φ from two
        one-token requests whose prompts differ by ≈ ``prefill_tokens``, δ from the streamed
        chunks of a ``decode_tokens`` generation (after its first token)."""
        import httpx

        url = f"{self.base_url}/chat/completions"

        def once(text: str, max_tokens: int) -> tuple[float, float, int, int]:
            body = {
                "model": self.model_name,
                "messages": [{"role": "user", "content": text}],
                "temperature": 0,
                "max_tokens": max_tokens,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            t0, first, usage = time.perf_counter(), None, dict[str, Any]()
            with httpx.stream("POST", url, json=body, timeout=600.0) as r:
                for line in r.iter_lines():
                    if not line.startswith("data: {"):
                        continue
                    chunk = __import__("json").loads(line[6:])
                    if first is None and any(c["delta"].get("content") for c in chunk.get("choices", ())):
                        first = time.perf_counter()
                    usage = chunk.get("usage") or usage
            end = time.perf_counter()
            return (
                end - t0,
                end - (first or end),
                usage.get("prompt_tokens", 0),
                usage.get("completion_tokens", 0),
            )

        once("Hi", 1)  # warm-up
        short, _, x0, _ = once("Hi", 1)
        long_, _, x1, _ = once("word " * prefill_tokens, 1)
        _, tail, _, n = once("Count from 1 to 200, one number per line.", decode_tokens)
        phi = max(long_ - short, 0.0) / max(x1 - x0, 1)
        return Calibration(phi, tail / max(n - 1, 1), x1 - x0, n)
