"""``spectool drafters``: tune the local drafter on traces; evaluate drafters (spectool-bench).

    spectool drafters tune --traces train.jsonl --out adapter/
    spectool drafters eval --workload tau2 --domains airline,retail --split test

``tune`` ships with the core (:mod:`spectool.drafters.tune`). Other subcommands come from the
``spectool.drafters.commands`` entry-point group, as the ``spectool`` commands come from
``spectool.commands`` (:mod:`spectool.cli`); the measurement distribution adds ``eval``::

    [project.entry-points."spectool.drafters.commands"]
    eval = "spectool_bench.drafters._cli"   # add_arguments(parser), run(args) -> int
"""

from __future__ import annotations

import argparse
import importlib
from importlib import metadata

from ..errors import ConfigError

ENTRY_POINT_GROUP = "spectool.drafters.commands"

#: subcommand -> (module with ``add_arguments(parser)`` and ``run(args) -> int``, help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "tune": ("spectool.drafters.tune", "LoRA-tune the local drafter on drafting traces"),
}

#: subcommands another distribution adds; listed without it, so running one says what to install
ELSEWHERE: dict[str, str] = {"eval": "spectool-bench"}


def subcommands() -> dict[str, tuple[str, str]]:
    """:data:`SUBCOMMANDS` plus the entry points of :data:`ENTRY_POINT_GROUP` (the core's win)."""
    table = dict(SUBCOMMANDS)
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        table.setdefault(ep.name, (ep.module, ""))
    return table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    table = subcommands()
    names = sorted(table.keys() | ELSEWHERE.keys())
    sub = parser.add_subparsers(dest="drafters_command", metavar="{" + ",".join(names) + "}")
    for name in names:
        if name not in table:
            _stub(sub, name, f"pip install {ELSEWHERE[name]} (in a clone: pip install -e bench)")
            continue
        module, help_ = table[name]
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:  # a plug-in whose own requirements are missing
            _stub(sub, name, f"{module} cannot be imported ({exc})")
            continue
        doc = (mod.__doc__ or "").strip()
        # a subcommand's docstring opens with its own name (``spectool drafters eval``: …)
        help_ = help_ or (doc.splitlines()[0].split(": ", 1)[-1] if doc else "")
        p = sub.add_parser(name, help=help_)
        p.set_defaults(_drafters_module=module)
        mod.add_arguments(p)


def _stub(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, missing: str) -> None:
    """A subcommand that cannot run here: it takes any arguments, so :func:`run` says why."""
    p = sub.add_parser(name, help=f"(not installed: {missing})", prefix_chars="+")
    p.add_argument("rest", nargs="*")
    p.set_defaults(_drafters_missing=missing)


def run(args: argparse.Namespace) -> int:
    name = getattr(args, "drafters_command", None)
    if name is None:
        print("usage: spectool drafters {eval,tune} …  (spectool drafters tune --help)")
        return 2
    if missing := getattr(args, "_drafters_missing", None):
        raise ConfigError(f"`spectool drafters {name}` is not available here: {missing}")
    return int(importlib.import_module(args._drafters_module).run(args) or 0)
