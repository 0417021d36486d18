"""The ``spectool`` command. Each job lives in its own module, imported only when it runs.

The core never imports the serving engine or the benchmarks: a command is a module *name*
(``add_arguments(parser)`` and ``run(args) -> int``), imported by :func:`importlib.import_module`
once the user picked it. Commands come from two places, merged:

* :data:`COMMANDS`, the built-in table (the core's own commands and those of the packages
  this distribution ships: serving, measurement);
* the ``spectool.commands`` entry-point group, so another distribution adds one without
  touching this file::

      [project.entry-points."spectool.commands"]
      my-job = "my_package.my_job_cli"      # module; its docstring's first line is the help

A command whose module cannot be imported (its extra is not installed) still shows in
``--help`` and fails with the install hint when run.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from importlib import metadata

# subcommand -> (module with `add_arguments(parser)` and `run(args) -> int`, help)
COMMANDS: dict[str, tuple[str, str]] = {
    "bench": ("spectool.bench._bench_cli", "BFCL multi-agent benchmark of speculative tool calling"),
    "soak": ("spectool.bench._soak", "many agents on the embedded engine under faults: is anything lost?"),
    "calibrate": ("spectool.bench._decode_cli", "re-measure tree-decoding cost tables and draft size g*"),
    "decode-bench": (
        "spectool.bench._decode_cli",
        "tree speculative decoding vs autoregressive and prompt lookup",
    ),
    "drafters": (
        "spectool.bench._drafters_cli",
        "evaluate drafters on BFCL ground truth (eval) or tune one (tune)",
    ),
    "model": ("spectool._model_cli", "the performance model: calculator and Figure 3"),
    "overhead": ("spectool._overhead", "middleware overhead per turn and time saved (scripted)"),
    "serve": ("spectool_serving._serve_cli", "serve a model with the engine-side tool cache (OpenAI API)"),
}

ENTRY_POINT_GROUP = "spectool.commands"


def commands() -> dict[str, tuple[str, str]]:
    """The built-in table plus every ``spectool.commands`` entry point (which wins on a clash)."""
    table = dict(COMMANDS)
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        help_ = table.get(ep.name, ("", ""))[1] or _doc_line(ep.module)
        table[ep.name] = (ep.module, help_)
    return table


def _doc_line(module: str) -> str:
    try:
        doc = importlib.import_module(module).__doc__ or ""
    except ImportError:
        return ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def _chosen(argv: list[str], names: set[str]) -> str | None:
    """The subcommand named on the command line (first bare word), if any."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in names else None
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    table = commands()
    parser = argparse.ArgumentParser(prog="spectool", description="Speculative tool calling for LLM agents.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = _chosen(argv, set(table))
    from ._errors import SpectoolError, missing_extra

    pass_unknown = False
    for name, (module, help_) in table.items():
        p = sub.add_parser(name, help=help_)
        p.set_defaults(_module=module)
        if name != chosen:
            continue  # its options are parsed only when it is the one that runs
        try:
            mod = importlib.import_module(module)
            mod.add_arguments(p)
        except ModuleNotFoundError as exc:
            print(f"spectool {name}: error: {missing_extra(exc.name or module, 'serve')}", file=sys.stderr)
            return 1
        # a command that wraps another program (serve --backend vllm) takes that program's flags
        pass_unknown = bool(getattr(mod, "PASS_UNKNOWN_ARGS", False))
    if pass_unknown:
        args, unknown = parser.parse_known_args(argv)
        args._unknown, args._argv = unknown, argv[argv.index(chosen) + 1 :] if chosen else []
    else:
        args = parser.parse_args(argv)
    if not getattr(args, "_module", None):
        parser.print_help()
        return 2
    try:
        return int(importlib.import_module(args._module).run(args) or 0)
    except SpectoolError as exc:
        print(f"spectool {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
