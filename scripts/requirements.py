"""Print the requirements of the named extras of pyproject.toml, one per line, with the
project's own extras (``spectool[local]``) expanded and ``--exclude NAME`` left out.

    python scripts/requirements.py all dev --exclude xgrammar
"""

from __future__ import annotations

import argparse
import re
import tomllib
from pathlib import Path


def requirements(extras: list[str], exclude: set[str]) -> list[str]:
    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    optional = project["optional-dependencies"]
    out, todo, done = list(project["dependencies"]), list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in done:
            continue
        done.add(extra)
        for req in optional[extra]:
            own = re.fullmatch(r"spectool\[([^\]]+)\]", req.replace(" ", ""))
            if own:
                todo += own.group(1).split(",")
            else:
                out.append(req)
    name = lambda r: re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].lower()  # noqa: E731
    return sorted({r for r in out if name(r) not in exclude})


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("extras", nargs="+")
    p.add_argument("--exclude", action="append", default=[])
    a = p.parse_args()
    print("\n".join(requirements(a.extras, {e.lower() for e in a.exclude})))


if __name__ == "__main__":
    main()
