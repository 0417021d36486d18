"""docs/tree-decoding.md is a runnable example: its python block runs as written (real
SmolLM2) and decodes something."""

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.model

DOC = Path(__file__).resolve().parents[3] / "docs" / "tree-decoding.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def test_doc_example_runs(capsys):
    assert BLOCKS, "the doc should carry a runnable example"
    scope = {"__name__": "__doc_example__"}
    for i, block in enumerate(BLOCKS):
        exec(compile(block, f"{DOC.name}[{i}]", "exec"), scope)
    res = scope["res"]
    assert res.outputs[0] and res.tau >= 1.0
    assert capsys.readouterr().out.strip()
