"""``import spectool`` (and its testing kit) must not pull in heavy optional dependencies."""

import json
import subprocess
import sys

HEAVY = ("torch", "transformers", "langchain", "langchain_core", "langgraph", "fastapi", "uvicorn", "numpy")


def _imported(statement: str) -> list[str]:
    code = (
        f"import sys, json\n{statement}\nprint(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_spectool_is_light() -> None:
    assert _imported("import spectool") == []


def test_testing_kit_and_wrapper_are_light() -> None:
    assert _imported("import spectool.testing, spectool._openai, spectool._sync") == []


def test_the_check_itself_detects_heavy_imports() -> None:
    # Guards against a vacuous check: json is not heavy, but importing a listed module shows up.
    assert _imported("import uvicorn") == ["uvicorn"]
