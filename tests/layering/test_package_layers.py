"""The floors inside a package, held by import-linter's ``layers`` contracts with
``containers`` (``.importlinter``): no module imports one on a higher floor, and modules of one
floor do not import each other, so a package has no import circle and no arrow running up.

Each contract is checked on a copy of the tree with one planted import: a contract that cannot
fail protects nothing. Imports made inside a function count as well as those at the top.
"""

from __future__ import annotations

import pytest

from tests.layering.test_layers import _copy_tree, _lint

SERVING = "Floors inside spectool_serving"
BENCH = "Floors inside spectool_bench"


def _plant(tmp_path, module: str, line: str) -> None:
    path = tmp_path / module
    path.write_text((path.read_text() if path.exists() else "") + "\n" + line)


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        # the arrow this contract was written for: the KV cache reaching up into the tree package
        ("spectool_serving/kv.py", "from .tree.tree import DraftTree\n", SERVING),
        # the circle it broke: vLLM's serve command and the CLI above it, lazily
        ("spectool_serving/vllm/serve.py", "def f():\n    from .. import _serve_cli\n", SERVING),
        # one floor's modules stay apart: the round logic does not import the request parser
        ("spectool_serving/rounds.py", "from . import requests\n", SERVING),
        # measurement's data sets below the commands: BFCL's tools once reached up into the harness
        ("spectool_bench/bfcl/_tasks.py", "def f():\n    from ..harness import _agents\n", BENCH),
        # the circle it broke: the bench's drafter arms took the mining traces from drafters eval
        ("spectool_bench/harness/_arms.py", "def f():\n    from ..drafters import _eval\n", BENCH),
        # one floor's subpackages stay apart: the workloads do not import the backend comparison
        ("spectool_bench/workloads/_catalog.py", "from ..backends import _choice\n", BENCH),
        # every subpackage is on a floor: a new one must be placed (`exhaustive`)
        ("spectool_bench/loose.py", "X = 1\n", BENCH),
    ],
)
def test_a_planted_import_breaks_the_package_contract(tmp_path, module, line, contract):
    _copy_tree(tmp_path)
    _plant(tmp_path, module, line)
    out = _lint(tmp_path)
    assert out.returncode != 0
    assert f"{contract} BROKEN" in out.stdout, out.stdout
