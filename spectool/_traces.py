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

__all__ = ["TRACE_VERSION", "TraceExample", "TraceRecorder", "iter_traces", "load_traces"]

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
    """One trace line, checked field by field: a trace is a peer's file (another run, another
    tool), so anything off is a ConfigError naming the file and line, never a stray error."""
    if not isinstance(obj, Mapping):
        raise ConfigError(f"{where}: a trace line must be a JSON object")
    version = obj.get("v", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version > TRACE_VERSION:
        raise ConfigError(
            f"{where}: trace version {version!r} is newer than this spectool reads ({TRACE_VERSION})"
        )
    for key in ("messages", "tools", "calls"):
        if key not in obj:
            raise ConfigError(f"{where}: malformed trace line (no {key!r})")
    messages = _objects(obj["messages"], where, "messages")
    tools = _objects(obj["tools"], where, "tools")
    calls = []
    for i, c in enumerate(_objects(obj["calls"], where, "calls")):
        name, arguments = c.get("name"), c.get("arguments")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}: calls[{i}].name must be a non-empty string, got {name!r}")
        if arguments is not None and not isinstance(arguments, Mapping):
            raise ConfigError(
                f"{where}: calls[{i}].arguments must be a JSON object, got {type(arguments).__name__}"
            )
        calls.append(ToolCall(name, dict(arguments or {})))
    meta = obj.get("meta")
    if meta is not None and not isinstance(meta, Mapping):
        raise ConfigError(f"{where}: meta must be a JSON object, got {type(meta).__name__}")
    return TraceExample(DraftRequest(messages=messages, tools=tools), calls, dict(meta or {}))


def _objects(value: Any, where: str, key: str) -> list[Any]:
    """``value`` as a list of JSON objects (a string is not a list of messages)."""
    if not isinstance(value, list):
        raise ConfigError(f"{where}: {key} must be a JSON array, got {type(value).__name__}")
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise ConfigError(f"{where}: {key}[{i}] must be a JSON object, got {type(item).__name__}")
    return list(value)


def iter_traces(path: str | os.PathLike[str]) -> Iterator[TraceExample]:
    """The examples of a trace file one line at a time (memory: one line), ConfigError with
    the file and line on a malformed one."""
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
            except (json.JSONDecodeError, RecursionError) as exc:
                raise ConfigError(f"{path}:{n}: not JSON ({getattr(exc, 'msg', exc)})") from exc
            yield _example(obj, f"{path}:{n}")


def load_traces(path: str | os.PathLike[str]) -> list[TraceExample]:
    """All examples of a trace file (clear :class:`ConfigError` on a bad line)."""
    return list(iter_traces(path))
