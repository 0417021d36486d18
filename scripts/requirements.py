"""Print the requirements of the named extras of pyproject.toml, one per line, with the
project's own extras (``spectool[local]``) expanded and ``--exclude NAME`` left out.
``--project DIR`` adds the dependencies of another distribution of this repository (``bench``),
less spectool itself (its extras are expanded as above) and less the repository's other
distributions (``spectool-mcp`` …): those are not on an index; the set-up installs them from
their folders.

    python scripts/requirements.py all dev --exclude xgrammar
    python scripts/requirements.py --project bench --exclude xgrammar
"""

from __future__ import annotations

import argparse
import re
import tomllib
from pathlib import Path


def requirements(extras: list[str], exclude: set[str], projects: list[str] = ()) -> list[str]:
    root = Path(__file__).resolve().parents[1]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    optional = project["optional-dependencies"]
    out, todo, done = list(project["dependencies"]), list(extras), set()
    for folder in projects:
        for req in tomllib.loads((root / folder / "pyproject.toml").read_text())["project"]["dependencies"]:
            own = re.fullmatch(r"spectool(?:\[([^\]]+)\])?", req.replace(" ", ""))
            if own:
                todo += own.group(1).split(",") if own.group(1) else []
            else:
                out.append(req)
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
    name = lambda r: re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].lower().replace("_", "-")  # noqa: E731
    return sorted({r for r in out if name(r) not in exclude | _local_distributions(root)})


def _local_distributions(root: Path) -> set[str]:
    """Names of the distributions this repository builds from its own folders."""
    folders = [root / "bench", *sorted((root / "integrations").glob("*"))]
    return {
        tomllib.loads((f / "pyproject.toml").read_text())["project"]["name"].lower().replace("_", "-")
        for f in folders
        if (f / "pyproject.toml").is_file()
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("extras", nargs="*")
    p.add_argument("--exclude", action="append", default=[])
    p.add_argument("--project", action="append", default=[], help="folder of another distribution")
    a = p.parse_args()
    print("\n".join(requirements(a.extras, {e.lower() for e in a.exclude}, a.project)))


if __name__ == "__main__":
    main()
