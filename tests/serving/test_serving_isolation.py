"""One request's failure stays that request's: the engine thread keeps serving the others.

The failure is injected by wrapping the real runner's ``prefill`` (a fault no real prompt can be
relied on to cause); everything else is the real engine on the real SmolLM2.
"""

from __future__ import annotations

import anyio
import pytest

from spectool_serving.requests import build_sequences
from spectool_serving.sequence import Error, Finish

pytestmark = pytest.mark.model

POISON = "please break the engine"


def _body(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}], "max_tokens": 6, "temperature": 0}


async def _collect(engine, text: str, n: int) -> list[dict]:
    seqs = build_sequences(_body(text), engine, f"chatcmpl-iso-{n}", "")
    return [event async for _, event in engine.stream(seqs)]


def _poison_prefill(engine, monkeypatch) -> None:
    real = engine.runner.prefill
    marker = engine.tokenizer(POISON, add_special_tokens=False)["input_ids"][:3]

    def prefill(tokens, **kw):
        if any(tokens[i : i + len(marker)] == marker for i in range(len(tokens))):
            raise RuntimeError("injected prefill failure")
        return real(tokens, **kw)

    monkeypatch.setattr(engine.runner, "prefill", prefill)


def test_a_failing_prefill_fails_only_its_own_request(engine, monkeypatch):
    _poison_prefill(engine, monkeypatch)
    engine.start()

    async def main():
        results: dict[str, list[dict]] = {}

        async def one(name: str, text: str, n: int) -> None:
            results[name] = await _collect(engine, text, n)

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, "good", "Say hello.", 1)
            tg.start_soon(one, "bad", POISON, 2)
        results["later"] = await _collect(engine, "Name a colour.", 3)  # after the failure
        return results

    results = anyio.run(main)
    assert isinstance(results["bad"][-1], Error) and "injected" in results["bad"][-1].message
    for name in ("good", "later"):
        finish = results[name][-1]
        assert isinstance(finish, Finish) and finish.usage["completion_tokens"] > 0, name
    assert engine.counters()["failed_requests"] == 1


def test_a_failing_batched_step_fails_the_batch_and_the_engine_serves_the_next(engine, monkeypatch):
    calls = {"n": 0}
    real = engine._run  # the step's batched forward

    def run(plan):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("injected decode failure")
        return real(plan)

    monkeypatch.setattr(engine, "_run", run)
    engine.start()

    async def main():
        first = await _collect(engine, "Say hello.", 4)
        second = await _collect(engine, "Say hello.", 5)
        return first, second

    first, second = anyio.run(main)
    assert isinstance(first[-1], Error)
    assert isinstance(second[-1], Finish) and second[-1].usage["completion_tokens"] > 0


def test_a_request_whose_event_loop_closed_does_not_kill_the_engine(engine):
    # found by `spectool soak`: a server restart closed the loop of requests still decoding,
    # their next event raised "Event loop is closed" in the engine thread and every later
    # request hung
    import threading

    engine.start()

    def in_own_loop():
        async def start_and_leave():
            seqs = build_sequences(
                {"messages": [{"role": "user", "content": "Count to fifty."}], "max_tokens": 40},
                engine,
                "chatcmpl-iso-orphan",
                "",
            )
            stream = engine.stream(seqs)
            await stream.__anext__()  # one event, then the loop goes away mid-request

        anyio.run(start_and_leave)

    t = threading.Thread(target=in_own_loop)
    t.start()
    t.join()

    async def later():
        return await _collect(engine, "Say hello.", 6)

    events = anyio.run(later)
    assert isinstance(events[-1], Finish) and events[-1].usage["completion_tokens"] > 0
    assert engine._thread is not None and engine._thread.is_alive()
