"""docs/architecture.md names real code: every place its route tables give (``file.py:Class.method``,
a bare ``Class.method`` in the file named before it, or a module) imports and resolves, and every
module its package tables list exists. A renamed or removed function fails here, not in a reader."""

from __future__ import annotations

import importlib
import re
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
#: source folder -> the import name it holds (the page's "Packages" table)
ROOTS = {
    "spectool/": "spectool",
    "serving/spectool_serving/": "spectool_serving",
    "bench/spectool_bench/": "spectool_bench",
    "integrations/langchain/langchain_spectool/": "langchain_spectool",
    "integrations/mcp/spectool_mcp/": "spectool_mcp",
    "integrations/openai_agents/spectool_agents/": "spectool_agents",
}


def section(text: str, heading: str) -> str:
    """The body of the ``## heading`` section (up to the next ``## ``)."""
    match = re.search(rf"^## {re.escape(heading)}", text, re.M)
    assert match, f"no section {heading!r}"
    end = text.find("\n## ", match.end())
    return text[match.start() : end if end != -1 else len(text)]


def table_cells(body: str, column: int) -> list[str]:
    """One column of every table row in ``body`` (header and rule rows left out)."""
    cells = []
    for line in body.splitlines():
        if line.startswith("|") and not re.match(r"\|\s*-", line):
            parts = [p.strip() for p in line.strip().strip("|").split("|")]
            if len(parts) > column:
                cells.append(parts[column])
    return cells[1:] if cells else cells


def module_name(path: str) -> str:
    """``serving/spectool_serving/tree/policy.py`` -> ``spectool_serving.tree.policy``."""
    for folder, name in ROOTS.items():
        if path.startswith(folder):
            rest = path[len(folder) :].removesuffix(".py").removesuffix("/__init__")
            return ".".join([name, *filter(None, rest.split("/"))])
    raise ValueError(f"{path}: not under a package root")


def resolve(path: str, qualname: str | None) -> str | None:
    """None when ``path`` imports and ``qualname`` is found in it (a function's nested function
    counts: it is a name in the function's code); else what is missing."""
    try:
        obj: object = importlib.import_module(module_name(path))
    except (ImportError, ValueError) as exc:
        return f"{path}: {exc}"
    for part in qualname.split(".") if qualname else ():
        if not isinstance(obj, types.CodeType) and hasattr(obj, part):
            obj = getattr(obj, part)
            continue
        code = obj if isinstance(obj, types.CodeType) else getattr(obj, "__code__", None)
        nested = [c for c in (code.co_consts if code else ()) if isinstance(c, types.CodeType)]
        found = next((c for c in nested if c.co_name == part), None)
        if found is None:
            return f"{path}:{qualname}: no {part!r}"
        obj = found
    return None


def route_places(text: str) -> list[tuple[str, str | None]]:
    """(file, qualname or None) for every place in the route tables' "where" column. A file not
    under a package root (``store.py``, ``tree/policy.py``) is in the folder of the file named
    before it; a bare ``Name.attr`` is in that file."""
    places: list[tuple[str, str | None]] = []
    last_file = ""
    for cell in table_cells(section(text, "Route table"), 1):
        for token in re.findall(r"`([^`]+)`", cell):
            file, _, qualname = token.partition(":") if ".py" in token else ("", "", token)
            if file:
                if not file.startswith(tuple(ROOTS)):
                    file = last_file.rsplit("/", 1)[0] + "/" + file
                last_file = file
            places.append((file or last_file, qualname or None))
    return places


def module_entries(text: str, heading: str, package: str) -> list[str]:
    """Dotted module names from the first column of a module table (``a``, ``a, b``, ``tree/``)."""
    names = []
    for cell in table_cells(section(text, heading), 0):
        for token in re.findall(r"`([^`]+)`", cell):
            names.append(f"{package}.{token.rstrip('/').replace('/', '.')}")
    return names


def test_every_place_the_route_tables_give_exists() -> None:
    places = route_places(PAGE.read_text())
    assert len(places) >= 20  # both tables were read
    assert [miss for miss in (resolve(f, q) for f, q in places) if miss] == []


@pytest.mark.parametrize(("heading", "package"), [("Core", "spectool"), ("Serving", "spectool_serving")])
def test_every_module_a_package_table_lists_exists(heading: str, package: str) -> None:
    names = module_entries(PAGE.read_text(), heading, package)
    assert len(names) >= 10
    missing = []
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            missing.append(f"{name}: {exc}")
    assert missing == []


def test_the_packages_table_names_every_distribution_package() -> None:
    listed = set(re.findall(r"^\| `(\w+)` \|", section(PAGE.read_text(), "Packages"), re.M))
    assert listed == set(ROOTS.values())


def test_the_check_fails_a_made_up_name() -> None:
    # a method and a nested function that exist, then made-up ones and a module that does not exist
    assert resolve("spectool/_cache.py", "ToolCache.resolve") is None
    assert resolve("serving/spectool_serving/app.py", "create_app.chat") is None
    assert resolve("spectool/_cache.py", "ToolCache._no_such_method") is not None
    assert resolve("serving/spectool_serving/app.py", "create_app.no_such_route") is not None
    assert resolve("serving/spectool_serving/no_such_module.py", None) is not None
    # a bare name is looked up in the file named before it, so a made-up one there fails too
    row = "| x | `spectool/_cache.py:ToolCache.resolve` → `Nope.x` / `_outcome.py:run_tool` |"
    page = f"## Route table\n| step | where |\n|---|---|\n{row}\n"
    first, made_up, relative = route_places(page)
    assert made_up == ("spectool/_cache.py", "Nope.x") and resolve(*made_up) is not None
    assert relative == ("spectool/_outcome.py", "run_tool") and resolve(*relative) is None
    assert resolve(*first) is None
