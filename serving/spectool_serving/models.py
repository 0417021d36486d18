"""Model sources: an HF folder (or hub id), a ``.gguf`` file, or the embedded SmolLM2."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from spectool.embedded import EMBEDDED_MODEL, load_causal_lm
from spectool.errors import ConfigError

from .toolcalls import FORMATS, PromptFormat, detect_format

__all__ = ["LoadedModel", "load_model"]


@dataclass
class LoadedModel:
    model: Any
    tokenizer: Any
    fmt: PromptFormat
    name: str
    device: str


def load_model(
    source: str | None = None,
    *,
    dtype: str = "float32",
    device: str = "cpu",
    prompt_format: str | None = None,
) -> LoadedModel:
    """Load weights + tokenizer and pick the prompt format (auto-detected unless given)."""
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError("--device cuda was asked for but torch sees no CUDA device")
    model, tok = load_causal_lm(source, dtype=dtype, device=device)
    name = EMBEDDED_MODEL if source in (None, "", "embedded") else os.path.basename(str(source).rstrip("/"))
    if prompt_format is not None:
        if prompt_format not in FORMATS:
            raise ConfigError(f"prompt format must be one of {sorted(FORMATS)}; got {prompt_format!r}")
        fmt = FORMATS[prompt_format]
    else:
        fmt = detect_format(getattr(tok, "chat_template", None), name)
    return LoadedModel(model, tok, fmt, name, device)
