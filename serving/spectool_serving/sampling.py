"""Sampling math: greedy, temperature, top-p with per-sequence seeds. No model, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

__all__ = ["SamplingParams", "probs_from_logits"]


@dataclass
class SamplingParams:
    """Per-choice decoding settings (OpenAI names). ``temperature == 0`` means greedy."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256
    seed: int | None = None
    stop: list[str] = field(default_factory=list)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


def probs_from_logits(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """logits [..., V] -> probabilities [..., V] after temperature and nucleus (top-p) filtering."""
    probs = torch.softmax(logits.float() / max(temperature, 1e-5), dim=-1)
    if top_p >= 1.0:
        return probs
    sorted_p, order = torch.sort(probs, dim=-1, descending=True)
    # keep the smallest prefix whose mass reaches top_p (the first token always stays)
    drop = (torch.cumsum(sorted_p, dim=-1) - sorted_p) >= top_p
    drop[..., 0] = False  # a top_p below float32's smallest value rounds to 0: keep the top token anyway
    sorted_p = sorted_p.masked_fill(drop, 0.0)
    kept = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    return kept / kept.sum(dim=-1, keepdim=True)
