"""Two memory-traffic fixes for tree verification on a transformers model.

Verifying a tree is a forward of a few tokens over a long cache, so the cost that is not
matmul FLOPs is memory traffic proportional to the cache, paid every step:

* transformers' ``DynamicLayer`` appends with ``torch.cat``: every step copies the whole
  cache. :class:`GrowableLayer` writes into a preallocated buffer (the engine's KV pool,
  :mod:`spectool_serving.kv`, or one that doubles when full) and hands the model views of it.
* for grouped-query models (SmolLM2: 9 query heads over 3 KV heads) the stock SDPA path
  repeats K and V per query head for any query longer than one token — three copies of the
  cache per layer per step. :func:`grouped_attention` folds each group's query heads into
  the query-length axis instead, so attention reads the cache once. Same maths, same result.

And one compute fix: fp32 GEMMs of a few rows (a verified tree). Stock ``F.linear``
re-packs the weight matrix on every call. Where the C kernel of :mod:`.kernels` builds (x86-64
with AVX-512 and a C compiler), every linear layer runs on one panel-packed copy of its
weights for any row count up to :data:`.kernels.MAX_ROWS` (SmolLM2, context 256, same process:
4 tokens 40.4 → 36.4 ms, 8 tokens 46 → 45 ms, 12 tokens 52 → 47 ms against MKL's packing).
Elsewhere, weights pre-packed by MKL are used for the widths in ``PACK_WIDTHS``, one copy per
width, taken in order of value until ``SPECTOOL_PACK_MAX_GB`` (default 4) is used; widths up
to 3 keep the stock kernel there.

:func:`verify_kernels` switches all of this on for the duration of a forward and restores the
model afterwards, so a model shared with a plain ``generate`` (the benchmark's baselines) is
left untouched. Llama models skip transformers' forward altogether (:mod:`.lean`), reusing
only the packed kernels, through :func:`linear_kernels`.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import AttentionInterface, DynamicCache
from transformers.cache_utils import DynamicLayer

from spectool.settings import settings

from . import kernels

__all__ = [
    "ATTENTION_NAME",
    "PACK_WIDTHS",
    "attention_backends",
    "GrowableLayer",
    "grouped_attention",
    "linear_kernels",
    "new_cache",
    "pack_widths",
    "packing_enabled",
    "reserve_slots",
    "verify_kernels",
]

ATTENTION_NAME = "spectool_grouped_sdpa"
# token counts whose fp32 GEMMs run on pre-packed weights, most valuable first (the cost
# table pads other widths up to the cheapest measured one)
PACK_WIDTHS = (8, 16, 4, 12, 32, 6, 24)
_MIN_CAPACITY = 256


# every SDPA backend but cuDNN's (see attention_backends)
_NO_CUDNN = (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH)


def attention_backends(device: torch.device) -> AbstractContextManager:
    """The SDPA backends a forward on ``device`` may use: on cuda every one but cuDNN's.

    cuDNN's attention builds an execution plan on the host for each new shape, and a decode
    step's key length is new every step: ``scripts/gpu-check.sh --profile`` on an H200
    (torch 2.11) measured 1.5-3.0 ms of host time per call against 5 µs of kernel, which made
    one-stream decoding 0.24-0.42x HF ``generate``. Elsewhere nothing changes."""
    return sdpa_kernel(list(_NO_CUDNN)) if device.type == "cuda" else nullcontext()


def grouped_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **_: Any,
) -> tuple[torch.Tensor, None]:
    """Attention with KV heads read once. query [B, H, Q, D]; key, value [B, Hk, L, D];
    attention_mask additive [B, 1, Q, ≥L]. Returns ([B, Q, H, D], None) like transformers'."""
    bsz, heads, q_len, dim = query.shape
    kv_heads, kv_len = key.shape[1], key.shape[2]
    rep = heads // kv_heads
    # head h = g * rep + r (transformers' repeat_kv order), so a group's heads are contiguous:
    # [B, Hk*rep, Q, D] -> [B, Hk, rep*Q, D], row index r*Q + q
    q_grouped = query.reshape(bsz, kv_heads, rep * q_len, dim)
    mask = None
    if attention_mask is not None:
        mask = _grouped_mask(attention_mask, rep, kv_len)  # [B, 1, rep*Q, L]
    causal = bool(is_causal) and mask is None and q_len > 1
    if causal and rep > 1:  # a causal flag cannot see the folded rows; spell the mask out
        mask = _grouped_mask(_causal_mask(q_len, kv_len, query.dtype)[None, None], rep, kv_len)
        causal = False
    with attention_backends(query.device):
        out = F.scaled_dot_product_attention(
            q_grouped,
            key,
            value,
            attn_mask=mask,
            dropout_p=dropout if module.training else 0.0,
            is_causal=causal,
            scale=scaling,
        )
    # reshape, not view: cuda's memory-efficient kernel returns [B, rep*Q, Hk, D] storage
    return out.reshape(bsz, heads, q_len, dim).transpose(1, 2).contiguous(), None


_last_masks: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}


def _grouped_mask(mask: torch.Tensor, rep: int, kv_len: int) -> torch.Tensor:
    """[B, 1, Q, ≥L] -> [B, 1, rep*Q, L]; memoised per mask object (every layer gets the same
    one), so the expansion happens once per forward rather than once per layer."""
    if rep == 1:
        return mask[..., :kv_len]
    key = (id(mask), rep)
    hit = _last_masks.get(key)
    if hit is not None and hit[0] is mask and hit[1].shape[-1] == kv_len:
        return hit[1]
    bsz, _, q_len, _ = mask.shape
    grouped = (
        mask[..., :kv_len][:, :, None].expand(bsz, 1, rep, q_len, kv_len).reshape(bsz, 1, rep * q_len, kv_len)
    )
    if len(_last_masks) >= 4:  # full and sliding masks of one forward; drop older forwards
        _last_masks.clear()
    _last_masks[key] = (mask, grouped)
    return grouped


def _causal_mask(q_len: int, kv_len: int, dtype: torch.dtype) -> torch.Tensor:
    keep = torch.ones(q_len, kv_len, dtype=torch.bool).tril(kv_len - q_len)
    return torch.zeros(q_len, kv_len, dtype=dtype).masked_fill(~keep, torch.finfo(dtype).min)


def _register() -> None:
    AttentionInterface.register(ATTENTION_NAME, grouped_attention)


_active: dict[int, int] = {}  # id(model) -> nesting depth of verify_kernels


@contextmanager
def verify_kernels(model: Any, pack: bool = True) -> Iterator[None]:
    """Run the enclosed forwards of ``model`` with :func:`grouped_attention` and, in fp32 on
    CPU, pre-packed GEMMs for the widths in ``PACK_WIDTHS``.

    Re-entrant: wrap a whole decoding loop once (installing 200-odd layer forwards costs
    about a millisecond) and let each forward's own ``verify_kernels`` be a no-op.
    """
    key = id(model)
    if _active.get(key):
        _active[key] += 1
        try:
            yield
        finally:
            _active[key] -= 1
        return
    cfg = model.config
    previous = cfg._attn_implementation
    swap = previous in ("sdpa", None)  # eager/flash etc.: keep the user's choice
    if swap:
        _register()
        cfg._attn_implementation = ATTENTION_NAME
    packs = _packs(model) if pack else {}
    for module, (_, forward) in packs.items():
        module.forward = forward  # an instance attribute shadows the class's forward
    _active[key] = 1
    try:
        yield
    finally:
        del _active[key]
        for module in packs:
            del module.forward
        if swap:
            cfg._attn_implementation = previous
        _last_masks.clear()


_PACKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _packs(model: Any) -> dict[Any, tuple[dict[int, torch.Tensor], Any]]:
    """Per linear layer: its packed weights and the forward that uses them. Packed once per
    model (one panel copy, or with MKL ≈ 4 s and one copy per width for SmolLM2); weights
    changed in place afterwards would need a fresh model object."""
    if not packing_enabled(model):
        return {}
    packs = _PACKED.get(model)
    if packs is None:
        packs = {}
        panels = kernels.available()  # one copy serves every width; else MKL's copy per width
        widths = () if panels else pack_widths(model)
        for module in model.modules():
            if not isinstance(module, torch.nn.Linear):
                continue
            if panels:
                kernel = kernels.PackedLinear(module.weight, module.bias)
                packs[module] = (kernel, kernel)
            else:
                by_width = {
                    w: torch.ops.mkl._mkl_reorder_linear_weight(module.weight.detach(), w) for w in widths
                }
                packs[module] = (by_width, _packed_forward(module, by_width))
        _PACKED[model] = packs
    return packs


def packing_enabled(model: Any) -> bool:
    """Whether ``model``'s linear layers run on pre-packed weights: fp32 on a CPU where the
    panel kernel builds or torch has MKL, unless ``SPECTOOL_PACKED_GEMM=0``."""
    return (
        settings().packed_gemm
        and model.dtype == torch.float32
        and model.device.type == "cpu"
        and (kernels.available() or hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight"))
    )


def pack_widths(model: Any) -> tuple[int, ...]:
    """The widths of :data:`PACK_WIDTHS` whose weight copies fit in ``SPECTOOL_PACK_MAX_GB``."""
    linear_bytes = sum(
        m.weight.numel() * m.weight.element_size() for m in model.modules() if isinstance(m, torch.nn.Linear)
    )
    budget = settings().pack_max_gb * 2**30  # ConfigError names the variable if it is no number
    copies = int(budget // max(linear_bytes, 1))
    return PACK_WIDTHS[: max(copies, 0)]


def linear_kernels(model: Any, packed: bool = True) -> Any:
    """A factory: Linear module -> the callable that runs it on this model's fastest kernels
    (pre-packed weights unless ``packed=False``, ``F.linear`` otherwise)."""
    packs = _packs(model) if packed else {}

    def make(module: torch.nn.Linear) -> Any:
        hit = packs.get(module)
        if hit is not None:
            return hit[1]
        weight, bias = module.weight, module.bias
        return lambda x: F.linear(x, weight, bias)

    return make


def _packed_forward(module: torch.nn.Linear, by_width: dict[int, torch.Tensor]) -> Any:
    stock = type(module).forward

    def forward(x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        packed = by_width.get(rows)
        if packed is None:
            return stock(module, x)
        y = torch.ops.mkl._mkl_linear(x.reshape(rows, x.shape[-1]), packed, module.weight, module.bias, rows)
        return y.reshape(*x.shape[:-1], y.shape[-1])

    return forward


class GrowableLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys/values are views of a buffer that grows by doubling."""

    _kbuf: torch.Tensor | None = None
    _vbuf: torch.Tensor | None = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        keys = self.keys  # a tensor once initialized
        start = keys.shape[-2] if keys is not None and keys.dim() == 4 else 0
        end = start + key_states.shape[-2]
        kbuf, vbuf = reserve_slots(self, key_states, end)
        kbuf[:, :, start:end] = key_states
        vbuf[:, :, start:end] = value_states
        self.keys, self.values = kbuf[:, :, :end], vbuf[:, :, :end]
        return self.keys, self.values


def reserve_slots(layer: DynamicLayer, like: torch.Tensor, need: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The layer's KV buffers [B, H, capacity ≥ need, D] (shaped like ``like``), whose prefix
    its keys/values are views of: kept while they still are (transformers' own reorder/select
    methods replace keys/values with copies), else reallocated at twice ``need`` with the
    cached slots copied in. Works on any ``DynamicLayer``: the buffers ride as attributes."""
    kbuf, vbuf = getattr(layer, "_kbuf", None), getattr(layer, "_vbuf", None)
    keys, values = layer.keys, layer.values
    if keys is None or values is None:
        raise ValueError("reserve_slots needs an initialized layer (call lazy_initialization first)")
    if (  # still ours, and big enough
        kbuf is not None
        and vbuf is not None
        and keys.dim() == 4
        and kbuf.shape[0] == like.shape[0]
        and keys.data_ptr() == kbuf.data_ptr()
        and values.data_ptr() == vbuf.data_ptr()
        and keys.stride() == kbuf.stride()
        and need <= kbuf.shape[-2]
    ):
        return kbuf, vbuf
    bsz, heads, _, dim = like.shape
    length = keys.shape[-2] if keys.dim() == 4 else 0
    cap = max(_MIN_CAPACITY, 2 * need)
    kbuf, vbuf = like.new_empty(bsz, heads, cap, dim), like.new_empty(bsz, heads, cap, dim)
    if length:
        kbuf[:, :, :length] = keys
        vbuf[:, :, :length] = values
    # any DynamicLayer: the buffers ride as plain attributes (GrowableLayer declares them)
    setattr(layer, "_kbuf", kbuf)  # noqa: B010
    setattr(layer, "_vbuf", vbuf)  # noqa: B010
    layer.keys, layer.values = kbuf[:, :, :length], vbuf[:, :, :length]
    return kbuf, vbuf


def new_cache() -> DynamicCache:
    """An empty cache whose layers are :class:`GrowableLayer`."""
    cache = DynamicCache()
    cache.layer_class_to_replicate = GrowableLayer
    return cache
