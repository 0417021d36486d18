"""The ``spectool`` command. Each job lives in its own module, imported only when it runs.

The core never imports the serving engine or the benchmarks: a command is a module *name*
(``add_arguments(parser)`` and ``run(args) -> int``), imported by :func:`importlib.import_module`
once the user picked it. Commands come from two places, merged:

* :data:`COMMANDS`, the built-in table (the core's own commands and the serving engine's,
  which this distribution ships);
* the ``spectool.commands`` entry-point group, so another distribution adds one without
  touching this file::

      [project.entry-points."spectool.commands"]
      my-job = "my_package.my_job_cli"      # module; its docstring's first line is the help

A command whose module cannot be imported (its extra is not installed) still shows in
``--help`` and fails with the install hint when run. The measurement commands (``bench``,
``soak``, …) come from the ``spectool-bench`` distribution this way; without it, running one
says to install it (:data:`ELSEWHERE`). ``spectool drafters`` is the core's own (``tune``);
spectool-bench adds ``eval`` to it the same way, through the ``spectool.drafters.commands``
group (:mod:`spectool.drafters._cli`).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from importlib import metadata

# subcommand -> (module with `add_arguments(parser)` and `run(args) -> int`, help)
COMMANDS: dict[str, tuple[str, str]] = {
    "model": ("spectool._model_cli", "the performance model: calculator and Figure 3"),
    "drafters": ("spectool.drafters._cli", "tune the local drafter; evaluate drafters (spectool-bench)"),
    "serve": ("spectool_serving._serve_cli", "serve a model with the engine-side tool cache (OpenAI API)"),
}

# Commands another distribution of this project registers; named here only so that running one
# without it installed says what to install instead of "invalid choice".
ELSEWHERE: dict[str, str] = {
    name: "spectool-bench" for name in ("bench", "soak", "calibrate", "decode-bench", "overhead")
}

ENTRY_POINT_GROUP = "spectool.commands"


def commands(describe: bool = True) -> dict[str, tuple[str, str]]:
    """The built-in table plus every ``spectool.commands`` entry point (which wins on a clash).

    An entry point's help is its module's docstring, so ``describe=False`` leaves it empty
    rather than import every plug-in module when one command runs."""
    table = dict(COMMANDS)
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        help_ = table.get(ep.name, ("", ""))[1] or (_doc_line(ep.module) if describe else "")
        table[ep.name] = (ep.module, help_)
    return table


def _doc_line(module: str) -> str:
    try:
        doc = importlib.import_module(module).__doc__ or ""
    except ImportError:
        return ""
    line = doc.strip().splitlines()[0] if doc.strip() else ""
    # a command module's docstring opens with its own name (``spectool bench``: …); the listing has it
    return line.split(": ", 1)[1] if line.startswith("``spectool ") and ": " in line else line


def _not_installed(command: str) -> str:
    dist = ELSEWHERE[command]
    return (
        f"this command comes with the {dist} distribution, which is not installed: "
        f"pip install {dist} (in a clone of the repository: pip install -e bench)"
    )


def _chosen(argv: list[str], names: set[str]) -> str | None:
    """The subcommand named on the command line (first bare word), if any."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in names else None
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    table = commands(describe=False)
    chosen = _chosen(argv, set(table))
    if chosen is None:
        table = commands()  # the listing of `spectool --help` shows every command's help
    parser = argparse.ArgumentParser(prog="spectool", description="Speculative tool calling for LLM agents.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    from .errors import SpectoolError, missing_extra

    if chosen is None and (wanted := _chosen(argv, set(ELSEWHERE))) is not None:
        print(f"spectool {wanted}: error: {_not_installed(wanted)}", file=sys.stderr)
        return 1
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
    for name in sorted(ELSEWHERE.keys() - table.keys()):  # listed, so `--help` says where they are
        sub.add_parser(name, help=f"(not installed: pip install {ELSEWHERE[name]})")
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
