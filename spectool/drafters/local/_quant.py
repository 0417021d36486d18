"""Int8 weights for the CPU drafter: the one lever that moves its decode time.

Drafting one token with a 135M model reads every weight once, so a CPU decode step is bound by
memory traffic, not arithmetic: on this project's 2-core reference machine one step took
66 ms in fp32, 58 ms in bf16 and 23 ms with int8 weights (dynamic quantization: weights stored
as int8 per output channel, activations quantized on the fly; one thread, embedded SmolLM2).
``dtype="int8"`` loads the model in fp32, folds a tuned adapter in first (quantizing LoRA
factors separately would lose them), then swaps every ``nn.Linear`` for its int8 twin.
``"auto"`` picks int8 where torch has a quantized CPU engine and fp32 elsewhere.
torch loads lazily.
"""

from __future__ import annotations

import warnings
from typing import Any

__all__ = ["DTYPES", "int8_available", "quantize_int8", "resolve_dtype"]

#: What ``LocalDrafter(dtype=…)`` accepts.
DTYPES = ("auto", "float32", "bfloat16", "float16", "int8")


def int8_available() -> bool:
    """True when torch has a quantized CPU engine (x86 fbgemm/onednn, or ARM qnnpack)."""
    import torch

    engines = set(torch.backends.quantized.supported_engines) - {"none"}
    return bool(engines)


def resolve_dtype(dtype: str) -> str:
    """The dtype a drafter loads with: ``"auto"`` becomes int8 where it runs, else fp32."""
    if dtype != "auto":
        return dtype
    return "int8" if int8_available() else "float32"


def quantize_int8(model: Any) -> Any:
    """``model`` (fp32, adapter already merged) with int8 per-channel ``nn.Linear`` weights."""
    import torch
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():
        # torch marks eager quantization as moving to torchao; it is still the fastest CPU
        # GEMV path in torch itself, and the drafter only needs inference
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        quantized = quantize_dynamic(
            model.eval(), {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8
        )
    return quantized
