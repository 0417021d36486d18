"""The public API: a sorted ``__all__`` whose every name exists."""

import spectool
import spectool.testing


def test_all_is_sorted_and_unique() -> None:
    assert spectool.__all__ == sorted(set(spectool.__all__))
    assert spectool.testing.__all__ == sorted(set(spectool.testing.__all__))


def test_every_exported_name_exists() -> None:
    missing = [n for n in spectool.__all__ if not hasattr(spectool, n)]
    assert missing == []
    missing = [n for n in spectool.testing.__all__ if not hasattr(spectool.testing, n)]
    assert missing == []


def test_core_names_are_exported() -> None:
    for name in (
        "tool",
        "Toolbox",
        "ToolCache",
        "Speculator",
        "SyncSpeculator",
        "SpeculativeOpenAI",
        "speculative",
        "run_agent",
        "EngineSink",
    ):
        assert name in spectool.__all__


def test_errors_share_one_root() -> None:
    errors = [getattr(spectool, n) for n in spectool.__all__ if n.endswith("Error")]
    assert errors and all(issubclass(e, spectool.SpectoolError) for e in errors)


# -- the docs are runnable examples -----------------------------------------------------------

import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_quickstart_blocks_run_in_order() -> None:
    text = (ROOT / "docs" / "quickstart.md").read_text()
    code = "\n".join(re.findall(r"```python\n(.*?)```", text, re.S))
    assert "speculative(" in code and "run_agent(" in code
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "We have 3 apples." in out.stdout


def test_offline_examples_run() -> None:
    for script, expect in [
        ("offline_agent.py", "transcripts identical: True"),
        ("openai_agent.py", "I bought 2 shares."),
    ]:
        out = subprocess.run(
            [
                sys.executable,
                str(ROOT / "examples" / script),
                *(["--latency", "0.05"] if script == "offline_agent.py" else []),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        assert expect in out.stdout


def test_api_reference_names_every_public_name() -> None:
    text = (ROOT / "docs" / "api.md").read_text()
    undocumented = [n for n in spectool.__all__ if not n.endswith("Error") and n not in text]
    assert undocumented == []
