#!/usr/bin/env bash
# The engine on an offline GPU machine with torch and transformers installed, with
# randomly initialised models of SmolLM2-135M's and a 1B Llama's shape: greedy outputs vs HF
# generate (fp32, bf16), batched decode tok/s at 1/8/32 streams, tree decoding, O2/O3 (all
# with CUDA graphs on), ms per decode step with graphs on and off beside the captured-step
# floor of transformers' own model, and a Qwen2-0.5B-shape drafter served by the engine.
# What it runs: scripts/gpu_check.py and scripts/gpu_speed.py (their docstrings say what each
# check asserts and measures). GPU_CHECK_TIMEOUT (seconds, default 480) bounds the run.
#
#   scripts/gpu-check.sh --bundle     # on a networked machine: gather build/gpu-check/ for the GPU one
#   scripts/gpu-check.sh              # on the GPU machine, build/gpu-check copied: the checks on cuda, <= 8 min
#   scripts/gpu-check.sh --dry-run    # anywhere: the same script on the CPU, tiny shapes (CI)
#
# The bundle (~25 MB, build/gpu-check, copied beside the repository): the tokenizer of the embedded model (no
# weights), and wheels of what the engine imports beyond the GPU machine's own packages:
# spectool's core needs pydantic, pydantic-settings and anyio, the call grammar xgrammar, and
# transformers at the version the tests here pin. The versions are this venv's; the wheels are
# built for the GPU machine's Python (GPU_PYTHON, default 3.12), so a pydantic-core or xgrammar
# built for this machine's Python never travels to another.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bundle="$root/build/gpu-check"
py="${PYTHON:-python3}"
[ -x "$root/.venv/bin/python" ] && py="$root/.venv/bin/python"

if [ "${1:-}" = "--bundle" ]; then
  rm -rf "$bundle" && mkdir -p "$bundle/tokenizer" "$bundle/wheels"
  export PYTHONPATH="$root:$root/serving${PYTHONPATH:+:$PYTHONPATH}"
  "$py" - "$bundle" >"$bundle/pins.txt" <<'PY'
import shutil, sys
from importlib import metadata
from pathlib import Path
from spectool.embedded import embedded_hf_folder
out = Path(sys.argv[1])
for f in embedded_hf_folder().iterdir():
    if f.suffix != ".safetensors":
        shutil.copy(f, out / "tokenizer" / f.name)
for name in ["pydantic", "pydantic-core", "pydantic-settings", "python-dotenv", "annotated-types",
             "typing-inspection", "typing-extensions", "anyio", "xgrammar", "apache-tvm-ffi",
             "transformers"]:
    print(f"{name}=={metadata.version(name)}")
PY
  plats=()
  for p in manylinux_2_{17,24,27,28,31,34,35}_x86_64 manylinux2014_x86_64 any; do plats+=(--platform "$p"); done
  "$py" -m pip download -q --no-deps --only-binary=:all: --implementation cp \
    --python-version "${GPU_PYTHON:-3.12}" "${plats[@]}" -d "$bundle/wheels" -r "$bundle/pins.txt"
  du -sh "$bundle"
  exit 0
fi

args=("$@")
path="$root:$root/serving"
dry=0
for a in "$@"; do [ "$a" = "--dry-run" ] && dry=1; done
if [ -d "$bundle/wheels" ] && [ "$dry" = 0 ]; then  # the bundle is for the GPU machine's Python
  site="$(mktemp -d)/site"
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$bundle"/wheels/*.whl
  path="$path:$site"
  args+=(--tokenizer "$bundle/tokenizer")
fi
export PYTHONPATH="$path${PYTHONPATH:+:$PYTHONPATH}"
exec timeout "${GPU_CHECK_TIMEOUT:-480}" "$py" "$root/scripts/gpu_check.py" "${args[@]}"
