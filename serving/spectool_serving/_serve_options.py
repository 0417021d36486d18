"""What ``spectool serve`` shares between its backends (torch and vLLM): one floor below both."""

from __future__ import annotations

__all__ = ["LOG_LEVELS", "resolve_dtype"]

LOG_LEVELS = ["debug", "info", "warning", "error"]


def resolve_dtype(dtype: str, *, gpu: bool) -> str:
    """``auto``: bfloat16 on a GPU, float32 on a CPU (exact greedy checks, and the CPU kernels'
    measured default); any other dtype as given. The same rule on both backends."""
    if dtype == "auto":
        return "bfloat16" if gpu else "float32"
    return dtype
