"""Start vLLM's OpenAI server with spectool's plugins, from any Python environment.

vLLM lives in its own virtual environment (``.venv-vllm``, built by
``scripts/setup-vllm.sh``) because its CPU build pins transformers and numpy; this module only
builds the command line and the environment, so it runs from the main environment too.

    python -m spectool_serving.vllm.serve --model embedded --port 8000
    spectool serve --backend vllm --model embedded
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spectool.errors import ConfigError
from spectool.settings import settings

from .._serve_options import LOG_LEVELS, resolve_dtype
from ._o2cli import add_o2_arguments, o2_choice

__all__ = ["VllmServer", "add_arguments", "build_command", "run", "vllm_env_missing", "vllm_python"]

ROOT = Path(__file__).resolve().parents[3]
TEMPLATE = Path(__file__).with_name("smollm2_tools.jinja")
PROPOSER = "spectool_serving.vllm.proposer.ToolCacheProposer"
EXTENSION = "spectool_serving.vllm.worker.ToolCacheWorkerExtension"
#: ``max_tokens`` of a chat request that sets none, applied by the endpoint plugin (vLLM's own
#: default, the rest of the context window, let one request run for 13 minutes on CPU); the
#: default of ``SPECTOOL_VLLM_DEFAULT_MAX_TOKENS``, named here for the help text. The torch
#: engine's default (spectool_serving.requests): one default on both backends.
DEFAULT_MAX_TOKENS = 256


def vllm_python() -> str:
    """The interpreter that has vLLM: ``$SPECTOOL_VLLM_PYTHON``, ``.venv-vllm``, or this one."""
    explicit = settings().vllm_python
    if explicit:
        return explicit
    local = ROOT / ".venv-vllm" / "bin" / "python"
    return str(local) if local.exists() else sys.executable


def vllm_env_missing() -> str | None:
    """Why vLLM cannot be started from here, or None when an interpreter for it exists."""
    explicit = settings().vllm_python
    if explicit:
        return None if Path(explicit).exists() else f"SPECTOOL_VLLM_PYTHON={explicit} does not exist"
    venv = ROOT / ".venv-vllm"
    if (venv / "bin" / "python").exists():
        # scripts/setup-vllm.sh writes its stamp last: without it the install stopped part-way
        if (venv / ".spectool-setup").exists():
            return None
        return f"the vLLM environment at {venv} is incomplete (finish it: bash scripts/setup-vllm.sh)"
    return f"no vLLM environment at {venv} (build it: bash scripts/setup-vllm.sh)"


def _model_folder(model: str) -> tuple[str, bool]:
    """(HF folder, is the embedded SmolLM2) — GGUF files are converted once and cached."""
    from spectool.embedded import EMBEDDED_MODEL, embedded_hf_folder, gguf_to_hf

    if model in ("", "embedded", EMBEDDED_MODEL):
        return str(embedded_hf_folder()), True
    if model.endswith(".gguf"):
        return str(gguf_to_hf(Path(model))), False
    return model, False


def served_names(model: str, folder: str, embedded: bool) -> list[str]:
    """Every name a request may use: the one the user gave first (as given), then the folder's
    name; the embedded model also answers to ``smollm2`` (what the docs and examples send)."""
    names = [model or "embedded", Path(folder.rstrip("/")).name]
    if embedded:
        from spectool.embedded import EMBEDDED_MODEL

        names = ["smollm2", *names, EMBEDDED_MODEL]
    return list(dict.fromkeys(n for n in names if n))


def build_command(
    model: str,
    *,
    port: int = 8000,
    host: str = "127.0.0.1",
    dtype: str = "auto",
    served_name: str | Sequence[str] | None = None,
    num_draft_tokens: int = 8,
    o2: bool = True,
    eager: bool = True,
    tool_parser: str = "hermes",
    chat_template: str | None = None,
    extra: Sequence[str] = (),
    python: str | None = None,
    spectool_plugins: bool = True,
) -> list[str]:
    """The vLLM server command line with spectool's plugins (see docs/vllm.md).

    ``extra`` is vLLM's own flags, passed as given; a flag this function would set itself
    (``--tool-call-parser``, ``--served-model-name``, ``--dtype`` …) is then left to ``extra``.
    ``spectool_plugins=False`` (with ``o2=False``) is the same server as stock vLLM runs it:
    no worker extension, no proposer; pair it with ``server_env(plugins=False)``."""
    if o2 and not spectool_plugins:
        raise ValueError("O2 is a spectool plugin: o2=True needs spectool_plugins=True")
    folder, embedded = _model_folder(model)
    names = [served_name] if isinstance(served_name, str) else list(served_name or ())
    options: list[tuple[str, list[str]]] = [
        ("--host", [host]),
        ("--port", [str(port)]),
        ("--dtype", [dtype]),
        ("--served-model-name", names or served_names(model, folder, embedded)),
        ("--tool-call-parser", [tool_parser]),
        ("--tool-strict-level", ["parameter"]),
    ]
    template = chat_template or (str(TEMPLATE) if embedded else None)
    if template:
        options.append(("--chat-template", [template]))
    if _on_cpu():  # CPU attention wants multiples of 32; small blocks cache more of a chat
        options.append(("--block-size", ["32"]))
    given = {a.split("=", 1)[0] for a in extra if a.startswith("-")}
    cmd = [python or vllm_python(), "-m", _entry(given), "--model", folder]
    for flag, values in options:
        if flag not in given:
            cmd += [flag, *values]
    cmd += ["--enable-auto-tool-choice", "--enable-prompt-tokens-details"]
    if spectool_plugins:
        cmd += ["--worker-extension-cls", EXTENSION]
    if o2:
        cmd += [
            "--speculative-config",
            json.dumps(
                {"method": "custom_class", "model": PROPOSER, "num_speculative_tokens": num_draft_tokens}
            ),
        ]
    if eager and "--enforce-eager" not in given:
        cmd.append("--enforce-eager")
    return cmd + list(extra)


#: vLLM flags only its ``vllm serve`` launcher honours (the api_server module ignores them)
_LAUNCHER_FLAGS = {"--api-server-count", "--data-parallel-size", "-dp", "--headless"}


def _entry(given: set[str]) -> str:
    """The module that starts vLLM: ``vllm serve``'s launcher when several processes are asked
    for (``_launch``: the console script fails on the CPU build), else the API server itself."""
    if given & _LAUNCHER_FLAGS:
        return "spectool_serving.vllm._launch"
    return "vllm.entrypoints.openai.api_server"


def _on_cpu() -> bool:
    return settings().vllm_flavour == "cpu"


def server_env(base: dict | None = None, *, plugins: bool = True) -> dict:
    """The server's environment: spectool's plugins allowed (vLLM loads only those listed in
    ``VLLM_PLUGINS``), or with ``plugins=False`` none at all (set and empty)."""
    env = dict(os.environ if base is None else base)
    if plugins:
        env["VLLM_PLUGINS"] = ",".join(x for x in [env.get("VLLM_PLUGINS", ""), "spectool"] if x)
    else:
        env["VLLM_PLUGINS"] = ""
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    env.setdefault("VLLM_USE_V2_MODEL_RUNNER", "0")  # custom_class proposers need the V1 runner
    return env


class VllmServer:
    """A vLLM server subprocess: ``with VllmServer(cmd) as s: s.url``. Waits for /health."""

    def __init__(
        self,
        cmd: list[str],
        *,
        port: int,
        log_path: str | None = None,
        env: dict | None = None,
        start_timeout: float = 300.0,
    ) -> None:
        self.cmd, self.port, self.env, self.start_timeout = cmd, port, env or server_env(), start_timeout
        self.log_path = log_path or os.devnull
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> VllmServer:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            self.cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ConfigError(f"vLLM exited with {self.proc.returncode}; see {self.log_path}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(1.0)
        self.__exit__()
        raise ConfigError(f"vLLM did not start within {self.start_timeout:.0f} s; see {self.log_path}")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            import signal

            os.killpg(self.proc.pid, signal.SIGTERM)  # our own session: the engine's children too
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="embedded", help="HF folder/id, a .gguf file, or 'embedded'")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--dtype",
        default="auto",
        help="auto (bfloat16 on a GPU, float32 on a CPU) | float32 | bfloat16 | float16",
    )
    p.add_argument("--num-draft-tokens", type=int, default=8)
    p.add_argument("--no-o2", action="store_true", help="no tool-cache proposer (--o2 off)")
    add_o2_arguments(p)
    p.add_argument("--compile", action="store_true", help="let vLLM compile (slow start) instead of eager")
    p.add_argument("--tool-call-parser", default="hermes", help="hermes for SmolLM2/Qwen, xlam for xLAM-2")
    p.add_argument("--chat-template", default=None)
    p.add_argument(
        "--default-max-tokens",
        type=int,
        default=None,
        help=f"max_tokens of a chat request that sets none (default {DEFAULT_MAX_TOKENS}, "
        "$SPECTOOL_VLLM_DEFAULT_MAX_TOKENS; 0: vLLM's own, the rest of the context)",
    )
    p.add_argument("--log-level", default="info", choices=LOG_LEVELS, help="vLLM's and uvicorn's log level")
    p.add_argument("--no-access-log", action="store_true", help="no line per request")
    p.add_argument("--print-command", action="store_true", help="print the vLLM command and exit")


def _passed(args: argparse.Namespace) -> list[str]:
    """vLLM's own flags: whatever argparse did not know (``--`` separators dropped)."""
    unknown = list(getattr(args, "_unknown", None) or []) + list(getattr(args, "vllm_args", None) or [])
    return [a for a in unknown if a != "--"]


def run(args: argparse.Namespace) -> int:
    """Also takes ``spectool serve --backend vllm`` arguments (missing options get defaults).

    Unknown flags go to vLLM as given. The server replaces this process (``exec``), so a
    signal sent to ``spectool serve`` reaches vLLM's API server, which stops its engine
    processes itself: nothing is left behind."""

    def opt(name: str, default: Any = None) -> Any:
        return getattr(args, name, default)

    extra = _passed(args)
    if opt("api_key"):
        extra += ["--api-key", *args.api_key]
    level = opt("log_level") or "info"
    extra += ["--uvicorn-log-level", level] if "--uvicorn-log-level" not in extra else []
    if opt("no_access_log") and "--disable-uvicorn-access-log" not in extra:
        extra.append("--disable-uvicorn-access-log")
    port, host = opt("port", 8000), opt("host", "127.0.0.1")
    if not opt("print_command"):
        from .._bind import check_free

        check_free(host, port)  # fail in a second, not after converting and loading the model
    choice = o2_choice(args, extra)
    print(f"spectool serve: {choice.reason}", file=sys.stderr, flush=True)
    cmd = build_command(
        opt("model") or "embedded",
        port=port,
        host=host,
        dtype=resolve_dtype(opt("dtype") or "auto", gpu=not _on_cpu()),
        num_draft_tokens=opt("num_draft_tokens", 8),
        o2=choice.on,
        eager=not opt("compile"),
        tool_parser=opt("tool_call_parser") or "hermes",
        chat_template=opt("chat_template"),
        extra=extra,
    )
    if opt("print_command"):
        print(" ".join(cmd))
        return 0
    if not Path(cmd[0]).exists():
        raise ConfigError(f"no vLLM interpreter at {cmd[0]}; run: bash scripts/setup-vllm.sh")
    env = server_env()
    env.setdefault("VLLM_LOGGING_LEVEL", level.upper())
    if opt("default_max_tokens") is not None:
        env["SPECTOOL_VLLM_DEFAULT_MAX_TOKENS"] = str(args.default_max_tokens)
    if opt("no_tool_cache"):
        env["SPECTOOL_VLLM_O3"] = "0"  # O3 too, as on the torch engine (O2 is off: choice above)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(cmd[0], cmd, env)  # never returns


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m spectool_serving.vllm.serve", epilog="Other flags are passed to vLLM as given."
    )
    add_arguments(p)
    args, unknown = parse_passing(p, sys.argv[1:] if argv is None else argv)
    args._unknown = unknown
    return run(args)


def parse_passing(p: argparse.ArgumentParser, argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """``p``'s options, and the rest for vLLM in order: flags ``p`` does not know, and
    everything after a ``--`` as given (never read by ``p``)."""
    argv = list(argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args, unknown = p.parse_known_args(argv[:cut])
    return args, unknown + argv[cut + 1 :]


if __name__ == "__main__":
    sys.exit(main())
