"""Two memory-traffic fixes for tree verification on a transformers model.

Verifying a tree is a forward of a few tokens over a long cache, so the cost that is not
matmul FLOPs is memory traffic proportional to the cache, paid every step:

* transformers' ``DynamicLayer`` appends with ``torch.cat``: every step copies the whole
  cache. :class:`GrowableLayer` writes into a preallocated buffer that doubles when full, and
  hands the model views of it (the in-place path gather of :func:`.verify.commit_paths` keeps
  working on those views).
* for grouped-query models (SmolLM2: 9 query heads over 3 KV heads) the stock SDPA path
  repeats K and V per query head for any query longer than one token — three copies of the
  cache per layer per step. :func:`grouped_attention` folds each group's query heads into
  the query-length axis instead, so attention reads the cache once. Same maths, same result.

:func:`tree_attention` switches a model to the grouped kernel for the duration of a forward
and restores the previous implementation, so a model shared with a plain ``generate`` (the
benchmark's baselines) is left untouched.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, DynamicCache
from transformers.cache_utils import DynamicLayer

__all__ = ["ATTENTION_NAME", "GrowableLayer", "grouped_attention", "new_cache", "tree_attention"]

ATTENTION_NAME = "spectool_grouped_sdpa"
_MIN_CAPACITY = 256


def grouped_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, dropout: float = 0.0,
                      scaling: float | None = None, is_causal: bool | None = None,
                      **_: Any) -> tuple[torch.Tensor, None]:
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
        mask = _grouped_mask(attention_mask[..., :kv_len], rep)  # [B, 1, rep*Q, L]
    causal = bool(is_causal) and mask is None and q_len > 1
    if causal and rep > 1:  # a causal flag cannot see the folded rows; spell the mask out
        mask = _grouped_mask(_causal_mask(q_len, kv_len, query.dtype)[None, None], rep)
        causal = False
    out = F.scaled_dot_product_attention(q_grouped, key, value, attn_mask=mask,
                                         dropout_p=dropout if module.training else 0.0,
                                         is_causal=causal, scale=scaling)
    return out.view(bsz, heads, q_len, dim).transpose(1, 2).contiguous(), None


_last_masks: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}


def _grouped_mask(mask: torch.Tensor, rep: int) -> torch.Tensor:
    """[B, 1, Q, L] -> [B, 1, rep*Q, L]; memoised per mask object (every layer shares it)."""
    if rep == 1:
        return mask
    key = (id(mask), rep)
    hit = _last_masks.get(key)
    if hit is not None and hit[0] is mask:
        return hit[1]
    bsz, _, q_len, kv_len = mask.shape
    grouped = mask[:, :, None].expand(bsz, 1, rep, q_len, kv_len).reshape(bsz, 1, rep * q_len, kv_len)
    if len(_last_masks) >= 4:  # full and sliding masks of one forward; drop older forwards
        _last_masks.clear()
    _last_masks[key] = (mask, grouped)
    return grouped


def _causal_mask(q_len: int, kv_len: int, dtype: torch.dtype) -> torch.Tensor:
    keep = torch.ones(q_len, kv_len, dtype=torch.bool).tril(kv_len - q_len)
    return torch.zeros(q_len, kv_len, dtype=dtype).masked_fill(~keep, torch.finfo(dtype).min)


def _register() -> None:
    AttentionInterface.register(ATTENTION_NAME, grouped_attention)


@contextmanager
def tree_attention(model: Any) -> Iterator[None]:
    """Run the enclosed forwards of ``model`` with :func:`grouped_attention`."""
    cfg = model.config
    previous = cfg._attn_implementation
    if previous not in ("sdpa", ATTENTION_NAME, None):  # eager/flash etc.: keep the user's choice
        yield
        return
    _register()
    cfg._attn_implementation = ATTENTION_NAME
    try:
        yield
    finally:
        cfg._attn_implementation = previous
        _last_masks.clear()


class GrowableLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys/values are views of a buffer that grows by doubling."""

    _kbuf: torch.Tensor | None = None
    _vbuf: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start = self.keys.shape[-2] if self.keys.dim() == 4 else 0
        end = start + key_states.shape[-2]
        if not self._owns_views(key_states) or end > self._kbuf.shape[-2]:
            self._reallocate(key_states, start, end)
        self._kbuf[:, :, start:end] = key_states
        self._vbuf[:, :, start:end] = value_states
        self.keys, self.values = self._kbuf[:, :, :end], self._vbuf[:, :, :end]
        return self.keys, self.values

    def _owns_views(self, new: torch.Tensor) -> bool:
        """True while keys/values are still prefix views of our buffers (transformers' own
        reorder/select methods replace them with copies)."""
        kb, vb = self._kbuf, self._vbuf
        return (kb is not None and vb is not None and self.keys.dim() == 4
                and kb.shape[0] == new.shape[0] and self.keys.data_ptr() == kb.data_ptr()
                and self.values.data_ptr() == vb.data_ptr() and self.keys.stride() == kb.stride())

    def _reallocate(self, like: torch.Tensor, length: int, need: int) -> None:
        bsz, heads, _, dim = like.shape
        cap = max(_MIN_CAPACITY, 2 * need)
        kbuf, vbuf = like.new_empty(bsz, heads, cap, dim), like.new_empty(bsz, heads, cap, dim)
        if length:
            kbuf[:, :, :length] = self.keys
            vbuf[:, :, :length] = self.values
        self._kbuf, self._vbuf = kbuf, vbuf


def new_cache() -> DynamicCache:
    """An empty cache whose layers are :class:`GrowableLayer`."""
    cache = DynamicCache()
    cache.layer_class_to_replicate = GrowableLayer
    return cache
