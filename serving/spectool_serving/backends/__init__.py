"""Forward backends: how a model's forward runs, chosen in one place (:func:`lean_for`).

The algorithms (:mod:`spectool_serving.tree`, the engine's runner) ask this package for a
forward and never import a backend module themselves. Backends, fastest first where each
applies:

* ``fused`` — :class:`.fused.FusedLlama`: every Llama layer's glue in one C call between
  panel GEMMs (``_layers.c``, ``_sgemm.c``; :mod:`.kernels` builds them). Chosen only for
  fp32 models **on a CPU** whose kernels build (x86-64 with AVX-512 and a C compiler); never
  for a GPU, whatever the CPU beside it supports.
* ``lean`` — :class:`.lean.LeanLlama`: the same maths in ~35 torch operators per layer, on
  any device (on a CPU in fp32, optionally over :mod:`.fastpath`'s packed weights).
* ``static`` — :class:`.static_step.StaticStep`: the lean maths over the engine's whole KV
  pool from fixed-shape inputs, what a CUDA graph captures (:mod:`spectool_serving.graphs`),
  with its layer glue from :func:`layer_ops` (fused by ``torch.compile`` on a CUDA device with
  Triton, eager elsewhere).
* ``transformers`` — the model's own forward (``None`` here), for everything
  :func:`.lean.supports` rejects, with :func:`verify_kernels` patching its attention and, on a
  CPU in fp32, its GEMMs.

``torch.compile`` (inductor, frozen weights) is not a backend: measured here
(``python -m spectool_bench.backends._forward``, SmolLM2 fp32, context 300) it needs one graph per tree
width and 300–470 s to compile each on this 2-core CPU, and its logits match eager within
5e-5 (the C path within 7e-5). The side-by-side timing table is in docs/tree-decoding.md
("Forward backends"), pending where that run did not finish.

Switches: ``SPECTOOL_LEAN_FORWARD=0`` (transformers' forward), ``SPECTOOL_CPU_KERNELS=0`` (no
C), ``SPECTOOL_PACKED_GEMM=0`` (no packed weights).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from spectool.settings import settings

__all__ = ["layer_ops", "lean_for", "new_cache", "runs_fused", "verify_kernels"]

# model -> {packed-kernels flag: forward}; weak, so a dropped model takes its copy along
_BUILT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def lean_for(model: Any, *, packed: bool = True) -> Any:
    """The model's lean forward, built once per model and kernel choice; None where the
    model does not qualify (it keeps transformers' forward) or ``SPECTOOL_LEAN_FORWARD=0``.

    ``packed``: run on pre-packed fp32 weights where those apply (a CPU model; not with
    ``SPECTOOL_PACKED_GEMM=0``). Where the panel kernel builds and the model has no projection
    biases, that is :class:`.fused.FusedLlama` (one C call for all layers, one weight copy);
    elsewhere a :class:`.lean.LeanLlama` on MKL's copy per packed width, so callers that do
    not verify wide trees ask for packing only in the first case.
    """
    from .lean import LeanLlama, supports

    if not settings().lean_forward or not supports(model):
        return None
    from .fastpath import linear_kernels, packing_enabled

    built = _BUILT.setdefault(model, {})
    flag = packed and packing_enabled(model)  # False off the CPU and outside fp32
    if flag not in built:
        from .fused import FusedLlama, fusable

        if flag and fusable(model):
            built[flag] = FusedLlama(model, lean_for(model, packed=False))
        else:
            # the layer glue fused where a GPU and Triton are there, eager (unchanged) elsewhere
            built[flag] = LeanLlama(model, linear_kernels(model, packed=flag), layer_ops(model.device))
    return built[flag]


def layer_ops(device: Any, want: str = "auto") -> Any:
    """The layer glue (residual + RMSNorm, rotary, SwiGLU) for a captured decode step on
    ``device``: fused by ``torch.compile`` on a CUDA device with Triton, else the eager
    operators (:mod:`.layer_glue`). ``SPECTOOL_LEAN_FORWARD=0`` leaves no step to use them."""
    from .layer_glue import layer_ops as choose

    return choose(device, want)


def runs_fused(model: Any) -> bool:
    """Whether the tree code runs ``model`` through the fused C path, which holds its own
    packed weights (module-level copies would only double the memory)."""
    from .fused import FusedLlama

    return isinstance(lean_for(model), FusedLlama)


@contextmanager
def verify_kernels(model: Any) -> Iterator[None]:
    """Transformers' forward of ``model`` with grouped attention and, where the fused path
    does not already hold packed weights, pre-packed GEMMs (:func:`.fastpath.verify_kernels`)."""
    from .fastpath import verify_kernels as patched

    with patched(model, pack=not runs_fused(model)):
        yield


def new_cache() -> Any:
    """An empty KV cache whose layers grow in place (:class:`.fastpath.GrowableLayer`)."""
    from .fastpath import new_cache as make

    return make()
