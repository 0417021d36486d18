"""The wrapper keeps the OpenAI SDK's types for a type checker: mypy on a typed usage example
(tests/core/typing/typed_usage.py) reveals ChatCompletion, the stream's ChatCompletionChunk and
Response through ``spectool.speculative(...)`` (and ``speculative_sync``).
mypy's cache (.mypy_cache) makes re-runs quick."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_sees_the_sdk_types_through_the_wrapper() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--ignore-missing-imports",
            "--follow-imports=silent",
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            str(ROOT / "tests" / "core" / "typing" / "typed_usage.py"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
        cwd=ROOT,
        env=env,
    )
    revealed = re.findall(r'Revealed type is "([^"]+)"', out.stdout)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert revealed[0] == "openai.types.chat.chat_completion.ChatCompletion"
    assert "ChatCompletionMessageFunctionToolCall" in revealed[1]
    assert revealed[2] == "openai.types.chat.chat_completion_chunk.ChatCompletionChunk"
    assert revealed[3] == "openai.types.responses.response.Response"
    assert revealed[4] == "list[dict[str, Any]]"
    # the sync client
    assert revealed[5] == "openai.types.chat.chat_completion.ChatCompletion"
    assert revealed[6] == "openai.types.chat.chat_completion_chunk.ChatCompletionChunk"
    assert len(revealed) == 7
