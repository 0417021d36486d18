"""One decode step of a Llama-architecture model whose tensor shapes never change: what a
CUDA graph captures (:mod:`spectool_serving.graphs`) and what ``torch.compile(fullgraph=True)``
must trace without a break (the CPU proxy for capture, tested in CI).

Where :class:`.lean.LeanLlama` appends to a cache that grows (views whose width changes every
step), :class:`StaticStep` reads and writes the engine's KV pool at its full capacity:

* the new keys/values are scattered into the pool at a **slot mapping** ``slots[b, j]`` (the
  pool column of row b's new token j), instead of being appended;
* attention reads every column of the pool, and the additive ``mask`` (one row per new token,
  one column per pool slot) hides the columns that are no row's valid slot — holes, unused
  capacity, other tokens' drafts. Masked columns add exact zeros to the softmax, so the maths
  is the lean forward's.

Batch row b is pool row b (the block table of :mod:`spectool_serving.kv` is per row), so the
pool is passed as ``pool[:rows]`` views. The layer glue comes from :mod:`.layer_glue`; with its
eager operations the step is LeanLlama's operator for operator.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .layer_glue import LayerOps, eager_ops
from .lean import LeanLlama

__all__ = ["StaticStep", "pool_views"]


class StaticStep:
    """``step(ids, positions, slots, mask, pools) -> logits``: ids, positions, slots [B, G]
    int64; mask [B, 1, G, C] additive in the model's dtype; pools per layer (keys, values)
    [B, Hk, C, D], written in place at ``slots``. Returns logits [B, G, V] in the model's dtype."""

    def __init__(self, lean: LeanLlama, ops: LayerOps | None = None) -> None:
        self.lean = lean
        self.ops = ops or eager_ops()

    def __call__(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        slots: torch.Tensor,
        mask: torch.Tensor,
        pools: list[tuple[torch.Tensor, torch.Tensor]],
    ) -> torch.Tensor:
        lean, ops = self.lean, self.ops
        bsz, g = ids.shape
        hk, dim, eps = lean.kv_heads, lean.head_dim, lean.eps
        rep = lean.heads // hk
        x = F.embedding(ids, lean.embed)  # [B, G, E]
        cos, sin = lean._rope(positions, x.dtype)  # [B, G, D]
        cos_q, sin_q = cos[:, None, None], sin[:, None, None]  # [B, 1, 1, G, D]
        cos_k, sin_k = cos[:, None], sin[:, None]  # [B, 1, G, D]
        width = mask.shape[-1]
        # query rows of one KV group are contiguous: row r*G + j (transformers' repeat_kv order)
        gmask = mask[:, :, None].expand(bsz, 1, rep, g, width).reshape(bsz, 1, rep * g, width)
        where = slots[:, None, :, None].expand(bsz, hk, g, dim)  # scatter index into [B, Hk, C, D]
        layers = lean.layers
        h = ops.rms(x, layers[0].ln_in, eps)
        for i, layer in enumerate(layers):
            q = layer.q(h).view(bsz, g, hk, rep, dim).permute(0, 2, 3, 1, 4)
            k = layer.k(h).view(bsz, g, hk, dim).transpose(1, 2)  # [B, Hk, G, D]
            v = layer.v(h).view(bsz, g, hk, dim).transpose(1, 2)
            q = ops.rotary(q, cos_q, sin_q).reshape(bsz, hk, rep * g, dim)
            k = ops.rotary(k, cos_k, sin_k)
            keys, values = pools[i]
            keys.scatter_(2, where, k)
            values.scatter_(2, where, v)
            a = F.scaled_dot_product_attention(q, keys, values, attn_mask=gmask, scale=lean.scaling)
            # reshape, not view: cuda's memory-efficient kernel returns [B, rep*G, Hk, D] storage
            a = a.reshape(bsz, hk * rep, g, dim).transpose(1, 2).reshape(bsz, g, -1)
            x, h = ops.add_rms(x, layer.o(a), layer.ln_post, eps)
            nxt = layers[i + 1].ln_in if i + 1 < len(layers) else lean.norm
            x, h = ops.add_rms(x, layer.down(ops.swiglu(layer.gate(h), layer.up(h))), nxt, eps)
        return lean.lm_head(h)


def pool_views(pool: list[tuple[torch.Tensor, torch.Tensor]], rows: int) -> list[tuple[Any, Any]]:
    """The first ``rows`` rows of every layer's (keys, values) pool, as views."""
    return [(k[:rows], v[:rows]) for k, v in pool]
