"""A lean forward for Llama-architecture models: the same maths as transformers' modules in
about a fifth of the operator calls.

At batch 1 on a CPU a decoding forward of SmolLM2-135M is ~60 % GEMM; most of the rest is
per-operator and per-module overhead (3 000-odd small ATen calls, a Python ``forward`` per
module, mask and rotary bookkeeping per layer). :class:`LeanLlama` reads the model's own
weights (and the packed fp32 weights of :mod:`.fastpath`) and runs the decoder as one flat
loop:

* rotary cos/sin are computed per forward from the positions, on their device (the values
  transformers computes), and ``rotate_half`` becomes one ``roll``
  against a sign-folded sine (``-a*b == a*(-b)`` exactly);
* query heads are folded into their KV group's query axis as they are projected (the
  :func:`.fastpath.grouped_attention` layout), and the grouped mask is built once per forward
  rather than once per layer;
* RMSNorm, SiLU-gated MLP and residuals use transformers' operator order, so a one-token
  forward gives the same logits as the model's own.

Only plain Llama decoders qualify (:func:`supports`): no sliding windows, static rotary
frequencies, SiLU MLP. Qwen2 decoders (the same layers with biased q/k/v projections, which
the linear layers carry) qualify off the CPU, where a captured step serves a drafter of that
family; on a CPU they keep transformers' forward, as its C kernels take no biases. Everything
else — Gemma 3 included — keeps transformers' forward.
Which models get it, and on which kernels: :mod:`spectool_serving.backends`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from .fastpath import attention_backends
from .layer_glue import LayerOps, eager_ops

__all__ = ["LeanLlama", "supports"]

_STATIC_ROPE = ("default", "linear", "llama3")
Linear = Callable[[torch.Tensor], torch.Tensor]


def supports(model: Any) -> bool:
    """True for Llama decoders whose maths :class:`LeanLlama` reproduces exactly."""
    cfg = getattr(model, "config", None)
    inner = getattr(model, "model", None)
    rotary = getattr(inner, "rotary_emb", None)
    family = getattr(cfg, "model_type", None)
    sliding = "sliding_attention" in (getattr(cfg, "layer_types", None) or ())
    return (
        (family == "llama" or (family == "qwen2" and not sliding and _off_cpu(model)))
        and rotary is not None
        and getattr(rotary, "rope_type", "default") in _STATIC_ROPE
        and getattr(cfg, "hidden_act", None) == "silu"
        and (getattr(cfg, "pretraining_tp", 1) or 1) == 1
        and not getattr(cfg, "sliding_window", None)
        and not model.training
    )


def _off_cpu(model: Any) -> bool:
    try:
        return next(model.parameters()).device.type != "cpu"
    except (StopIteration, AttributeError):
        return False


@dataclass(frozen=True)
class _Layer:
    ln_in: torch.Tensor
    q: Linear
    k: Linear
    v: Linear
    o: Linear
    ln_post: torch.Tensor
    gate: Linear
    up: Linear
    down: Linear


class LeanLlama:
    """The decoder of one Llama model as a flat loop over its layers' weights."""

    def __init__(
        self, model: Any, linear: Callable[[torch.nn.Linear], Linear], ops: LayerOps | None = None
    ) -> None:
        cfg, inner = model.config, model.model
        # the layer glue: eager (transformers' operator order) unless the chooser fused it
        self.ops = ops or eager_ops()
        self.heads = cfg.num_attention_heads
        self.kv_heads = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.eps = cfg.rms_norm_eps
        self.scaling = inner.layers[0].self_attn.scaling
        self.embed = inner.embed_tokens.weight
        self.norm = inner.norm.weight
        self.lm_head = linear(model.lm_head)
        self.layers = [
            _Layer(
                layer.input_layernorm.weight,
                linear(layer.self_attn.q_proj),
                linear(layer.self_attn.k_proj),
                linear(layer.self_attn.v_proj),
                linear(layer.self_attn.o_proj),
                layer.post_attention_layernorm.weight,
                linear(layer.mlp.gate_proj),
                linear(layer.mlp.up_proj),
                linear(layer.mlp.down_proj),
            )
            for layer in inner.layers[: cfg.num_hidden_layers]
        ]
        self._inv_freq = inner.rotary_emb.inv_freq.float()
        self._rope_scale = inner.rotary_emb.attention_scaling

    def _rope(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sign-folded sin [B, Q, D] for position ids [B, Q].

        Computed per forward on the positions' own device (as transformers does): a cached
        table would need ``positions.max()`` on the host, a device sync per forward, and a
        table built on the CPU breaks any other device."""
        freqs = positions.to(self._inv_freq.device, torch.float)[..., None] * self._inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)  # [B, Q, D]
        cos, sin = emb.cos() * self._rope_scale, emb.sin() * self._rope_scale
        half = sin.shape[-1] // 2
        sin = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
        return cos.to(dtype), sin.to(dtype)

    def _rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return self.ops.rms(x, weight, self.eps)

    def __call__(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        mask: torch.Tensor,
        cache: Any,
        logits_to_keep: int = 0,
    ) -> torch.Tensor:
        """input_ids, position_ids [B, Q]; additive mask [B, 1, Q, L+Q] over the cached and
        new slots; ``cache`` a transformers ``DynamicCache`` that grows by Q slots.
        Returns logits [B, Q', V] of the last Q' = ``logits_to_keep`` positions (0: all)."""
        bsz, q_len = input_ids.shape
        rep = self.heads // self.kv_heads
        x = F.embedding(input_ids, self.embed)  # [B, Q, E]
        cos, sin = self._rope(position_ids, x.dtype)  # [B, Q, D]
        # query rows of one KV group are contiguous: row r*Q + q (transformers' repeat_kv order)
        kv_len = mask.shape[-1]
        gmask = mask[:, :, None].expand(bsz, 1, rep, q_len, kv_len).reshape(bsz, 1, rep * q_len, kv_len)
        with attention_backends(x.device):
            x = self._layers(x, cos, sin, gmask, cache)
        if logits_to_keep:
            x = x[:, -logits_to_keep:]
        return self.lm_head(self._rms(x, self.norm))

    def _layers(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, gmask: torch.Tensor, cache: Any
    ) -> torch.Tensor:
        """x [B, Q, E] through every decoder layer; cos, sin [B, Q, D]; gmask [B, 1, rep*Q, L+Q]."""
        bsz, q_len = x.shape[:2]
        hk, rep, dim = self.kv_heads, self.heads // self.kv_heads, self.head_dim
        cos_q, sin_q = cos[:, None, None], sin[:, None, None]  # [B, 1, 1, Q, D]
        cos_k, sin_k = cos[:, None], sin[:, None]  # [B, 1, Q, D]
        ops = self.ops
        for i, layer in enumerate(self.layers):
            h = self._rms(x, layer.ln_in)
            q = layer.q(h).view(bsz, q_len, hk, rep, dim).permute(0, 2, 3, 1, 4)
            k = layer.k(h).view(bsz, q_len, hk, dim).transpose(1, 2)  # [B, Hk, Q, D]
            v = layer.v(h).view(bsz, q_len, hk, dim).transpose(1, 2)
            q = ops.rotary(q, cos_q, sin_q).reshape(bsz, hk, rep * q_len, dim)
            k = ops.rotary(k, cos_k, sin_k)
            keys, values = cache.update(k, v, i)  # [B, Hk, L+Q, D]
            a = F.scaled_dot_product_attention(
                q, keys, values, attn_mask=gmask, scale=self.scaling
            )  # [B, Hk, rep*Q, D]
            # reshape, not view: cuda's memory-efficient kernel returns [B, rep*Q, Hk, D] storage
            a = a.reshape(bsz, hk * rep, q_len, dim).transpose(1, 2).reshape(bsz, q_len, -1)
            x, h = ops.add_rms(x, layer.o(a), layer.ln_post, self.eps)
            x = x + layer.down(ops.swiglu(layer.gate(h), layer.up(h)))
        return x
