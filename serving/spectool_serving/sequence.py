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

__all__ = ["Content", "Error", "Event", "Finish", "Phase", "Resolved", "RoundEvent", "Sequence", "Status"]

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


class _Event:
    """Base of the engine's events; ``type`` names the kind in the OpenAI stream's words."""

    type: str = ""


@dataclass(frozen=True)
class Content(_Event):
    """Streamed text of the current assistant message."""

    text: str
    type: str = "content"


@dataclass(frozen=True)
class Resolved(_Event):
    """A call answered from the store (O3): its preceding content, the call and the output."""

    record: dict
    type: str = "resolved"


@dataclass(frozen=True)
class Finish(_Event):
    """The sequence ended; the last event of a choice (or :class:`Error`)."""

    reason: str | None
    content: str
    tool_call: dict | None
    resolved: list[dict]
    usage: dict[str, int]
    type: str = "finish"


@dataclass(frozen=True)
class Error(_Event):
    """The sequence failed; the last event of a choice."""

    message: str
    type: str = "error"


Event = Content | Resolved | Finish | Error


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
    emit: Callable[[Event], None]  # where events go (thread-safe, set by the async bridge)
    index: int = 0
    seq_id: int = field(default_factory=lambda: next(_ids))
    status: Status = Status.WAITING
    n_cached: int = 0
    prompt_len: int = 0
    appended: int = 0  # tool-result tokens appended by O3 (prompt tokens in the plain path)
    generated: int = 0
    generator: torch.Generator | None = None
    round: Any = None  # the current assistant message: a rounds.Round (set by begin_round)
    resolved: list[dict] = field(default_factory=list)
    finish_reason: str | None = None
    final_call: dict | None = None
    content: str = ""
    round_events: list[tuple[RoundEvent, int]] = field(default_factory=list)  # drained by the engine

    def __post_init__(self) -> None:
        self.prompt_len = len(self.tokens)
        if self.params.seed is not None:
            self.generator = torch.Generator().manual_seed(self.params.seed + self.index)

    @property
    def phase(self) -> Phase:
        return self.round.phase if self.round is not None else Phase.TEXT

    @property
    def matcher(self) -> Any:
        return self.round.matcher if self.round is not None else None

    @property
    def pending(self) -> list[int]:
        return self.tokens[self.n_cached :]

    @property
    def done(self) -> bool:
        return self.status is Status.FINISHED
