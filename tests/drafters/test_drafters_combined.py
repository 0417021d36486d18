"""CombinedDrafter: concurrent drafters, merged and deduplicated; failures stay contained."""

import anyio
import pytest

from spectool import ConfigError, DrafterError, DraftRequest, Toolbox, ToolCall, tool
from spectool.drafters import CombinedDrafter, HistoryDrafter

from .conftest import NUMBER, fn_tool

pytestmark = pytest.mark.anyio

TOOLS = [fn_tool("add", {"a": NUMBER, "b": {"type": "number", "default": 0}}, ["a"])]
REQ = DraftRequest([{"role": "user", "content": "add 2 and 3"}], TOOLS, samples=3)


class Fixed:
    def __init__(self, calls, delay=0.0):
        self.calls, self.delay, self.seen = calls, delay, 0

    async def propose(self, request):
        self.seen += 1
        await anyio.sleep(self.delay)
        return self.calls


class Raises:
    async def propose(self, request):
        raise RuntimeError("drafter bug")


class Garbage:
    async def propose(self, request):
        return ["not a call", None, ToolCall("add", {"a": 9})]


async def test_merges_in_order_and_dedupes_by_canonical_key():
    a = Fixed([ToolCall("add", {"a": 1, "b": 0}), ToolCall("add", {"a": 2})])
    b = Fixed(
        [
            ToolCall("add", {"a": 1.0, "b": 0.0}),
            ToolCall("add", {"b": 0, "a": 2.0}),
            ToolCall("add", {"a": 3}),
        ]
    )
    calls = await CombinedDrafter([a, b]).propose(REQ)
    # {"a": 1.0, "b": 0.0} equals {"a": 1, "b": 0} under the schema (number type); a default
    # left out is not an explicit value (the tool gets it unvalidated), so {"a": 2} stays apart.
    assert calls == [
        ToolCall("add", {"a": 1, "b": 0}),
        ToolCall("add", {"a": 2}),
        ToolCall("add", {"b": 0, "a": 2.0}),
        ToolCall("add", {"a": 3}),
    ]


class Meets:
    """Answers only once its partner has started: both answer only if they run side by side."""

    def __init__(self, call, mine, partner):
        self.call, self.mine, self.partner = call, mine, partner

    async def propose(self, request):
        self.mine.set()
        await self.partner.wait()
        return [self.call]


class Hangs:
    def __init__(self):
        self.started = self.finished = False

    async def propose(self, request):
        self.started = True
        await anyio.sleep(60)
        self.finished = True
        return [ToolCall("add", {"a": 6})]


async def test_runs_concurrently_and_a_hang_only_costs_its_own_timeout():
    # ordering, not seconds: each Meets waits for the other to start (run one after the other,
    # the first would wait until the overall timeout cut it, and its call would be missing)
    first, second = anyio.Event(), anyio.Event()
    hang = Hangs()
    combined = CombinedDrafter(
        [
            Meets(ToolCall("add", {"a": 5}), first, second),
            (hang, 0.2),
            Meets(ToolCall("add", {"a": 7}), second, first),
        ],
        timeout=5,
    )
    calls = await combined.propose(REQ)
    assert calls == [ToolCall("add", {"a": 5}), ToolCall("add", {"a": 7})]
    assert hang.started and not hang.finished  # cut at its own timeout, not waited for
    assert [s.timeouts for s in combined.stats] == [0, 1, 0]


async def test_failures_and_garbage_never_break_the_others():
    combined = CombinedDrafter([Raises(), Garbage(), Fixed(None), Fixed([ToolCall("add", {"a": 1})])])
    assert await combined.propose(REQ) == [ToolCall("add", {"a": 9}), ToolCall("add", {"a": 1})]
    assert [s.failures for s in combined.stats] == [1, 0, 1, 0]  # None is not iterable: a failure


async def test_all_failing_raises_drafter_error():
    with pytest.raises(DrafterError, match="all 2 drafters failed"):
        await CombinedDrafter([Raises(), Raises()]).propose(REQ)


async def test_toolbox_key_function_and_cap():
    @tool(effect="pure", key=lambda args: args["a"] % 10)
    def add(a: int, b: int = 0) -> int:
        return a + b

    box = Toolbox([add])
    drafter = CombinedDrafter(
        [
            Fixed(
                [
                    ToolCall("add", {"a": 1}),
                    ToolCall("add", {"a": 11}),
                    ToolCall("add", {"a": 2}),
                    ToolCall("add", {"a": 3}),
                ]
            )
        ],
        toolbox=box,
        max_calls=2,
    )
    assert await drafter.propose(REQ) == [ToolCall("add", {"a": 1}), ToolCall("add", {"a": 2})]


async def test_with_a_real_history_drafter():
    combined = CombinedDrafter([HistoryDrafter(), Fixed([ToolCall("add", {"a": 2, "b": 3})])])
    calls = await combined.propose(REQ)
    assert calls[0] == ToolCall("add", {"a": 2, "b": 3})  # history's best; the fixed one deduped
    assert calls.count(ToolCall("add", {"a": 2, "b": 3})) == 1 and len(calls) <= 3


def test_bad_configuration():
    with pytest.raises(ConfigError):
        CombinedDrafter([])
    with pytest.raises(ConfigError):
        CombinedDrafter([object()])
    with pytest.raises(ConfigError):
        CombinedDrafter([(HistoryDrafter(), 0)])
