"""Request state: one sequence per choice, as the engine and the HTTP layer see it."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import torch

from .sampling import SamplingParams
from .toolcalls import PromptFormat

__all__ = ["Phase", "RoundEvent", "Sequence", "Status"]

_ids = itertools.count(1)


class Status(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class Phase(Enum):
    TEXT = "text"  # free text; watching for the call start marker
    CALL = "call"  # inside a call body, under the call grammar


class RoundEvent(Enum):
    """What a round did besides appending a token, recorded on the sequence for the engine's
    counters (the round logic knows no engine)."""

    O3_HIT = "o3_hit"  # a call answered from the store; the value: tokens appended
    O3_MISS = "o3_miss"  # a call the store did not hold (the sequence ends with it)


@dataclass(eq=False)
class Sequence:
    """One choice of one request. ``tokens`` are all tokens (prompt, generated, appended);
    the first ``n_cached`` have KV in the running batch; the rest are pending."""

    response_id: str
    owner: str
    tokens: list[int]
    params: SamplingParams
    fmt: PromptFormat
    tools: list[Mapping[str, Any]]
    tool_choice: str | None  # None: no tools; "auto" | "none" | "required" | a tool name
    forced_ids: list[int]  # the call start marker's ids when a call is required
    emit: Callable[[dict], None]  # where events go (thread-safe, set by the async bridge)
    index: int = 0
    seq_id: int = field(default_factory=lambda: next(_ids))
    status: Status = Status.WAITING
    n_cached: int = 0
    prompt_len: int = 0
    appended: int = 0  # tool-result tokens appended by O3 (prompt tokens in the plain path)
    generated: int = 0
    generator: torch.Generator | None = None
    # the current assistant message
    body_start: int = 0
    round_generated: int = 0
    phase: Phase = Phase.TEXT
    call_start: int = -1  # char index in the body text just past the start marker
    matcher: Any = None
    draft_attempts: int = 0
    emitted_chars: int = 0
    resolved: list[dict] = field(default_factory=list)
    finish_reason: str | None = None
    final_call: dict | None = None
    content: str = ""
    events: list[tuple[RoundEvent, int]] = field(default_factory=list)  # drained by the engine

    def __post_init__(self) -> None:
        self.prompt_len = len(self.tokens)
        if self.params.seed is not None:
            self.generator = torch.Generator().manual_seed(self.params.seed + self.index)

    @property
    def pending(self) -> list[int]:
        return self.tokens[self.n_cached :]

    @property
    def done(self) -> bool:
        return self.status is Status.FINISHED
