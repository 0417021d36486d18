"""The ``spectool`` command. Each job lives in its own module, imported lazily."""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> (module with `add_arguments(parser)` and `run(args) -> int`, help)
COMMANDS: dict[str, tuple[str, str]] = {
    "bench": ("spectool._bench_cli", "BFCL multi-agent benchmark of speculative tool calling"),
    "calibrate": ("spectool._decode_cli", "re-measure tree-decoding cost tables and draft size g*"),
    "drafters": ("spectool._drafters_cli", "evaluate drafters on BFCL ground truth (eval) or tune one (tune)"),
    "decode-bench": ("spectool._decode_cli", "tree speculative decoding vs autoregressive and prompt lookup"),
    "model": ("spectool._model_cli", "the performance model: calculator and Figure 3"),
    "overhead": ("spectool._overhead", "middleware overhead per turn and time saved (scripted)"),
    "serve": ("spectool._serve_cli", "serve a model with the engine-side tool cache (OpenAI API)"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="spectool", description="Speculative tool calling for LLM agents.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_) in COMMANDS.items():
        p = sub.add_parser(name, help=help_)
        p.set_defaults(_module=module)
        importlib.import_module(module).add_arguments(p)
    args = parser.parse_args(argv)
    if not getattr(args, "_module", None):
        parser.print_help()
        return 2
    from ._errors import SpectoolError

    try:
        return int(importlib.import_module(args._module).run(args) or 0)
    except SpectoolError as exc:
        print(f"spectool {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
