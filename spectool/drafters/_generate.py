"""LocalDrafter's earlier decoding path (``decoder="generate"``): one batched
``transformers.generate`` whose λ rows share one prefill, kept selectable for comparison with
the fast path of :mod:`._decode`. torch/transformers load lazily."""

from __future__ import annotations

import threading
import time
from typing import Any

from .._types import DraftRequest
from ._loading import LocalModel

__all__ = ["GreedyRow", "eos_ids", "generate_texts", "shared_prefill"]


class _Cancelled:
    """A transformers StoppingCriteria that stops every row once its event is set."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        return torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool)


class GreedyRow:
    """Row 0 of a sampled batch decodes greedily: its best token is the only one left.

    The greedy answer is the single most likely call; sampling the other rows adds diversity
    without losing it.
    """

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        best = int(scores[0].argmax())
        keep = scores[0, best].clone()
        scores[0, :] = float("-inf")
        scores[0, best] = keep
        return scores


def generate_texts(
    drafter: Any, loaded: LocalModel, request: DraftRequest, stop: threading.Event
) -> tuple[list[str], float | None, float | None]:
    """Draft with one batched ``generate``: the texts, wall and thread-CPU seconds (None when
    stopped before it started)."""
    import torch
    from transformers import StoppingCriteriaList

    ids = torch.tensor([drafter.token_ids(loaded, request)])
    sample = drafter.temperature > 0 and int(request.samples) > 1
    n = max(1, int(request.samples)) if sample else 1  # greedy samples would all be equal
    kwargs: dict[str, Any] = {
        "max_new_tokens": drafter.max_new_tokens,
        "do_sample": sample,
        "stopping_criteria": StoppingCriteriaList([_Cancelled(stop)]),
    }
    if sample:
        kwargs.update(temperature=drafter.temperature, top_p=drafter.top_p)
    eos = eos_ids(loaded)
    processors: list[Any] = []
    if drafter.constrained:
        grammar = loaded.constraint(drafter.max_string_length, drafter.max_calls)
        processors.append(grammar.processor(drafter.draft_tools(request), n))
        eos = sorted(set(eos) | set(grammar.stop_token_ids))
    if sample and drafter.greedy_first:
        processors.append(GreedyRow())  # after the mask: the best *allowed* token
    kwargs["logits_processor"] = processors
    kwargs["eos_token_id"] = eos
    kwargs["pad_token_id"] = eos[0] if eos else 0
    with loaded.lock, torch.inference_mode():
        if stop.is_set():
            return [], None, None
        start, cpu = time.perf_counter(), time.thread_time()
        batch, extra = shared_prefill(loaded.model, ids, n)
        out = loaded.model.generate(input_ids=batch, attention_mask=torch.ones_like(batch), **extra, **kwargs)
        seconds = time.perf_counter() - start
        # CPU seconds of this thread: all of it with torch at one thread, robust to load
        cpu = time.thread_time() - cpu
    return loaded.tokenizer.batch_decode(out[:, ids.shape[-1] :], skip_special_tokens=True), seconds, cpu


def shared_prefill(model: Any, ids: Any, n: int) -> tuple[Any, dict[str, Any]]:
    """λ rows that share ONE prefill: the prompt's KV cache is computed once and repeated.

    ``num_return_sequences`` would prefill the prompt λ times; the outputs are the same.
    Falls back to that for models whose cache cannot be repeated.
    """
    if n == 1:
        return ids, {}
    try:
        from transformers import DynamicCache

        cache = DynamicCache(config=model.config)
        model(input_ids=ids[:, :-1], past_key_values=cache, use_cache=True)
        cache.batch_repeat_interleave(n)
    except (AttributeError, TypeError, NotImplementedError):
        return ids, {"num_return_sequences": n}
    return ids.repeat(n, 1), {"past_key_values": cache}


def eos_ids(loaded: LocalModel) -> list[int]:
    found: set[int] = set()
    for value in (
        getattr(loaded.model.generation_config, "eos_token_id", None),
        loaded.tokenizer.eos_token_id,
    ):
        if isinstance(value, int):
            found.add(value)
        elif isinstance(value, (list, tuple)):
            found.update(int(v) for v in value)
    return sorted(found)
