"""Llama decoder layers in one C call for the few rows of a verified tree (fp32, CPU).

:class:`~.lean.LeanLlama` brought a forward down to ~35 torch operators per layer; at one to
a few dozen rows each of them costs more in dispatch than in arithmetic (SmolLM2, one token:
~8 of 31 ms). :class:`FusedLlama` hands all layers to ``_layers.c`` at once — norms, rotary,
KV write, masked attention, SiLU MLP and residuals between panel GEMMs — and keeps in Python
only what is per forward: the embedding, rotary tables, cache buffers, final norm, LM head.

It writes new keys/values straight into the cache's buffers (:func:`.fastpath.reserve_slots`),
so it shares a cache with :class:`~.lean.LeanLlama`, which still runs wider forwards (prefill,
more than :data:`.kernels.MAX_ROWS` rows). Which path a model gets:
:func:`spectool_serving.backends.lean_for`.
"""

from __future__ import annotations

import ctypes
from typing import Any

import torch
import torch.nn.functional as F

from . import kernels
from .fastpath import reserve_slots
from .lean import LeanLlama

__all__ = ["FusedLlama", "fusable"]

_P = ctypes.c_void_p


_WEIGHTS = ("ln_in", "ln_post", "qkv", "o", "gate_up", "down")  # per-layer pointer arrays


class _Spec(ctypes.Structure):  # mirrors spectool_llama in _layers.c, field for field
    _fields_ = [
        *[(n, ctypes.c_int64) for n in ("layers", "hidden", "heads", "kv_heads", "head_dim", "inter")],
        *[(n, ctypes.c_float) for n in ("eps", "scale")],
        *[(n, _P) for n in _WEIGHTS],
    ]


def fusable(model: Any) -> bool:
    """fp32 CPU Llama (as :func:`.lean.supports`) without projection biases, kernels built."""
    cfg = model.config
    lib = kernels.library()
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return (
        lib is not None
        and model.dtype == torch.float32
        and model.device.type == "cpu"
        and not getattr(cfg, "attention_bias", False)
        and model.model.layers[0].self_attn.q_proj.bias is None  # Qwen2 biases with no flag
        and not getattr(cfg, "mlp_bias", False)
        and head_dim % 2 == 0
        and head_dim <= lib.spectool_llama_max_head_dim()
    )


def _pointers(tensors: list[torch.Tensor]) -> ctypes.Array:
    return (_P * len(tensors))(*[t.data_ptr() for t in tensors])


class FusedLlama:
    """Same call as :class:`~.lean.LeanLlama`; rows beyond the panel kernel go to ``wide``."""

    def __init__(self, model: Any, wide: LeanLlama) -> None:
        self.wide = wide
        cfg, layers = model.config, model.model.layers[: model.config.num_hidden_layers]
        weight = lambda m: m.weight.detach()  # noqa: E731
        pack = lambda *mods: kernels.PackedLinear(torch.cat([weight(m) for m in mods]))  # noqa: E731
        attn = [layer.self_attn for layer in layers]
        mlp = [layer.mlp for layer in layers]
        # one packed copy per weight; the tensors are kept: C reads them through pointers
        self._keep = {
            "ln_in": [weight(ly.input_layernorm).float().contiguous() for ly in layers],
            "ln_post": [weight(ly.post_attention_layernorm).float().contiguous() for ly in layers],
            "qkv": [pack(a.q_proj, a.k_proj, a.v_proj).packed for a in attn],
            "o": [pack(a.o_proj).packed for a in attn],
            "gate_up": [pack(m.gate_proj, m.up_proj).packed for m in mlp],
            "down": [pack(m.down_proj).packed for m in mlp],
        }
        self._arrays = {name: _pointers(ts) for name, ts in self._keep.items()}
        self._spec = _Spec(
            len(layers),
            cfg.hidden_size,
            wide.heads,
            wide.kv_heads,
            wide.head_dim,
            cfg.intermediate_size,
            wide.eps,
            wide.scaling,
            *[ctypes.cast(self._arrays[n], _P) for n in _WEIGHTS],
        )
        self.lm_head = kernels.PackedLinear(weight(model.lm_head))
        lib = kernels.library()
        if lib is None:
            raise RuntimeError("FusedLlama needs the CPU kernel library; check fusable(model) first")
        self._call = lib.spectool_llama_layers

    def __call__(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        mask: torch.Tensor,
        cache: Any,
        logits_to_keep: int = 0,
    ) -> torch.Tensor:
        """As :meth:`.lean.LeanLlama.__call__`: logits [B, Q', V]; the cache grows by Q."""
        bsz, q_len = input_ids.shape
        if bsz * q_len > kernels.MAX_ROWS or torch.is_grad_enabled():
            return self.wide(input_ids, position_ids, mask, cache, logits_to_keep)
        wide = self.wide
        x = F.embedding(input_ids, wide.embed).contiguous()  # [B, Q, E], residual stream
        cos, sin = wide._rope(position_ids, x.dtype)  # [B, Q, D]
        slots = mask.shape[-1]  # cached + new
        mask = mask.to(torch.float32).expand(bsz, 1, q_len, slots).contiguous()
        keys, values, caps = self._buffers(cache, x, bsz, slots, slots - q_len)
        status = self._call(
            ctypes.byref(self._spec),
            x.data_ptr(),
            bsz,
            q_len,
            cos.contiguous().data_ptr(),
            sin.contiguous().data_ptr(),
            mask.data_ptr(),
            slots,
            keys,
            values,
            caps,
        )
        if status != 0:
            raise MemoryError("spectool_llama_layers could not allocate its scratch buffers")
        if logits_to_keep:
            x = x[:, -logits_to_keep:]
        return self.lm_head(wide._rms(x, wide.norm))

    def _buffers(
        self, cache: Any, like: torch.Tensor, bsz: int, slots: int, cached: int
    ) -> tuple[ctypes.Array, ctypes.Array, ctypes.Array]:
        """Every layer's KV buffers with room for ``slots``; keys/values extended to them."""
        n = self._spec.layers
        make = getattr(cache, "layer_class_to_replicate", None)
        while len(cache.layers) < n:
            if make is None:
                raise ValueError(f"the cache has {len(cache.layers)} layers of {n} and cannot add more")
            cache.layers.append(make())
        shape = torch.empty(bsz, self._spec.kv_heads, 0, self._spec.head_dim, dtype=like.dtype)
        kbufs, vbufs = [], []
        for layer in cache.layers[:n]:
            if not layer.is_initialized:
                layer.lazy_initialization(shape, shape)
            have = layer.keys.shape[-2] if layer.keys.dim() == 4 else 0
            if have != cached:
                raise ValueError(f"the mask covers {cached} cached slots, the cache holds {have}")
            kbuf, vbuf = reserve_slots(layer, shape, slots)
            layer.keys, layer.values = kbuf[:, :, :slots], vbuf[:, :, :slots]
            kbufs.append(kbuf)
            vbufs.append(vbuf)
        caps = (ctypes.c_int64 * n)(*[k.shape[2] for k in kbufs])
        return _pointers(kbufs), _pointers(vbufs), caps
