"""The element-wise glue of a Llama layer, as three operations: residual add + RMSNorm,
rotary, SwiGLU. Two implementations behind :func:`layer_ops`:

* ``eager`` — transformers' operator order (what :class:`.lean.LeanLlama` runs), about 20
  kernels per layer on a GPU. Used on a CPU, where the C kernels of :mod:`.fused` do the
  fusing, and wherever nothing better applies.
* ``compiled`` — the same three functions through ``torch.compile(fullgraph=True)``: on a
  CUDA device with Triton, inductor turns each into one kernel (the norm's reduction, the
  rotary's roll and the gate's SiLU fused with their neighbours), about 6 kernels per layer.
  Compiled once with dynamic shapes, so every batch bucket and model width shares the
  kernels; a captured decode step (:mod:`spectool_serving.graphs`) replays them.

In fp32 the compiled norm may sum in another order than eager (last-bit differences); in
bf16 it keeps intermediates in fp32 where eager rounds each operator to bf16, so bf16 outputs
can part from eager's only where two logits are tied to a unit in the last place.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["LayerOps", "compiled_ops", "eager_ops", "layer_ops"]

log = logging.getLogger("spectool.serving.backends")


def rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def add_rms(
    x: torch.Tensor, r: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(x + r, RMSNorm(x + r) * weight): the residual and the next block's input."""
    s = x + r
    return s, rms(s, weight, eps)


def rotary(t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """t * cos + rotate_half(t) * sin, with ``sin`` sign-folded (:meth:`.lean.LeanLlama._rope`)."""
    return t * cos + t.roll(t.shape[-1] // 2, -1) * sin


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return F.silu(gate) * up


@dataclass(frozen=True)
class LayerOps:
    """The three fused operations (+ the plain norm of the first layer and the final one)."""

    name: str
    rms: Any
    add_rms: Any
    rotary: Any
    swiglu: Any


def eager_ops() -> LayerOps:
    return LayerOps("eager", rms, add_rms, rotary, swiglu)


class _Guarded:
    """A compiled operation that falls back to its eager twin, for good, if compiling or
    running it fails (no Triton toolchain, an unsupported shape): the fusing is an
    optimisation and must never fail a step. The reason is logged once."""

    def __init__(self, fn: Any, backend: str) -> None:
        # dynamic: one kernel for every row count (bucket, prefill) and width (model)
        self.compiled = torch.compile(fn, fullgraph=True, dynamic=True, backend=backend)
        self.eager = fn
        self.failed: str | None = None

    def __call__(self, *args: Any) -> Any:
        if self.failed is None:
            try:
                return self.compiled(*args)
            except Exception as exc:  # noqa: BLE001 - mapped to the eager path, said once
                self.failed = repr(exc)
                log.warning("compiled %s failed, eager from now on: %s", self.eager.__name__, self.failed)
        return self.eager(*args)


@functools.cache
def compiled_ops(backend: str = "inductor") -> LayerOps:
    """The operations through ``torch.compile(fullgraph=True)`` with ``backend`` (tests use
    ``aot_eager``, which needs no compiler); built once per backend."""
    # each operation meets a few dtypes and 0/1-specialised shapes (prefill, one row, buckets,
    # several models in one process): dynamo's default of 8 graphs per function ran out on a
    # GPU, and a recompile must never be what first happens inside a graph capture
    cfg = torch._dynamo.config
    cfg.recompile_limit = max(cfg.recompile_limit, 64)
    cfg.accumulated_recompile_limit = max(cfg.accumulated_recompile_limit, 1024)
    parts = [_Guarded(fn, backend) for fn in (rms, add_rms, rotary, swiglu)]
    return LayerOps(f"compiled[{backend}]", *parts)


def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def layer_ops(device: torch.device | str, want: str = "auto") -> LayerOps:
    """The chooser: ``compiled`` on a CUDA device where Triton imports (``want`` "auto" or
    "compiled"), else ``eager``; ``want="eager"`` forces the eager ones."""
    usable = torch.device(device).type == "cuda" and triton_available()
    if want == "compiled" and not usable:
        raise ValueError("compiled layer ops need a CUDA device with Triton (a CPU keeps its C kernels)")
    return compiled_ops() if usable and want != "eager" else eager_ops()
