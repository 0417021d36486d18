"""Token prompts through the serving engine, run to idle: the loop decode-bench measures.

As nano-vllm's ``bench.py`` drives ``LLM.generate``: one :class:`~spectool_serving.engine.Engine`
per run, its text rows drafted by a :class:`~spectool_serving.tree.policy.DecodingPolicy` (or
none: plain one-token decoding through the same forward), every prompt added at once and the
engine stepped until nothing is left. What a user serves is what is timed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from spectool_serving.engine import Engine
from spectool_serving.runner import Runner
from spectool_serving.sampling import SamplingParams
from spectool_serving.scheduler import Scheduler
from spectool_serving.sequence import Error, Event, Sequence
from spectool_serving.tree.policy import DecodingPolicy, PolicyStats

__all__ = ["Run", "bench_engine", "run_engine"]


class _TimedRunner(Runner):
    """The engine's runner with its prompts' forwards timed (the prefill phase of a run)."""

    prefill_s = 0.0

    def prefill(self, token_ids: list[int], keep: int = 1) -> tuple[Any, Any]:
        t0 = time.perf_counter()
        try:
            return super().prefill(token_ids, keep)
        finally:
            self.prefill_s += time.perf_counter() - t0


@dataclass
class Run:
    """One engine run: each prompt's generated tokens (EOS included when hit) and timings."""

    outputs: list[list[int]]
    total_s: float
    prefill_s: float  # the prompts' forwards (with the store's warm-up rows)
    steps: int  # batched engine steps after the prefills
    stats: PolicyStats = field(default_factory=PolicyStats)  # empty for plain decoding

    @property
    def tau(self) -> float:
        return self.stats.tau

    @property
    def mean_draft(self) -> float:
        return self.stats.mean_draft


def bench_engine(model: Any, tokenizer: Any, fmt: Any, max_batch: int = 64) -> Engine:
    """One engine for many runs (its call grammar takes seconds to build for a 49k vocabulary;
    its KV pool, once grown, is kept as a server keeps it). No tool cache: text only."""
    device = str(next(model.parameters()).device)
    scheduler = Scheduler(max_batch=max_batch, max_slots=1 << 22, prefills_per_step=max_batch)
    return Engine(_TimedRunner(model, device), tokenizer, fmt, scheduler=scheduler)


def run_engine(
    engine: Engine, prompts: list[list[int]], max_new_tokens: int, policy: DecodingPolicy | None = None
) -> Run:
    """Greedy decoding of every prompt together, ``max_new_tokens`` each (fewer at EOS), with
    ``policy`` drafting the text rows (None: plain decoding)."""
    if engine.scheduler.has_work() or len(prompts) > engine.scheduler.max_batch:
        raise ValueError("an idle engine whose batch holds every prompt is needed")
    runner = engine.runner
    assert isinstance(runner, _TimedRunner), "an engine from bench_engine"
    engine.decoding, runner.prefill_s = policy, 0.0
    steps = engine.stats.decode_steps
    errors: list[str] = []

    def emit(event: Event) -> None:
        if isinstance(event, Error):
            errors.append(event.message)

    params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens)
    seqs = [
        Sequence(f"bench-{i}", "", list(p), params, engine.fmt, [], None, [], emit=emit, index=i)
        for i, p in enumerate(prompts)
    ]
    t0 = time.perf_counter()
    for seq in seqs:
        engine.add(seq)
    engine.run_until_idle()
    total = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} sequence(s) failed: {errors[0]}")
    return Run(
        [s.tokens[len(p) :] for s, p in zip(seqs, prompts)],
        total,
        runner.prefill_s,
        engine.stats.decode_steps - steps,
        policy.stats if policy is not None else PolicyStats(),
    )
