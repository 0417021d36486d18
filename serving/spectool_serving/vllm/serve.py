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

from spectool.errors import ConfigError
from spectool.settings import settings

__all__ = ["VllmServer", "add_arguments", "build_command", "run", "vllm_env_missing", "vllm_python"]

ROOT = Path(__file__).resolve().parents[3]
TEMPLATE = Path(__file__).with_name("smollm2_tools.jinja")
PROPOSER = "spectool_serving.vllm.proposer.ToolCacheProposer"
EXTENSION = "spectool_serving.vllm.worker.ToolCacheWorkerExtension"


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
    if (ROOT / ".venv-vllm" / "bin" / "python").exists():
        return None
    return f"no vLLM environment at {ROOT / '.venv-vllm'} (build it: bash scripts/setup-vllm.sh)"


def _model_folder(model: str) -> tuple[str, bool]:
    """(HF folder, is the embedded SmolLM2) — GGUF files are converted once and cached."""
    from spectool.embedded import EMBEDDED_MODEL, embedded_hf_folder, gguf_to_hf

    if model in ("", "embedded", EMBEDDED_MODEL):
        return str(embedded_hf_folder()), True
    if model.endswith(".gguf"):
        return str(gguf_to_hf(Path(model))), False
    return model, False


def build_command(
    model: str,
    *,
    port: int = 8000,
    host: str = "127.0.0.1",
    dtype: str = "auto",
    served_name: str | None = None,
    num_draft_tokens: int = 8,
    o2: bool = True,
    eager: bool = True,
    tool_parser: str = "hermes",
    chat_template: str | None = None,
    strict_level: str = "parameter",
    extra: Sequence[str] = (),
    python: str | None = None,
    spectool_plugins: bool = True,
) -> list[str]:
    """The vLLM server command line with spectool's plugins (see docs/vllm.md).

    ``spectool_plugins=False`` (with ``o2=False``) is the same server as stock vLLM runs it:
    no worker extension, no proposer; pair it with ``server_env(plugins=False)``."""
    if o2 and not spectool_plugins:
        raise ValueError("O2 is a spectool plugin: o2=True needs spectool_plugins=True")
    folder, embedded = _model_folder(model)
    cmd = [
        python or vllm_python(),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        folder,
        "--host",
        host,
        "--port",
        str(port),
        "--dtype",
        dtype,
        "--served-model-name",
        served_name or ("smollm2" if embedded else Path(folder).name),
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        tool_parser,
        "--tool-strict-level",
        strict_level,
        "--enable-prompt-tokens-details",
    ]
    if spectool_plugins:
        cmd += ["--worker-extension-cls", EXTENSION]
    template = chat_template or (str(TEMPLATE) if embedded else None)
    if template:
        cmd += ["--chat-template", template]
    if o2:
        cmd += [
            "--speculative-config",
            json.dumps(
                {"method": "custom_class", "model": PROPOSER, "num_speculative_tokens": num_draft_tokens}
            ),
        ]
    if eager:
        cmd.append("--enforce-eager")
    if "--block-size" not in extra and _on_cpu(python):
        cmd += [
            "--block-size",
            "32",
        ]  # CPU attention wants multiples of 32; small blocks cache more of a chat
    return cmd + list(extra)


def _on_cpu(python: str | None) -> bool:
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
    p.add_argument("--dtype", default="auto", help="auto | float32 | bfloat16 (float32: lossless checks)")
    p.add_argument("--num-draft-tokens", type=int, default=8)
    p.add_argument("--no-o2", action="store_true", help="no tool-cache proposer")
    p.add_argument("--compile", action="store_true", help="let vLLM compile (slow start) instead of eager")
    p.add_argument("--tool-call-parser", default="hermes", help="hermes for SmolLM2/Qwen, xlam for xLAM-2")
    p.add_argument("--chat-template", default=None)
    p.add_argument("--print-command", action="store_true", help="print the vLLM command and exit")
    p.add_argument("vllm_args", nargs=argparse.REMAINDER, help="after --: passed to vLLM as is")


def run(args: argparse.Namespace) -> int:
    """Also takes ``spectool serve --backend vllm`` arguments (missing options get defaults)."""
    opt = lambda name, default=None: getattr(args, name, default)  # noqa: E731
    extra = [a for a in (opt("vllm_args") or []) if a != "--"]
    if opt("api_key"):
        extra += ["--api-key", *args.api_key]
    cmd = build_command(
        opt("model") or "embedded",
        port=opt("port", 8000),
        host=opt("host", "127.0.0.1"),
        dtype=opt("dtype", "auto"),
        num_draft_tokens=opt("num_draft_tokens", 8),
        o2=not (opt("no_o2") or opt("no_tool_cache")),
        eager=not opt("compile"),
        tool_parser=opt("tool_call_parser", "hermes"),
        chat_template=opt("chat_template"),
        extra=extra,
    )
    if opt("print_command"):
        print(" ".join(cmd))
        return 0
    if not Path(cmd[0]).exists():
        raise ConfigError(f"no vLLM interpreter at {cmd[0]}; run: bash scripts/setup-vllm.sh")
    return subprocess.call(cmd, env=server_env())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m spectool_serving.vllm.serve")
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
