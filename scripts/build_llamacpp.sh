#!/usr/bin/env bash
# Installs llama-cpp-python 0.3.36 (spectool[llamacpp], the llama.cpp runtime of LocalDrafter)
# into a venv, from a wheel cached under ~/.cache/spectool/wheels/ or built once from its sdist.
#
#   bash scripts/build_llamacpp.sh [PYTHON]     # PYTHON: the venv's python (default .venv/bin/python)
#
# The wheel is built for this CPU (GGML_NATIVE: -march=native), so the cache key is the version
# plus a hash of the CPU's vector extensions: a session on an AVX2-only CPU never loads a wheel
# built with AVX-512 (SIGILL) and vice versa. llama.cpp's portable alternative
# (GGML_BACKEND_DL + GGML_CPU_ALL_VARIANTS: one CPU backend per x86 level, picked at run time)
# compiles the CPU backend ~10 times, too long on 2 cores. The build prints how long it took.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py=${1:-$root/.venv/bin/python}
version=0.3.36
isa=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' \
    | grep -E '^(sse4_2|avx|avx2|fma|f16c|bmi2|avxvnni|avx512.*|amx.*)$' | sort | tr '\n' ' ')
key=$(printf '%s' "$isa" | sha256sum | cut -c1-12)
cache=${SPECTOOL_CACHE:-$HOME/.cache/spectool}/wheels/llama-cpp-python-$version-cpu-$key
pip=("$py" -m pip --disable-pip-version-check -q)

if "$py" -c "import llama_cpp, sys; sys.exit(llama_cpp.__version__ != '$version')" 2>/dev/null; then
    echo "setup: llama-cpp-python $version already installed" >&2
    exit 0
fi
if ! ls "$cache"/llama_cpp_python-"$version"-*.whl >/dev/null 2>&1; then
    command -v cmake >/dev/null || "${pip[@]}" install cmake
    for tool in cc c++; do
        command -v "$tool" >/dev/null || { echo "setup: llama.cpp needs a C/C++ compiler ($tool)" >&2; exit 1; }
    done
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    echo "setup: building llama-cpp-python $version for this CPU ($isa): ~9 CPU-minutes (36 min wall on a busy 2-core machine)" >&2
    "${pip[@]}" download "llama-cpp-python==$version" --no-deps --no-binary :all: -d "$tmp"
    start=$(date +%s)
    # the runtime needs libllama + ggml only: no multimodal library, tools, tests or examples
    CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
    CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF" \
        nice -n 10 "${pip[@]}" wheel --no-deps -w "$tmp/out" "$tmp"/llama_cpp_python-"$version".tar.gz
    mkdir -p "$cache"
    cp "$tmp"/out/llama_cpp_python-"$version"-*.whl "$cache"/
    echo "setup: built llama-cpp-python $version in $(( $(date +%s) - start )) s; cached in $cache" >&2
fi
"${pip[@]}" install "$cache"/llama_cpp_python-"$version"-*.whl "jinja2>=3.1"
echo "setup: llama-cpp-python $version installed from $cache" >&2
