"""Drafting traces: what a drafter saw and the calls the main model then made (JSONL, opt-in).

A trace file is the training data of ``spectool drafters tune``. Record one from a live agent
with ``Speculator(..., trace=TraceRecorder("traces.jsonl"))`` (the OpenAI wrapper passes its
options through), or build one from BFCL ground truth with ``spectool drafters traces``.

Schema, version 1 — one JSON object per line::

    {"v": 1,
     "messages": [...],          # the Chat Completions messages the drafter saw
     "tools": [...],             # the Chat Completions tool entries on offer
     "calls": [{"name": "...", "arguments": {...}}, ...],   # what the main model called next
     "meta": {...}}              # free-form provenance (task id, category, split, speculable…)

Readers accept any version up to :data:`TRACE_VERSION` and refuse newer ones with a clear
error. Standard library only.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._types import DraftRequest, ToolCall
from .errors import ConfigError

__all__ = ["TRACE_VERSION", "TraceExample", "TraceRecorder", "load_traces"]

TRACE_VERSION = 1


@dataclass(frozen=True)
class TraceExample:
    """One drafting moment: the request and the calls that followed it."""

    request: DraftRequest
    calls: Sequence[ToolCall]
    meta: Mapping[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "v": TRACE_VERSION,
            "messages": list(self.request.messages),
            "tools": list(self.request.tools),
            "calls": [{"name": c.name, "arguments": dict(c.arguments)} for c in self.calls],
            "meta": dict(self.meta),
        }


class TraceRecorder:
    """Appends trace lines to ``path`` (thread-safe; each line is flushed as written)."""

    def __init__(self, path: str | os.PathLike[str], *, mode: str = "a") -> None:
        if mode not in ("a", "w"):
            raise ConfigError("TraceRecorder mode must be 'a' (append) or 'w' (truncate)")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.written = 0
        if mode == "w":
            self.path.write_text("", encoding="utf-8")

    def write(self, example: TraceExample) -> None:
        line = json.dumps(example.as_json(), ensure_ascii=False, default=str)
        with self._lock, self.path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            self.written += 1

    def record(self, request: DraftRequest, calls: Iterable[ToolCall], **meta: Any) -> None:
        """Record one request and the calls the main model made after it (none: nothing)."""
        calls = list(calls)
        if calls:
            self.write(TraceExample(request, calls, meta))


def _example(obj: Any, where: str) -> TraceExample:
    if not isinstance(obj, Mapping):
        raise ConfigError(f"{where}: a trace line must be a JSON object")
    version = obj.get("v", 1)
    if not isinstance(version, int) or version > TRACE_VERSION:
        raise ConfigError(
            f"{where}: trace version {version!r} is newer than this spectool reads ({TRACE_VERSION})"
        )
    try:
        calls = [ToolCall(c["name"], dict(c.get("arguments") or {})) for c in obj["calls"]]
        request = DraftRequest(messages=list(obj["messages"]), tools=list(obj["tools"]))
    except (KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{where}: malformed trace line ({type(exc).__name__}: {exc})") from exc
    return TraceExample(request, calls, dict(obj.get("meta") or {}))


def iter_traces(path: str | os.PathLike[str]) -> Iterator[TraceExample]:
    try:
        fh = open(path, encoding="utf-8")  # noqa: SIM115 - closed below; a generator owns it
    except OSError as exc:
        raise ConfigError(f"cannot read traces {path}: {exc}") from exc
    with fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}:{n}: not JSON ({exc.msg})") from exc
            yield _example(obj, f"{path}:{n}")


def load_traces(path: str | os.PathLike[str]) -> list[TraceExample]:
    """All examples of a trace file (clear :class:`ConfigError` on a bad line)."""
    return list(iter_traces(path))
