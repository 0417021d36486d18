"""The faults ``spectool soak`` injects, each deterministic so a run can be repeated.

* :class:`FaultyDrafter` wraps a real drafter; by a hash of the request it raises, hangs past
  the speculator's timeout, or returns garbage (unknown tools, non-JSON values, huge strings,
  wrong types) instead of proposing.
* :func:`faulty_tools` wraps a task's tools so a fixed share of call keys raise, and another
  share sleeps long (a slow tool the speculator's runs must not leak). Both depend on the call's
  key only, so the reference run (no speculation) meets the very same faults: an exception is
  part of the transcript (``"Error: …"``), never a difference.
* :func:`disconnecting_clients` opens streamed requests and drops them after the first chunk:
  one at the start of a pass, then one every few seconds.

Counters of every injected fault go into :class:`FaultCounts` so a report can show the faults
really happened.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import dataclass, field
from typing import Any

import anyio

from spectool import Drafter, DraftRequest, Toolbox, ToolCall
from spectool.errors import DrafterError

from ..bfcl._tasks import Task

__all__ = ["FaultCounts", "FaultyDrafter", "disconnecting_clients", "faulty_tools"]


@dataclass
class FaultCounts:
    """What was injected (and so what the run survived)."""

    drafter_raised: int = 0
    drafter_hung: int = 0
    drafter_garbage: int = 0
    tool_raised: int = 0
    tool_slow: int = 0
    disconnects: int = 0
    restarts: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, int]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "by_kind"}


def _bucket(text: str, salt: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{salt}\x00{text}".encode()).digest()[:4], "big") % 100


class FaultyDrafter:
    """A drafter that misbehaves on ``raise_pct`` / ``hang_pct`` / ``garbage_pct`` percent of
    requests (chosen by a hash of the request and a per-agent salt) and otherwise delegates."""

    def __init__(
        self,
        inner: Drafter,
        counts: FaultCounts,
        *,
        salt: str = "",
        raise_pct: int = 10,
        hang_pct: int = 5,
        garbage_pct: int = 10,
        hang_s: float = 30.0,
    ) -> None:
        self.inner, self.counts, self.salt, self.hang_s = inner, counts, salt, hang_s
        self.cuts = (raise_pct, raise_pct + hang_pct, raise_pct + hang_pct + garbage_pct)
        self.n = 0

    async def propose(self, request: DraftRequest) -> list[ToolCall]:
        self.n += 1
        b = _bucket(f"{self.n}:{len(request.messages)}", self.salt)
        if b < self.cuts[0]:
            self.counts.drafter_raised += 1
            raise DrafterError("injected drafter failure") if self.n % 2 else RuntimeError("injected bug")
        if b < self.cuts[1]:
            self.counts.drafter_hung += 1
            await anyio.sleep(self.hang_s)  # the speculator's draft timeout must cut this
        if b < self.cuts[2]:
            self.counts.drafter_garbage += 1
            return _garbage(request)
        return await self.inner.propose(request)


def _garbage(request: DraftRequest) -> list[Any]:
    names = [t.get("function", t).get("name", "") for t in request.tools]
    name = names[0] if names else "nothing"
    return [
        ToolCall("no_such_tool", {"x": 1}),
        ToolCall(name, {"arg": float("nan")}),
        ToolCall(name, {"arg": (1, 2), 3: "int key"}),  # type: ignore[dict-item]
        ToolCall(name, {"arg": "x" * 100_000}),
        ToolCall(name, {"arg": math.inf, "deep": [[[[[]]]]]}),
    ]


def faulty_tools(counts: FaultCounts, *, raise_pct: int = 8, slow_pct: int = 5, slow_s: float = 2.0) -> Any:
    """A ``Setup.tools_hook``: the task's tools, a share of whose call keys raise or run slow."""

    def hook(task: Task, box: Toolbox) -> Toolbox:
        out = Toolbox()
        for spec in box:
            out.add(dataclasses.replace(spec, fn=_wrap(spec, counts, raise_pct, slow_pct, slow_s)))
        return out

    return hook


def _wrap(spec: Any, counts: FaultCounts, raise_pct: int, slow_pct: int, slow_s: float) -> Any:
    inner = spec.fn

    async def run(**arguments: Any) -> Any:
        b = _bucket(spec.key(arguments), "tool")
        if b < raise_pct:
            counts.tool_raised += 1
            raise ValueError(f"injected failure of {spec.name}")
        if b < raise_pct + slow_pct:
            counts.tool_slow += 1
            await anyio.sleep(slow_s)
        return await inner(**arguments)

    return run


async def disconnecting_clients(
    make_client: Any,
    model: str,
    counts: FaultCounts,
    *,
    every_s: float,
    stop: anyio.Event,
    first_done: anyio.Event | None = None,
) -> None:
    """At once, then every ``every_s`` seconds, start a streamed request and drop it after its
    first chunk. ``first_done`` is set once the first try is over (however short the pass, it
    drops one stream; a restart that waits for it does not cut that one instead)."""
    while not stop.is_set():
        await _drop_one(make_client, model, counts)
        if first_done is not None:
            first_done.set()
        with anyio.move_on_after(every_s):
            await stop.wait()


async def _drop_one(make_client: Any, model: str, counts: FaultCounts) -> None:
    client = make_client()
    try:
        stream = await client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Write a long story about a lighthouse."}],
            max_tokens=64,
            stream=True,
        )
        async for _ in stream:
            break
        await stream.close()
        counts.disconnects += 1
    except Exception:  # the server may be restarting: a refused connection is no disconnect
        pass
    finally:
        await client.close()
