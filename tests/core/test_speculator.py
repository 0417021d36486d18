"""One session's speculation: drafting is bounded and harmless; calls resolve in order."""

import anyio
import pytest

from spectool import ConfigError, Speculator, SyncSpeculator, ToolCall, ToolNotFoundError
from spectool.testing import KeyValueWorld, ScriptedDrafter, ToolLog, call, fake_tool
from tests.core.helpers import until

pytestmark = pytest.mark.anyio
MESSAGES = [{"role": "user", "content": "go"}]


def _oracle(calls):
    return lambda messages: calls


async def test_admits_speculable_proposals_only() -> None:
    world = KeyValueWorld()
    proposals = [
        call("get", key="a"),
        call("put", key="a", value="9"),
        call("add", a=1, b=2),
        call("get", path="a"),
    ]  # the last one: arguments get() would refuse
    async with Speculator(world.toolbox, ScriptedDrafter(_oracle(proposals)), samples=2) as spec:
        turn = spec.start_turn(MESSAGES)
        await turn.wait()
        await anyio.sleep(0.01)
        assert world.data["a"] == "1"  # the mutating proposal never ran
        assert sorted(c.name for c in turn.admitted) == ["add", "add", "get", "get"]
    d = spec.draft_counters
    assert (d.drafts, d.proposals, d.admitted, d.rejected) == (1, 8, 4, 4)
    assert spec.counters.speculative_started == 2 and spec.counters.duplicate_proposals == 2
    assert world.log.names().count("put") == 0


@pytest.mark.parametrize("failure", ["raise", "garbage"])
async def test_failing_drafters_are_counted_and_ignored(failure) -> None:
    world = KeyValueWorld()
    async with Speculator(world.toolbox, ScriptedDrafter(_oracle([]), failure=failure)) as spec:
        turn = spec.start_turn(MESSAGES)
        await turn.wait()
        outcome = await spec.resolve(call("get", key="a"))
    assert outcome.value == "1"
    d = spec.draft_counters
    if failure == "raise":
        assert d.draft_errors == 1
    else:
        assert d.proposals == 7 and d.rejected == 7 and d.admitted == 0
    assert spec.counters.speculative_started == 0


async def test_a_hanging_drafter_is_cut_at_its_timeout_and_never_blocks_resolving() -> None:
    world = KeyValueWorld()
    async with Speculator(
        world.toolbox, ScriptedDrafter(_oracle([]), failure="hang"), draft_timeout=2.0
    ) as spec:
        turn = spec.start_turn(MESSAGES)
        assert (await spec.resolve(call("get", key="b"))).value == "2"
        # Did not wait for the drafter's timeout: the drafter is still hanging when resolve
        # returns (structural; a wall bound such as "< 0.5 s" failed on a loaded machine)...
        assert not turn.finished.is_set() and spec.draft_counters.draft_timeouts == 0
        with anyio.fail_after(30):
            await turn.wait()  # ...until its timeout cuts it
    assert spec.draft_counters.draft_timeouts == 1


async def test_resolving_cancels_the_turns_late_drafts() -> None:
    world = KeyValueWorld()
    # The draft would take 30 s: resolving must cancel it (a 0.2 s delay could run out first on
    # a loaded machine, and the draft was then admitted before resolve_all returned).
    slow = ScriptedDrafter(_oracle([call("get", key="a")]), delay=30)
    async with Speculator(world.toolbox, slow) as spec:
        turn = spec.start_turn(MESSAGES)
        await spec.resolve_all([call("get", key="a")])
        with anyio.fail_after(10):
            await turn.wait()
    assert turn.admitted == [] and world.log.count("get") == 1


async def test_unknown_tools_become_error_outcomes() -> None:
    async with Speculator(KeyValueWorld().toolbox) as spec:
        outcomes = await spec.resolve_all([ToolCall("nope", {}), call("add", a=1, b=1)])
    assert isinstance(outcomes[0].error, ToolNotFoundError) and outcomes[1].value == 2


async def test_parallel_calls_resolve_concurrently() -> None:
    # Each tool waits for the other to start: only a concurrent resolve can finish.
    started = {"x": anyio.Event(), "y": anyio.Event()}

    def waiter(me, other):
        async def run(**_):
            started[me].set()
            await started[other].wait()
            return me

        return run

    tools = [fake_tool("x", effect="read_only", scope="a"), fake_tool("y", effect="read_only", scope="b")]
    tools = [
        t.__class__(**{**t.__dict__, "fn": waiter(t.name, "y" if t.name == "x" else "x")}) for t in tools
    ]
    async with Speculator(tools) as spec:
        with anyio.fail_after(30):  # a deadlock detector, not a speed bound
            outcomes = await spec.resolve_all([ToolCall("x", {}), ToolCall("y", {})])
    assert [o.value for o in outcomes] == ["x", "y"]


async def test_reads_and_writes_of_one_scope_keep_their_order() -> None:
    world = KeyValueWorld(latency=0.02)
    batch = [
        call("get", key="a"),
        call("put", key="a", value="new"),
        call("get", key="a"),
        call("add", a=1, b=1),
    ]
    async with Speculator(world.toolbox, ScriptedDrafter(_oracle(batch))) as spec:
        await spec.start_turn(MESSAGES).wait()
        await until(lambda: spec.cache.unused_finished() == 2)  # early get and add finished
        outcomes = await spec.resolve_all(batch)
    assert [o.value for o in outcomes] == ["1", "ok", "new", 2]
    # The first read used the speculative result (consumed); the read after the write ran anew.
    assert outcomes[0].speculative and not outcomes[2].speculative and outcomes[3].speculative
    assert spec.counters.hits == 2 and spec.counters.misses == 1 and spec.counters.mutating_runs == 1
    names = world.log.names()
    assert names.index("put") < len(names) - 1 and names[-1] == "get"


async def test_bad_options_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        Speculator([], samples=0)
    with pytest.raises(ConfigError):
        Speculator([], draft_timeout=0)


def test_sync_facade_is_thread_safe_and_shares_the_core() -> None:
    import threading

    log = ToolLog()
    tools = [fake_tool(f"t{i}", effect="read_only", latency=0.1, log=log, result=i) for i in range(4)]
    drafter = ScriptedDrafter(_oracle([ToolCall(f"t{i}", {}) for i in range(4)]))
    results = {}
    with SyncSpeculator(tools, drafter) as spec:
        spec.wait_turn(spec.start_turn(MESSAGES))

        def work(i):
            results[i] = spec.run(ToolCall(f"t{i}", {}))

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stats = spec.stats()
    assert results == {0: 0, 1: 1, 2: 2, 3: 3}
    assert len(log.runs) == 4 and stats["hits"] + stats["joins"] == 4
    with pytest.raises(ConfigError):
        spec.run(ToolCall("t0", {}))  # closed


def test_sync_facade_looks_up_drafted_calls_without_running_others() -> None:
    # An integration runs misses its own way: lookup() only ever serves what drafts started,
    # invalidate() makes early reads of a scope stale, cancel_turn() stops late drafts.
    log = ToolLog()
    tools = [fake_tool(n, effect="read_only", latency=0.05, log=log, result=n) for n in "ab"]
    slow = ScriptedDrafter(_oracle([ToolCall("b", {})]), failure="hang")
    with SyncSpeculator(tools, ScriptedDrafter(_oracle([ToolCall("a", {}), ToolCall("b", {})]))) as spec:
        spec.wait_turn(spec.start_turn(MESSAGES))
        assert spec.lookup(ToolCall("a", {})).value == "a"
        assert spec.lookup(ToolCall("a", {"other": 1})) is None
        spec.invalidate("default")
        assert spec.lookup(ToolCall("b", {})) is None  # its early read is stale now
        spec.speculator.drafter = slow
        turn = spec.start_turn(MESSAGES)
        spec.cancel_turn(turn)
        spec.wait_turn(turn)
        stats = spec.stats()
    assert sorted(log.names()) == ["a", "b"]
    assert (stats["hits"] + stats["joins"], stats["misses"], stats["stale_discards"]) == (1, 2, 1)
    assert stats["draft_timeouts"] == 0 and stats["drafts"] == 2
