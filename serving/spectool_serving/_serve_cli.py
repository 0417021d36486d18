"""``spectool serve``: the OpenAI-compatible engine with the tool cache (needs spectool[serve]).

With no arguments it serves the embedded SmolLM2-135M-Instruct on CPU at 127.0.0.1:8000.
"""

from __future__ import annotations

import argparse

from spectool.errors import missing_extra


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "model",
        nargs="?",
        default=None,
        help="HF folder or hub id, a .gguf file, or omit for the embedded SmolLM2",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument(
        "--format",
        dest="prompt_format",
        default=None,
        help="prompt format: chatml, qwen, llama3, xlam (default: detected)",
    )
    p.add_argument("--max-batch", type=int, default=16, help="sequences decoded together")
    p.add_argument("--kv-slots", type=int, default=65536, help="KV budget in token slots")
    p.add_argument(
        "--api-key",
        action="append",
        default=None,
        help="accepted API key (repeatable); each key is its own tenant",
    )
    p.add_argument("--no-tool-cache", action="store_true", help="plain engine (no O2/O3)")
    p.add_argument(
        "--decoding",
        default="off",
        choices=["off", "unispec", "cast", "both"],
        help="tree-drafted text decoding (docs/tree-decoding.md); O2 drafts first",
    )
    p.add_argument(
        "--backend",
        default="torch",
        choices=["torch", "vllm"],
        help="torch: spectool's engine; vllm: vLLM's server with spectool's plugins "
        "(needs .venv-vllm: bash scripts/setup-vllm.sh; see docs/vllm.md)",
    )


def run(args: argparse.Namespace) -> int:
    if args.backend == "vllm":
        try:
            from .vllm import serve as serve_vllm
        except ImportError as exc:
            raise missing_extra("spectool_serving", "serve") from exc
        return serve_vllm(args)
    try:
        from .server import build_server, serve
    except ImportError as exc:
        raise missing_extra("spectool_serving", "serve") from exc
    app = build_server(
        args.model,
        api_keys=set(args.api_key) if args.api_key else None,
        dtype=args.dtype,
        device=args.device,
        prompt_format=args.prompt_format,
        max_batch=args.max_batch,
        kv_slots=args.kv_slots,
        tool_cache=not args.no_tool_cache,
        decoding=args.decoding,
    )
    print(f"spectool serve: {app.state.engine.model_name} on http://{args.host}:{args.port}/v1")
    serve(app, args.host, args.port)
    return 0
