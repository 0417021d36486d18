"""Every fenced python block in README.md and docs/*.md runs as written: each page's blocks in
order, as one script, from the repository root, in a fresh interpreter.

What a page assumes but does not show (the user's own chat model) comes from a hidden
preamble below, built from the fakes in ``spectool.testing`` / ``langchain_spectool.testing``
(no model or API key can run here). A block that cannot run at all says so on its first line,
visibly: ``# not run as a test: <reason>``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
PATHS = [ROOT, ROOT / "serving", ROOT / "bench", *(ROOT / "integrations").glob("*")]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
NOT_RUN = re.compile(r"\A# not run as a test: (\S.{15,})$", re.M)

# the user's chat model, for pages that start from "your agent": a scripted LangChain model
# whose first turn asks for the weather in Paris and whose second answers
_LANGCHAIN_MODEL = """
from langchain_core.messages import AIMessage
from langchain_spectool.testing import ScriptedChatModel
model = ScriptedChatModel(script=[
    AIMessage("", tool_calls=[{"name": "get_weather", "args": {"city": "Paris"}, "id": "call_1"}]),
    AIMessage("Sunny in Paris."),
])
"""
PREAMBLES = {"langchain.md": _LANGCHAIN_MODEL}

# what a page prints when it works (beyond exiting 0)
EXPECT = {
    "mcp.md": ["You need milk. 2", "read-only, open world", r"Effect\.MUTATING"],
    "openai-agents.md": [r"Sunny in Paris\. 1"],
    # tool 50 ms, model 100 ms: the early run is served (finished: hit; on a slow machine: join)
    "tracing.md": [
        r"spectool.resolve get \{'spectool.outcome': '(hit|join)'\}",
        r"\['(hit|join)'\]",
        r"picture: turn.png 1 served early",
        r"spectool.speculative.runs 1",
    ],
    "langchain.md": [r"Sunny in Paris\. \d+\nSunny in Paris\."],
    "quickstart.md": [r"'hits': 1"],
    "vllm.md": [r"(?m)^0\.34$", r"O2 on \(--o2 auto\): at 8 streams O2 costs 7 %"],
}

# pages whose blocks load the real embedded model: run with `-m model` by their own test
ELSEWHERE = {"tree-decoding.md": ROOT / "tests" / "serving" / "tree" / "test_tree_docs.py"}


def blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text())


def runnable(page: Path) -> list[str]:
    return [b for b in blocks(page) if not NOT_RUN.match(b)]


RUN = [p for p in PAGES if runnable(p) and p.name not in ELSEWHERE]


def test_every_page_with_python_is_run_here_or_by_its_own_test() -> None:
    with_code = {p.name for p in PAGES if blocks(p)}
    assert with_code == {p.name for p in RUN} | {p.name for p in PAGES if blocks(p) and not runnable(p)} | {
        n for n in ELSEWHERE if n in with_code
    }
    assert all(path.exists() for path in ELSEWHERE.values())
    assert {"README.md", "langchain.md", "quickstart.md", "serving.md"} <= with_code


def test_a_block_left_out_says_why_on_its_first_line() -> None:
    for page in PAGES:
        for block in blocks(page):
            first = block.splitlines()[0] if block.strip() else ""
            if "not run" in first:
                assert NOT_RUN.match(block), f"{page.name}: {first!r} needs a reason"


@pytest.mark.parametrize("page", RUN, ids=[p.name for p in RUN])
def test_page_runs_as_written(page: Path) -> None:
    code = PREAMBLES.get(page.name, "") + "\n".join(runnable(page))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, PATHS), os.environ.get("PYTHONPATH", "")])}
    env.pop("OPENAI_API_KEY", None)  # no page may need a real provider
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env
    )
    assert out.returncode == 0, out.stderr[-3000:]
    for text in EXPECT.get(page.name, []):
        assert re.search(text, out.stdout), out.stdout[-3000:]


def test_the_readme_lists_every_guide_and_every_command() -> None:
    from spectool.cli import commands  # the built-in table and other distributions' commands

    readme = (ROOT / "README.md").read_text()
    linked = set(re.findall(r"\]\(docs/([\w.-]+\.md)\)", readme))
    assert {p.name for p in (ROOT / "docs").glob("*.md")} <= linked
    [line] = [x for x in readme.splitlines() if x.startswith("Commands: `spectool ")]
    listed = set(line.split("`")[1].removeprefix("spectool ").split(" | "))
    assert listed == set(commands())
