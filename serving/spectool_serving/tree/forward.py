"""Tree verification over a transformers ``DynamicCache``: one forward scores a whole tree.

The cache holds the accepted prefix of every row (batch rows may have holes: left padding and
slots of rows that accepted fewer tokens than others). ``kv_valid[b, j]`` says whether slot j
of row b is real and ``kv_pos[b, j]`` is its position id, so masks are built from data rather
than from slot numbers. Sliding-window layers (Gemma 3) get their own mask, passed to the
model as a dict keyed by layer type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["TreeState", "build_mask", "commit_paths", "prefill", "tree_forward"]


@dataclass
class TreeState:
    cache: Any  # transformers DynamicCache (plain layers: every layer keeps every slot)
    kv_valid: torch.Tensor  # [B, L] bool
    kv_pos: torch.Tensor  # [B, L] long
    next_pos: torch.Tensor  # [B] position id of each row's root token
    timings: list[float] = field(default_factory=list)

    @property
    def length(self) -> int:
        return int(self.kv_valid.shape[1])


def _window(model: Any) -> int | None:
    cfg = getattr(model, "config", None)
    types = getattr(cfg, "layer_types", None) or []
    return getattr(cfg, "sliding_window", None) if "sliding_attention" in types else None


def build_mask(
    q_pos: torch.Tensor,
    q_anc: torch.Tensor,
    kv_pos: torch.Tensor,
    kv_valid: torch.Tensor,
    dtype: torch.dtype,
    window: int | None = None,
) -> torch.Tensor | dict[str, torch.Tensor]:
    """Additive mask [B, 1, Q, L+Q]: cached slots where valid, new tokens where ``q_anc``.

    q_pos: [B, Q] positions of the new tokens; q_anc: [B, Q, Q] bool (ancestor-or-self);
    kv_pos, kv_valid: [B, L]. With ``window`` also returns the sliding-layer mask, which
    additionally hides keys at distance ``>= window``.
    """
    bsz, q = q_pos.shape
    allowed = torch.cat([kv_valid[:, None, :].expand(bsz, q, -1), q_anc], dim=2)  # [B,Q,L+Q]
    neg = torch.finfo(dtype).min

    def additive(ok: torch.Tensor) -> torch.Tensor:
        return torch.zeros(ok.shape, dtype=dtype).masked_fill(~ok, neg)[:, None]

    full = additive(allowed)
    if window is None:
        return full
    k_pos = torch.cat([kv_pos, q_pos], dim=1)  # [B, L+Q]
    near = (q_pos[:, :, None] - k_pos[:, None, :]) < window
    return {"full_attention": full, "sliding_attention": additive(allowed & near)}


def _forward(
    model: Any,
    state: TreeState,
    tokens: torch.Tensor,
    q_pos: torch.Tensor,
    q_anc: torch.Tensor,
    logits_to_keep: int = 0,
) -> torch.Tensor:
    from ..backends import lean_for, verify_kernels

    mask = build_mask(q_pos, q_anc, state.kv_pos, state.kv_valid, model.dtype, _window(model))
    lean = lean_for(model)
    if lean is not None:
        with torch.no_grad():
            return lean(tokens, q_pos, mask, state.cache, logits_to_keep)
    with torch.no_grad(), verify_kernels(model):
        out = model(
            input_ids=tokens,
            attention_mask=mask,
            position_ids=q_pos,
            past_key_values=state.cache,
            use_cache=True,
            logits_to_keep=logits_to_keep,
        )
    return out.logits


def prefill(
    model: Any, prompts: list[list[int]], logits_to_keep: int = 0
) -> tuple[TreeState, torch.Tensor, list[int]]:
    """Run every prompt but its last token (the first root), left-padded into one batch.

    Returns (state, logits [B, P', V] of the last P' = ``logits_to_keep`` prefix positions
    (0: all of them), roots [B]). Only the drafter's store warm-up reads these logits, and
    the output projection over a 49k vocabulary is a quarter of a prefill's FLOPs.
    """
    from ..backends import new_cache

    if any(len(p) < 2 for p in prompts):
        raise ValueError("each prompt needs at least two tokens")
    bsz, width = len(prompts), max(len(p) for p in prompts) - 1
    tokens = torch.zeros(bsz, width, dtype=torch.long)
    valid = torch.zeros(bsz, width, dtype=torch.bool)
    for b, p in enumerate(prompts):
        tokens[b, width - len(p) + 1 :] = torch.tensor(p[:-1])
        valid[b, width - len(p) + 1 :] = True
    pos = (valid.long().cumsum(1) - 1).clamp(min=0)
    causal = torch.tril(torch.ones(width, width, dtype=torch.bool))
    anc = (causal[None] & valid[:, None, :]) | torch.eye(width, dtype=torch.bool)[None]
    empty = TreeState(
        new_cache(),
        torch.zeros(bsz, 0, dtype=torch.bool),
        torch.zeros(bsz, 0, dtype=torch.long),
        torch.zeros(bsz, dtype=torch.long),
    )
    logits = _forward(model, empty, tokens, pos, anc, logits_to_keep)
    state = TreeState(empty.cache, valid, pos, torch.tensor([len(p) - 1 for p in prompts]))
    return state, logits, [p[-1] for p in prompts]


def tree_forward(
    model: Any,
    state: TreeState,
    tokens: torch.Tensor,
    depth: torch.Tensor,
    anc: torch.Tensor,
    real: torch.Tensor,
) -> torch.Tensor:
    """Score padded trees (``tokens, depth [B,G]``, ``anc [B,G,G]``); appends G slots.

    Returns logits [B, G, V]. Call :func:`commit_paths` next to keep only accepted nodes.
    """
    q_pos = state.next_pos[:, None] + depth
    logits = _forward(model, state, tokens, q_pos, anc)
    state.kv_valid = torch.cat([state.kv_valid, real], dim=1)
    state.kv_pos = torch.cat([state.kv_pos, q_pos], dim=1)
    return logits


def commit_paths(state: TreeState, paths: list[list[int]], width: int) -> None:
    """Keep each row's accepted path (node ids, root first) of the last ``width`` slots.

    The path's KV is gathered to the front of the tree slots in place and the rest cropped,
    so only O(accepted) data moves; rows that accepted fewer keep masked holes.
    """
    bsz = len(paths)
    keep = max(len(p) for p in paths)
    base = state.length - width
    idx = torch.zeros(bsz, keep, dtype=torch.long)
    ok = torch.zeros(bsz, keep, dtype=torch.bool)
    for b, p in enumerate(paths):
        idx[b, : len(p)] = torch.tensor(p)
        idx[b, len(p) :] = p[-1]
        ok[b, : len(p)] = True
    rows = torch.arange(bsz)[:, None]
    in_place = all(p == list(range(len(p))) for p in paths)  # paths already where they belong
    for layer in state.cache.layers:
        if in_place:
            layer.keys, layer.values = layer.keys[:, :, : base + keep], layer.values[:, :, : base + keep]
            continue
        for name in ("keys", "values"):
            t = getattr(layer, name)  # [B, H, L+G, D]
            src = t[:, :, base:][rows, :, idx]  # [B, keep, H, D]
            t[:, :, base : base + keep] = src.permute(0, 2, 1, 3)
            setattr(layer, name, t[:, :, : base + keep])
    pos = state.kv_pos[:, base:].gather(1, idx)
    state.kv_pos = torch.cat([state.kv_pos[:, :base], pos], dim=1)
    state.kv_valid = torch.cat([state.kv_valid[:, :base], ok], dim=1)
    state.next_pos = state.next_pos + torch.tensor([len(p) for p in paths])
