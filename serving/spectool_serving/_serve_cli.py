"""``spectool serve``: the OpenAI-compatible engine with the tool cache (needs spectool[serve]).

With no arguments it serves the embedded SmolLM2-135M-Instruct on CPU at 127.0.0.1:8000.
With ``--backend vllm``, flags this command does not know are vLLM's own and go to it as given.
A flag means the same on both backends (``--dtype auto``: bfloat16 on a GPU, float32 on a CPU);
one that only one backend has is an error on the other, naming what to use there instead.
"""

from __future__ import annotations

import argparse
import logging

from spectool.errors import ConfigError, missing_extra

from ._serve_options import LOG_LEVELS, resolve_dtype
from .vllm._o2cli import add_o2_arguments

#: ``spectool`` parses this command with ``parse_known_args`` and hands the rest over as
#: ``args._unknown``: vLLM's own flags under ``--backend vllm``, an error otherwise.
PASS_UNKNOWN_ARGS = True

DTYPES = ["auto", "float32", "bfloat16", "float16"]
#: the torch engine's defaults of the flags only it has (None on the command line: not given)
TORCH_DEFAULTS = {
    "device": "cpu",
    "max_batch": 16,
    "kv_slots": 65536,
    "decoding": "off",
    "cuda_graphs": "auto",
}
#: what to use under --backend vllm instead of each torch-only flag
VLLM_EQUIVALENT = {
    "device": "vLLM runs on the device its build targets (SPECTOOL_VLLM_FLAVOUR=cpu|gpu when "
    "building .venv-vllm); choose GPUs with CUDA_VISIBLE_DEVICES",
    "max_batch": "vLLM's equivalent is --max-num-seqs N",
    "kv_slots": "vLLM sizes its KV cache in memory, not token slots: VLLM_CPU_KVCACHE_SPACE=<GiB> "
    "on a CPU, --gpu-memory-utilization on a GPU",
    "decoding": "tree decoding is the torch engine's; on vLLM spectool drafts with O2 "
    "(--o2 auto|on|off, --num-draft-tokens)",
    "cuda_graphs": "vLLM runs eager here unless --compile, which lets vLLM compile and capture "
    "its own CUDA graphs",
}
#: flags only the vLLM backend has, and why they mean nothing to the torch engine
VLLM_ONLY = {
    "compile": "the torch engine has no compile switch",
    "print_command": "the torch engine is not a command to print",
    "default_max_tokens": "the torch engine's default max_tokens is the same (256) and has no flag",
}


def _refuse_other_backends_flags(args: argparse.Namespace) -> None:
    flag = lambda name: "--" + name.replace("_", "-")  # noqa: E731
    if args.backend == "vllm":
        given = [n for n in TORCH_DEFAULTS if getattr(args, n, None) is not None]
        if given:
            raise ConfigError(
                "; ".join(f"{flag(n)} is the torch engine's, not vLLM's: {VLLM_EQUIVALENT[n]}" for n in given)
            )
        return
    given = [n for n in VLLM_ONLY if getattr(args, n, None) not in (None, False)]
    if given:
        raise ConfigError("; ".join(f"{flag(n)} is for --backend vllm: {VLLM_ONLY[n]}" for n in given))
    for name, default in TORCH_DEFAULTS.items():
        if getattr(args, name, None) is None:
            setattr(args, name, default)


def add_arguments(p: argparse.ArgumentParser, *, positional: bool = True) -> None:
    if positional:
        p.add_argument(
            "model",
            nargs="?",
            default=None,
            help="HF folder or hub id, a .gguf file, or omit for the embedded SmolLM2",
        )
    p.add_argument("--model", dest="model_flag", default=None, help="the same as the positional model")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--device", default=None, help="torch backend: cpu (default) or cuda[:N]")
    p.add_argument(
        "--dtype", default="auto", choices=DTYPES, help="auto (default): bfloat16 on a GPU, float32 on a CPU"
    )
    p.add_argument(
        "--format",
        dest="prompt_format",
        default=None,
        help="prompt format: chatml, qwen, llama3, xlam (default: detected)",
    )
    p.add_argument(
        "--max-batch", type=int, default=None, help="torch backend: sequences decoded together (16)"
    )
    p.add_argument(
        "--kv-slots", type=int, default=None, help="torch backend: KV budget in token slots (65536)"
    )
    p.add_argument(
        "--api-key",
        action="append",
        default=None,
        help="accepted API key (repeatable); each key is its own tenant",
    )
    p.add_argument(
        "--no-tool-cache", action="store_true", help="plain engine: no O2 and no O3 (both backends)"
    )
    p.add_argument(
        "--decoding",
        default=None,
        choices=["off", "unispec", "cast", "both"],
        help="torch backend: tree-drafted text decoding (docs/tree-decoding.md; default off); "
        "O2 drafts first",
    )
    p.add_argument(
        "--cuda-graphs",
        default=None,
        choices=["auto", "off"],
        help="auto: on a CUDA device, one-token decode steps replay CUDA graphs captured per "
        "batch bucket (docs/serving.md); off: every step eager. A CPU is unaffected",
    )
    p.add_argument(
        "--backend",
        default="torch",
        choices=["torch", "vllm"],
        help="torch: spectool's engine; vllm: vLLM's server with spectool's plugins "
        "(needs .venv-vllm: bash scripts/setup-vllm.sh; see docs/vllm.md); other flags go to vLLM",
    )
    p.add_argument("--log-level", default="info", choices=LOG_LEVELS, help="server log level")
    p.add_argument("--no-access-log", action="store_true", help="no line per request")
    p.add_argument("--compile", action="store_true", help="vllm backend: compile instead of eager")
    p.add_argument("--print-command", action="store_true", help="vllm backend: print vLLM's command, exit")
    p.add_argument(
        "--default-max-tokens",
        type=int,
        default=None,
        help="vllm backend: max_tokens of a request that sets none (default 256, as on torch; 0: vLLM's own)",
    )
    add_o2_arguments(p)


def _vllm_args(args: argparse.Namespace) -> argparse.Namespace:
    """Parse the command line again without the positional model, so the value of a vLLM flag
    (``--max-model-len 4096``) is never taken for the model; a bare first word is the model."""
    p = argparse.ArgumentParser(add_help=False)
    add_arguments(p, positional=False)
    from .vllm.serve import parse_passing

    again, unknown = parse_passing(p, args._argv)
    again.model = None
    if unknown and not unknown[0].startswith("-"):
        again.model = unknown.pop(0)
    again._unknown = unknown
    return again


def run(args: argparse.Namespace) -> int:
    if args.backend == "vllm" and getattr(args, "_argv", None) is not None:
        args = _vllm_args(args)
    args.model = args.model_flag or args.model
    _refuse_other_backends_flags(args)
    # spectool's own log lines at the chosen level (debug also shows the dependencies' chatter
    # while the model loads, which is hidden otherwise)
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("spectool").setLevel(args.log_level.upper())
    if args.backend == "vllm":
        try:
            from .vllm.serve import run as serve_vllm
        except ImportError as exc:
            raise missing_extra("spectool_serving", "serve") from exc
        return serve_vllm(args)
    unknown = list(getattr(args, "_unknown", None) or [])
    if unknown:
        raise ConfigError(f"unrecognized arguments: {' '.join(unknown)} (vLLM flags need --backend vllm)")
    try:
        from ._bind import bind
        from .server import build_server, serve
    except ImportError as exc:
        raise missing_extra("spectool_serving", "serve") from exc
    sock = bind(args.host, args.port)  # before the model loads: a busy port fails at once
    try:
        app = build_server(
            args.model,
            api_keys=set(args.api_key) if args.api_key else None,
            dtype=resolve_dtype(args.dtype, gpu=args.device.startswith("cuda")),
            device=args.device,
            prompt_format=args.prompt_format,
            max_batch=args.max_batch,
            kv_slots=args.kv_slots,
            tool_cache=not args.no_tool_cache,
            decoding=args.decoding,
            cuda_graphs=args.cuda_graphs,
        )
    except BaseException:
        sock.close()
        raise
    print(f"spectool serve: {app.state.engine.model_name} on http://{args.host}:{args.port}/v1", flush=True)
    serve(app, args.host, args.port, sock=sock, log_level=args.log_level, access_log=not args.no_access_log)
    return 0
