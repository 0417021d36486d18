"""What a soak pass lost or changed against the reference pass: transcripts, the scripted MCP
pre-step's outputs, and the world state (the MCP server's state after the pass)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..harness._agents import AgentResult
from ..harness._metrics import _same

__all__ = ["PassRun", "Verdict", "compare"]


@dataclass
class PassRun:
    """One pass's outcome: per agent its result, error and pre-step outputs; the world state."""

    results: list[AgentResult]
    errors: list[str]
    scripted: list[list[Any]] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)


@dataclass
class Verdict:
    lost: list[int]
    changed: list[int]
    world_changed: bool


def compare(reference: PassRun, run: PassRun, tasks_per_agent: Sequence[int]) -> Verdict:
    """Lost: an agent that failed or did not finish its tasks. Changed: a finished agent whose
    transcript (call ids aside) or pre-step outputs differ. The world state is compared whole:
    a write run early, twice or with other arguments shows in it even when no transcript does."""
    lost = [i for i, e in enumerate(run.errors) if e or len(run.results[i].transcript) != tasks_per_agent[i]]
    changed = [
        i
        for i in range(len(run.results))
        if i not in lost
        and (not _same(reference.results[i], run.results[i]) or _scripted(reference, i) != _scripted(run, i))
    ]
    return Verdict(lost, changed, reference.state != run.state)


def _scripted(run: PassRun, i: int) -> list[Any]:
    return run.scripted[i] if i < len(run.scripted) else []
