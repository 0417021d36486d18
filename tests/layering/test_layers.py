"""The layering rule of docs/architecture.md, held by import-linter (``.importlinter``).

The contracts are checked on the real tree, and on a copy of it with one violating module
added: a contract that cannot fail protects nothing. The ``private`` contract type is our own
(``scripts/importlinter_private.py``), so lint-imports runs with ``scripts/`` on the path.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")
PACKAGES = {
    "spectool": ROOT / "spectool",
    "spectool_serving": ROOT / "serving" / "spectool_serving",
    "langchain_spectool": ROOT / "integrations" / "langchain" / "langchain_spectool",
    "spectool_mcp": ROOT / "integrations" / "mcp" / "spectool_mcp",
    "spectool_agents": ROOT / "integrations" / "openai_agents" / "spectool_agents",
    "spectool_bench": ROOT / "bench" / "spectool_bench",
}
# measurement: may import every layer; nothing else may import it
MEASUREMENT = ("spectool_bench",)
LAYERS = "Layers: measurement | serving, integrations | core"
PLOTS = "Serving and integrations import no plotting library"
PUBLIC = "Upper layers use only public modules of spectool, spectool_serving"


def _lint(root: Path) -> subprocess.CompletedProcess:
    if not LINT.exists():
        pytest.fail(f"import-linter is part of the dev extra; {LINT} is missing")
    return subprocess.run(
        [str(LINT), "--no-cache", "--config", str(ROOT / ".importlinter")],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": f"{root}:{ROOT / 'scripts'}", "PATH": "/usr/bin:/bin"},
    )


def _copy_tree(dest: Path) -> None:
    for name, src in PACKAGES.items():
        shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))


def test_contracts_hold_on_the_tree(tmp_path):
    _copy_tree(tmp_path)
    out = _lint(tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "broken" in out.stdout and "0 broken" in out.stdout
    assert f"{LAYERS} KEPT" in out.stdout  # the one layers contract ran, over every package


# (the module planted, its source) that each contract must refuse
BREAKS = {
    LAYERS: [
        # the core below everything
        ("spectool/_violation.py", "from spectool_serving.server import build_server\n"),
        ("spectool/_violation.py", "def f():\n    import spectool_serving.runner\n"),  # lazy too
        ("spectool/drafters/_violation.py", "import langchain_spectool\n"),
        ("spectool/_violation.py", "import spectool_bench\n"),
        # nothing imports measurement
        ("spectool_serving/tree/_violation.py", "from spectool_bench.decode import _tree\n"),
        ("spectool_agents/_violation.py", "import spectool_bench\n"),
        # integrations and serving are independent of each other
        ("spectool_serving/_violation.py", "import spectool_agents\n"),
        ("langchain_spectool/_violation.py", "import spectool_mcp\n"),
    ],
    PUBLIC: [
        # public modules only, any private module (_eager was missing from the old hand-typed list)
        ("spectool_serving/_violation.py", "from spectool._tools import Toolbox\n"),
        ("spectool_serving/_violation.py", "from spectool.drafters.local._local import x\n"),
        ("spectool_mcp/_violation.py", "from spectool._eager import x\n"),
        ("spectool_bench/_violation.py", "from spectool._loop import run_agent\n"),
        ("spectool_bench/_violation.py", "from spectool_serving.vllm._compat import x\n"),
    ],
    PLOTS: [
        ("spectool_serving/_violation.py", "import matplotlib\n"),
    ],
}


@pytest.mark.parametrize(
    ("module", "source", "contract"), [(m, s, c) for c, rows in BREAKS.items() for m, s in rows]
)
def test_a_violating_module_breaks_a_contract(tmp_path, module, source, contract):
    _copy_tree(tmp_path)
    (tmp_path / module).write_text(source)
    out = _lint(tmp_path)
    assert out.returncode != 0
    assert f"{contract} BROKEN" in out.stdout, out.stdout  # that contract, not just any


def test_nothing_outside_measurement_imports_it():
    """Every module, not just those the contract names: no import edge into measurement."""
    import grimp

    graph = grimp.build_graph(*PACKAGES, cache_dir=None)

    def measuring(m: str) -> bool:
        return any(m == p or m.startswith(p + ".") for p in MEASUREMENT)

    bad = sorted(
        (m, t)
        for m in graph.modules
        if not measuring(m)
        for t in graph.find_modules_directly_imported_by(m)
        if measuring(t)
    )
    assert bad == []
