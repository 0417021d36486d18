"""Fake tools with latency, a small stateful world, and a scripted drafter.

The fakes implement the real interfaces (``ToolSpec``, the ``Drafter`` protocol): they stand
in for real tools and small models that cannot run in a unit test.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio

from .._tools import Effect, Toolbox, ToolSpec, tool
from .._types import DraftRequest, ToolCall

__all__ = ["KeyValueWorld", "ScriptedDrafter", "ToolLog", "fake_tool"]


@dataclass
class ToolLog:
    """Every run of the fake tools: (name, arguments, start, end) in start order."""

    runs: list[tuple[str, dict[str, Any], float, float]] = field(default_factory=list)

    def names(self) -> list[str]:
        return [r[0] for r in self.runs]

    def count(self, name: str) -> int:
        return sum(1 for r in self.runs if r[0] == name)


def fake_tool(
    name: str,
    *,
    effect: Effect | str = "read_only",
    latency: float | Callable[[dict[str, Any]], float] = 0.0,
    result: Any = None,
    raises: BaseException | None = None,
    scope: str = "default",
    parameters: Mapping[str, Any] | None = None,
    log: ToolLog | None = None,
    **options: Any,
) -> ToolSpec:
    """A tool that sleeps ``latency`` seconds then returns ``result`` (a value, or a function
    of the arguments), or raises ``raises``. Any arguments are accepted unless ``parameters``."""

    async def run(**arguments: Any) -> Any:
        start = time.monotonic()
        entry = (name, dict(arguments), start, start)
        if log is not None:
            log.runs.append(entry)
        delay = latency(arguments) if callable(latency) else latency
        if delay:
            await anyio.sleep(delay)
        if log is not None:
            log.runs[log.runs.index(entry)] = (name, dict(arguments), start, time.monotonic())
        if raises is not None:
            raise raises
        return result(arguments) if callable(result) else result

    schema = parameters or {"type": "object", "properties": {}, "additionalProperties": True}
    return ToolSpec(
        name=name,
        description=f"fake {name}",
        parameters=schema,
        effect=Effect(effect),
        scope=scope,
        fn=run,
        **options,
    )


class KeyValueWorld:
    """A deterministic stateful world: read_only ``get``/``keys``, mutating ``put``/``delete``,
    pure ``add``. Every tool sleeps ``latency`` seconds."""

    def __init__(self, latency: float = 0.0, initial: Mapping[str, str] | None = None) -> None:
        self.data: dict[str, str] = dict(initial or {"a": "1", "b": "2"})
        self.latency = latency
        self.log = ToolLog()
        self.toolbox = Toolbox([self._get(), self._keys(), self._put(), self._delete(), self._add()])

    async def _nap(self, name: str, args: dict[str, Any]) -> None:
        start = time.monotonic()
        if self.latency:
            await anyio.sleep(self.latency)
        self.log.runs.append((name, args, start, time.monotonic()))

    def _get(self) -> Any:
        @tool(effect="read_only", scope="kv")
        async def get(key: str) -> str:
            """Read one key (empty string if absent)."""
            await self._nap("get", {"key": key})
            return self.data.get(key, "")

        return get

    def _keys(self) -> Any:
        @tool(effect="read_only", scope="kv")
        async def keys() -> list[str]:
            """All keys, sorted."""
            await self._nap("keys", {})
            return sorted(self.data)

        return keys

    def _put(self) -> Any:
        @tool(scope="kv")
        async def put(key: str, value: str) -> str:
            """Set a key."""
            # Write after the pause, like a slow store: a read racing it would see old state.
            await self._nap("put", {"key": key, "value": value})
            self.data[key] = value
            return "ok"

        return put

    def _delete(self) -> Any:
        @tool(scope="kv")
        async def delete(key: str) -> str:
            """Remove a key."""
            await self._nap("delete", {"key": key})
            return "ok" if self.data.pop(key, None) is not None else "absent"

        return delete

    def _add(self) -> Any:
        @tool(effect="pure")
        async def add(a: float, b: float) -> float:
            """a + b."""
            await self._nap("add", {"a": a, "b": b})
            return a + b

        return add


Failure = Literal["raise", "hang", "garbage"] | None


class ScriptedDrafter:
    """A drafter that knows the answer (an ``oracle(messages) -> calls``) and is right with
    probability ``hit_rate`` per sample; ``delay`` seconds per propose; ``failure`` makes it
    raise, hang forever, or return garbage. Deterministic for a given ``seed``."""

    def __init__(
        self,
        oracle: Callable[[list[Mapping[str, Any]]], Sequence[ToolCall]] | Any,
        *,
        hit_rate: float = 1.0,
        delay: float = 0.0,
        failure: Failure = None,
        seed: int = 0,
    ) -> None:
        self.oracle = getattr(oracle, "next_calls", oracle)
        self.hit_rate, self.delay, self.failure = hit_rate, delay, failure
        self._rng = random.Random(seed)
        self.requests: list[DraftRequest] = []

    async def propose(self, request: DraftRequest) -> list[ToolCall]:
        self.requests.append(request)
        if self.delay:
            await anyio.sleep(self.delay)
        if self.failure == "raise":
            raise RuntimeError("scripted drafter failure")
        if self.failure == "hang":
            await anyio.sleep_forever()
        if self.failure == "garbage":
            garbage: list[Any] = [  # not ToolCalls on purpose: what a broken drafter returns
                None,
                42,
                {"name": 7},
                {"name": "get", "arguments": "{not json"},
                ToolCall("no_such_tool", {}),
                {"function": "x"},
                "call get()",
            ]
            return garbage
        truth = list(self.oracle(list(request.messages)))
        out: list[ToolCall] = []
        for _ in range(request.samples):
            for c in truth:
                out.append(c if self._rng.random() < self.hit_rate else _perturb(c))
        return out


def _perturb(c: ToolCall) -> ToolCall:
    """A near miss: same tool, one argument changed (or an extra one if it has none)."""
    args = dict(c.arguments)
    for k, v in args.items():
        if isinstance(v, str):
            args[k] = v + "_x"
            break
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            args[k] = v + 1
            break
    else:
        return ToolCall(c.name + "_miss", args)
    return ToolCall(c.name, args)
