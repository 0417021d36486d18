#!/usr/bin/env bash
# Builds .venv/ at the repository root with everything the jobs and tests need.
# Idempotent: re-runs only when the project files that define the environment change.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

stamp=.venv/.spectool-setup
# setup.py and the kernel sources too: `pip install -e .` builds the CPU kernel library in place,
# and an edited C source would otherwise fall back to the first-use build in the cache
kernels=(setup.py serving/spectool_serving/backends/_kernel_sources.py serving/spectool_serving/backends/*.c)
want=$(cat pyproject.toml bench/pyproject.toml $(ls integrations/*/pyproject.toml 2>/dev/null) "${kernels[@]}" \
    scripts/setup.sh scripts/requirements.py \
    | sha256sum | cut -c1-16)
# Opt-in: the llama.cpp runtime (spectool[llamacpp]) builds from its sdist, ~9 CPU-minutes
# the first time on a CPU kind, then installs from the wheel cached per CPU (seconds).
llamacpp() {
    if [ "${SPECTOOL_LLAMACPP:-0}" = "1" ]; then bash scripts/build_llamacpp.sh .venv/bin/python; fi
}
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    llamacpp
    exit 0
fi

py=${PYTHON:-}
if [ -z "$py" ]; then
    for c in python3.11 python3; do
        if command -v "$c" >/dev/null 2>&1; then py=$c; break; fi
    done
fi
[ -x .venv/bin/python ] || "$py" -m venv .venv
pip=(.venv/bin/python -m pip --disable-pip-version-check -q)
echo "setup: installing into .venv (a few minutes on a fresh machine)" >&2
"${pip[@]}" install -U pip setuptools wheel
# The pin resolves to a local CPU wheel on CPU-only machines; the package itself keeps a range.
"${pip[@]}" install "torch==2.13.0"
# xgrammar (in [local], hence [serve]) declares triton (~1 GB of GPU kernels) that its CPU path never uses, and
# pip would fetch it for any install that names xgrammar. So: xgrammar without its deps, every
# other requirement of [all,dev] from pyproject, then the project itself without deps.
"${pip[@]}" install --no-deps "xgrammar==0.2.8" "apache-tvm-ffi>=0.1.11,<0.2"
mapfile -t reqs < <(.venv/bin/python scripts/requirements.py all dev --exclude xgrammar)
"${pip[@]}" install "${reqs[@]}"
"${pip[@]}" install --no-deps -e .
# measurement, its own distribution (bench/): its requirements less spectool (installed above,
# and naming spectool[serve] would let pip reach for triton again), then itself without deps
mapfile -t bench_reqs < <(.venv/bin/python scripts/requirements.py --project bench --exclude xgrammar)
"${pip[@]}" install "${bench_reqs[@]}"
"${pip[@]}" install --no-deps -e bench
for d in integrations/*/; do
    [ -f "$d/pyproject.toml" ] && "${pip[@]}" install -e "$d"
done
# tests/integrations/test_langchain_serving.py drives the engine through ChatOpenAI; test_langchain_standard.py
# runs langchain-tests; test_mcp_integration.py loads tools with langchain-mcp-adapters.
"${pip[@]}" install -e "integrations/langchain[openai,test]"
"${pip[@]}" install -e "integrations/mcp[langchain]"
echo "$want" > "$stamp"
llamacpp
echo "setup: done" >&2
