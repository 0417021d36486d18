"""A converted model folder found in the cache is used without importing transformers.

``spectool serve --backend vllm`` resolves the model folder on every start; importing
transformers there cost seconds before vLLM even began to load.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROBE = """
import sys
from pathlib import Path
from spectool.embedded import gguf_to_hf, _converted_folder
gguf = Path(sys.argv[1])
if sys.argv[2] == "cached":
    (_converted_folder(gguf) / "config.json").parent.mkdir(parents=True)
    (_converted_folder(gguf) / "config.json").write_text("{}")
try:
    print(gguf_to_hf(gguf) == _converted_folder(gguf))
except Exception as exc:  # the control: a fake GGUF cannot be converted
    print(type(exc).__name__)
print("transformers" in sys.modules)
"""


def _probe(tmp_path: Path, cached: bool) -> list[str]:
    env = {**os.environ, "SPECTOOL_CACHE": str(tmp_path / "cache")}
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"not a real GGUF")
    argv = [sys.executable, "-c", PROBE, str(gguf), "cached" if cached else "fresh"]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    return out.stdout.split()


def test_a_cached_folder_is_returned_without_importing_transformers(tmp_path):
    assert _probe(tmp_path, cached=True) == ["True", "False"]


def test_control_an_uncached_gguf_goes_through_transformers(tmp_path):
    found, imported = _probe(tmp_path, cached=False)
    assert found != "True"  # a fake GGUF does not convert
    assert imported == "True"
