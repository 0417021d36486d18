"""The futures-keyed tool cache: hits, joins, misses, validity, bounds, lifetime."""

import time

import anyio
import pytest

from spectool import ConfigError, ToolArgumentsError, ToolCache, ToolCall, ToolNotFoundError
from spectool.testing import ToolLog, fake_tool
from tests.core.helpers import until

pytestmark = pytest.mark.anyio


def _box(log, latency=0.0, **extra):
    return [
        fake_tool(
            "pure_add",
            effect="pure",
            latency=latency,
            log=log,
            result=lambda a: a.get("a", 0) + a.get("b", 0),
        ),
        fake_tool("read", effect="read_only", latency=latency, log=log, result="r", scope="s"),
        fake_tool("write", effect="mutating", latency=latency, log=log, result="w", scope="s"),
        fake_tool("other_read", effect="read_only", latency=latency, log=log, result="o", scope="t"),
        *extra.get("more", []),
    ]


async def test_proposal_starts_once_duplicates_join_and_a_hit_awaits_it() -> None:
    log = ToolLog()
    async with ToolCache(_box(log, latency=0.05)) as cache:
        assert cache.speculate(ToolCall("pure_add", {"a": 1, "b": 2}))
        assert cache.speculate(ToolCall("pure_add", {"b": 2, "a": 1}))  # same key
        await anyio.sleep(0.02)  # the main model "generates" while the tool runs
        asked = time.monotonic()  # the cache's clock, read just before the main path asks
        outcome = await cache.resolve(ToolCall("pure_add", {"a": 1, "b": 2}))
        assert outcome.value == 3 and outcome.speculative
        await anyio.sleep(0)
        again = await cache.resolve(ToolCall("pure_add", {"a": 1, "b": 2}))
    assert again.value == 3
    assert log.count("pure_add") == 1
    c = cache.counters
    assert (c.speculative_started, c.duplicate_proposals, c.joins, c.hits, c.misses) == (1, 1, 1, 1, 0)
    # The part that overlapped generation: from the tool's start to when the main path asked
    # (or the tool's end, if sooner). A wall bound such as "> 15 ms" failed on a loaded machine,
    # where the tool's task may start only just before the sleep above ends.
    assert outcome.started < asked
    assert min(asked, outcome.finished) - outcome.started <= c.time_saved <= outcome.duration


async def test_a_finished_entry_is_a_hit_and_an_unknown_call_is_a_miss() -> None:
    log = ToolLog()
    async with ToolCache(_box(log)) as cache:
        cache.speculate(ToolCall("read", {"x": 1}))
        await until(lambda: cache.unused_finished() == 1)  # finished: the main call is a hit
        hit = await cache.resolve(ToolCall("read", {"x": 1}))
        miss = await cache.resolve(ToolCall("read", {"x": 2}))
    assert (hit.speculative, miss.speculative) == (True, False)
    assert (cache.counters.hits, cache.counters.misses) == (1, 1)


async def test_mutating_tools_are_never_speculated() -> None:
    log = ToolLog()
    async with ToolCache(_box(log)) as cache:
        assert not cache.speculate(ToolCall("write", {}))
        assert not cache.speculate(ToolCall("nope", {}))
        assert not cache.speculate(ToolCall("read", "{broken"))  # type: ignore[arg-type]
        await anyio.sleep(0.01)
        assert log.runs == []
        await cache.resolve(ToolCall("write", {}))
    assert log.names() == ["write"]
    assert cache.counters.speculative_started == 0 and cache.counters.mutating_runs == 1


async def test_speculative_exception_surfaces_only_when_asked() -> None:
    log = ToolLog()
    boom = fake_tool("flaky", effect="read_only", raises=ValueError("down"), log=log)
    async with ToolCache(_box(log, more=[boom])) as cache:
        cache.speculate(ToolCall("flaky", {"q": 1}))
        # it fails in the background: nothing raised here
        await until(lambda: cache.counters.speculative_errors == 1)
        outcome = await cache.resolve(ToolCall("flaky", {"q": 1}))
    assert isinstance(outcome.error, ValueError) and str(outcome.error) == "down"
    with pytest.raises(ValueError, match="down"):
        outcome.unwrap()


async def test_read_only_is_stale_after_a_mutation_in_its_scope() -> None:
    log = ToolLog()
    async with ToolCache(_box(log)) as cache:
        cache.speculate(ToolCall("read", {}))
        cache.speculate(ToolCall("other_read", {}))
        await until(lambda: cache.unused_finished() == 2)
        await cache.resolve(ToolCall("write", {}))  # scope "s" changes
        stale = await cache.resolve(ToolCall("read", {}))
        fresh = await cache.resolve(ToolCall("other_read", {}))  # scope "t" untouched
    assert stale.speculative is False and fresh.speculative is True
    assert log.names() == ["read", "other_read", "write", "read"]
    assert cache.counters.stale_discards == 1 and cache.counters.wasted_runs == 1


async def test_a_read_started_during_a_mutation_is_stale() -> None:
    log = ToolLog()
    async with ToolCache(_box(log, latency=0.05)) as cache:
        async with anyio.create_task_group() as tg:
            tg.start_soon(cache.resolve, ToolCall("write", {}))
            await anyio.sleep(0.01)
            cache.speculate(ToolCall("read", {}))  # starts while the write runs
        outcome = await cache.resolve(ToolCall("read", {}))
    assert not outcome.speculative and cache.counters.stale_discards == 1


async def test_read_only_results_are_used_once_and_invalidate_works() -> None:
    log = ToolLog()
    async with ToolCache(_box(log)) as cache:
        cache.speculate(ToolCall("read", {}))
        await anyio.sleep(0.01)
        first = await cache.resolve(ToolCall("read", {}))
        second = await cache.resolve(ToolCall("read", {}))  # reads state again
        cache.speculate(ToolCall("read", {"n": 1}))
        await anyio.sleep(0.01)
        cache.invalidate("s")  # state changed outside spectool
        third = await cache.resolve(ToolCall("read", {"n": 1}))
    assert (first.speculative, second.speculative, third.speculative) == (True, False, False)


async def test_lookup_serves_drafted_calls_and_never_runs_a_tool() -> None:
    log = ToolLog()
    # Only read(x=1) takes time: pure_add returns without awaiting, so it is finished
    # (a hit) by the time the join on read returns, however loaded the machine is.
    slow_read = lambda arguments: 0.05 if arguments.get("x") == 1 else 0.0  # noqa: E731
    async with ToolCache(_box(log, latency=slow_read)) as cache:
        cache.speculate(ToolCall("read", {"x": 1}))
        cache.speculate(ToolCall("pure_add", {"a": 1}))
        joined = await cache.lookup(ToolCall("read", {"x": 1}))  # still running: a join
        assert await cache.lookup(ToolCall("read", {"x": 1})) is None  # read_only: used once
        hit = await cache.lookup(ToolCall("pure_add", {"a": 1}))  # finished: a hit
        assert await cache.lookup(ToolCall("read", {"x": 2})) is None  # never drafted
        assert await cache.lookup(ToolCall("read", "{broken")) is None  # type: ignore[arg-type]
        assert await cache.lookup(ToolCall("write", {})) is None  # mutating: caller's run
        assert await cache.lookup(ToolCall("nope", {})) is None  # unknown: caller's error
        cache.speculate(ToolCall("other_read", {}))
        await anyio.sleep(0.06)
        cache.invalidate("t")  # the caller ran a write of scope t itself
        assert await cache.lookup(ToolCall("other_read", {})) is None
    assert (joined.value, joined.speculative, hit.value) == ("r", True, 1)
    assert sorted(log.names()) == ["other_read", "pure_add", "read"]  # drafts only
    c = cache.counters
    assert (c.joins, c.hits, c.misses, c.stale_discards) == (1, 1, 4, 1)


async def test_pure_results_expire_after_their_ttl() -> None:
    now = [0.0]
    log = ToolLog()
    async with ToolCache(_box(log), ttl=10.0, clock=lambda: now[0]) as cache:
        await cache.resolve(ToolCall("pure_add", {"a": 1}))
        now[0] = 5.0
        await cache.resolve(ToolCall("pure_add", {"a": 1}))  # reused
        now[0] = 20.0
        await cache.resolve(ToolCall("pure_add", {"a": 1}))  # expired: runs again
    assert log.count("pure_add") == 2 and cache.counters.hits == 1


async def test_capacity_bounds_entries_and_evicts_finished_ones() -> None:
    log = ToolLog()
    async with ToolCache(_box(log), capacity=2) as cache:
        for i in range(5):
            cache.speculate(ToolCall("pure_add", {"a": i}))
            # each run finishes before the next proposal, so the full cache can evict it
            await until(lambda: all(e.outcome is not None for e in cache._entries.values()))
        assert len(cache._entries) <= 2
    assert cache.counters.wasted_runs == 5  # none was ever asked for


async def test_concurrency_limits_skip_instead_of_queueing() -> None:
    log = ToolLog()
    limited = fake_tool("slow", effect="pure", latency=0.2, log=log, max_concurrency=1)
    async with ToolCache(_box(log, more=[limited]), max_concurrency=3) as cache:
        assert cache.speculate(ToolCall("slow", {"i": 1}))
        assert not cache.speculate(ToolCall("slow", {"i": 2}))  # per-tool limit
        assert cache.speculate(ToolCall("read", {"i": 1}))
        assert cache.speculate(ToolCall("read", {"i": 2}))
        assert not cache.speculate(ToolCall("read", {"i": 3}))  # global limit
        assert cache.counters.skipped_proposals == 2
        outcome = await cache.resolve(ToolCall("slow", {"i": 2}))  # main path is not limited
    assert outcome.value is None and not outcome.speculative


@pytest.mark.parametrize("policy", ["cancel", "finish"])
async def test_closing_cancels_or_finishes_unused_runs_never_leaks(policy) -> None:
    log = ToolLog()
    async with ToolCache(_box(log, latency=0.5), on_close=policy) as cache:  # long: robust to load
        cache.speculate(ToolCall("read", {}))
        await anyio.sleep(0.01)
    finished = [r for r in log.runs if r[3] > r[2]]
    assert len(finished) == (1 if policy == "finish" else 0)
    assert cache.counters.wasted_runs == 1 and not cache.is_open
    with pytest.raises(ConfigError):
        _ = cache.task_group


async def test_on_complete_sees_finished_runs_and_its_failures_are_swallowed() -> None:
    seen = []

    async def sink(call, key, outcome):
        seen.append((call.name, key, outcome.value))
        raise RuntimeError("sink down")  # must not reach anyone

    log = ToolLog()
    async with ToolCache(_box(log), on_complete=sink) as cache:
        cache.speculate(ToolCall("pure_add", {"a": 2, "b": 2}))
        await anyio.sleep(0.01)
        assert (await cache.resolve(ToolCall("pure_add", {"a": 2, "b": 2}))).value == 4
    assert seen == [("pure_add", cache.toolbox.key("pure_add", {"a": 2, "b": 2}), 4)]


async def test_main_path_errors_are_outcomes_or_clear_exceptions() -> None:
    async with ToolCache(_box(ToolLog())) as cache:
        with pytest.raises(ToolNotFoundError):
            await cache.resolve(ToolCall("nope", {}))
        bad = await cache.resolve(ToolCall("read", "{oops"))  # type: ignore[arg-type]
    assert isinstance(bad.error, ToolArgumentsError)


async def test_cache_requires_async_with_and_valid_options() -> None:
    cache = ToolCache(_box(ToolLog()))
    assert not cache.speculate(ToolCall("read", {}))
    with pytest.raises(ConfigError):
        ToolCache([], capacity=0)
    with pytest.raises(ConfigError):
        ToolCache([], on_close="later")  # type: ignore[arg-type]
