"""docs/mcp.md, docs/openai-agents.md and docs/tracing.md are runnable: each page's python
blocks run in order, as one script, from the repository root."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PATHS = [
    ROOT / "integrations" / "mcp",
    ROOT / "integrations" / "openai_agents",
    ROOT / "integrations" / "langchain",
    ROOT / "bench",  # tracing.md draws its picture with spectool_bench
    ROOT,
]


@pytest.mark.parametrize(
    "page, expect",
    [
        ("mcp.md", ["You need milk. 2", "read-only, open world", r"Effect\.MUTATING"]),
        ("openai-agents.md", [r"Sunny in Paris\. 1"]),
        # tool 50 ms, model 100 ms: the early run is served (finished: hit; on a slow machine: join)
        (
            "tracing.md",
            [
                r"spectool.resolve get \{'spectool.outcome': '(hit|join)'\}",
                r"\['(hit|join)'\]",
                r"picture: turn.png 1 served early",
            ],
        ),
    ],
)
def test_page_runs(page: str, expect: list[str]) -> None:
    code = "\n".join(re.findall(r"```python\n(.*?)```", (ROOT / "docs" / page).read_text(), re.DOTALL))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, PATHS), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=ROOT,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    for text in expect:
        assert re.search(text, out.stdout), out.stdout
