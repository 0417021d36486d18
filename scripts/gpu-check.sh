#!/usr/bin/env bash
# The engine on a lent GPU machine (torch + transformers there, nothing to fetch), with
# randomly initialised models of SmolLM2-135M's and a 1B Llama's shape: greedy outputs vs HF
# generate (fp32, bf16), batched decode tok/s at 1/8/32 streams, tree decoding, O2/O3.
# What it runs: scripts/gpu_check.py (its docstring says what each check asserts).
#
#   scripts/gpu-check.sh --bundle     # here, before: gather what travels into build/gpu-check/
#   scripts/gpu-check.sh              # there: the checks on cuda (at most 8 minutes)
#   scripts/gpu-check.sh --dry-run    # anywhere: the same script on the CPU, tiny shapes (CI)
#
# The bundle (~35 MB, carried as build/gpu-check): the tokenizer of the embedded model (no
# weights), and the Python packages the engine imports beyond torch and transformers —
# spectool's core needs pydantic, pydantic-settings and anyio; the call grammar needs
# xgrammar — copied from this venv (CPython 3.11, x86-64 Linux builds: another Python on the
# GPU machine needs wheels of its own; the check then says which import failed).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bundle="$root/build/gpu-check"
py="${PYTHON:-python3}"
[ -x "$root/.venv/bin/python" ] && py="$root/.venv/bin/python"

if [ "${1:-}" = "--bundle" ]; then
  rm -rf "$bundle" && mkdir -p "$bundle/tokenizer" "$bundle/site"
  export PYTHONPATH="$root:$root/serving${PYTHONPATH:+:$PYTHONPATH}"
  "$py" - "$bundle" <<'PY'
import shutil, sys
from importlib import metadata
from pathlib import Path
from spectool.embedded import embedded_hf_folder
out = Path(sys.argv[1])
for f in embedded_hf_folder().iterdir():
    if f.suffix != ".safetensors":
        shutil.copy(f, out / "tokenizer" / f.name)
dists = ["pydantic", "pydantic-core", "pydantic-settings", "python-dotenv", "annotated-types",
         "typing-inspection", "typing-extensions", "anyio", "sniffio", "idna", "xgrammar", "apache-tvm-ffi"]
for name in dists:
    dist = metadata.distribution(name)
    for f in dist.files or []:
        src = Path(dist.locate_file(f))
        if src.is_file() and "__pycache__" not in f.parts and not str(f).startswith(".."):
            dst = out / "site" / f
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
PY
  du -sh "$bundle"
  exit 0
fi

args=("$@")
path="$root:$root/serving"
if [ -d "$bundle/site" ]; then
  path="$path:$bundle/site"
  args+=(--tokenizer "$bundle/tokenizer")
fi
export PYTHONPATH="$path${PYTHONPATH:+:$PYTHONPATH}"
exec timeout 480 "$py" "$root/scripts/gpu_check.py" "${args[@]}"
