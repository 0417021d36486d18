"""The lossless guarantee: the transcript with speculation equals the one without, byte for
byte; mutating tools never run early; a bad drafter changes nothing and delays nothing."""

import time

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import spectool
from spectool.testing import KeyValueWorld, ScriptedDrafter, ScriptedModel, call, openai_client, say

from .kv_scripts import kv_scripts

pytestmark = pytest.mark.anyio
KEYS = ["a", "b", "c"]

scripts = kv_scripts(KEYS, "xyz", 3, max_calls=3, max_turns=4)


class LookaheadDrafter(ScriptedDrafter):
    """Proposes every call of the whole script at once: reads of later turns start before the
    writes that come first, which is exactly what state epochs must catch."""

    def __init__(self, script, **kw):
        flat = [c for turn in script if isinstance(turn, list) for c in turn]
        super().__init__(lambda messages: flat, **kw)


async def _run(script, drafter, *, api="chat", stream=False, latency=0.0, **options):
    world = KeyValueWorld(latency=latency)
    model = ScriptedModel(script)
    async with spectool.speculative(openai_client(model), world.toolbox, drafter, **options) as c:
        result = await spectool.run_agent(c, model="m", messages="please", api=api, stream=stream)
    return result, world


async def _check_lossless(script, drafter, **kw):
    base, base_world = await _run(script, None, **kw)
    spec, spec_world = await _run(script, drafter, **kw)
    assert spec.transcript_json() == base.transcript_json()
    assert spec_world.data == base_world.data
    # Mutating tools ran exactly as often as without speculation, never early.
    for name in ("put", "delete"):
        assert spec_world.log.count(name) == base_world.log.count(name)
    assert spec.stats["mutating_runs"] == base.stats["mutating_runs"]
    return base, spec


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=scripts, hit_rate=st.sampled_from([0.0, 0.5, 1.0]), lookahead=st.booleans())
def test_transcripts_are_identical_with_and_without_speculation(script, hit_rate, lookahead):
    drafter = (
        LookaheadDrafter(script, hit_rate=hit_rate)
        if lookahead
        else ScriptedDrafter(ScriptedModel(script), hit_rate=hit_rate)
    )
    anyio.run(lambda: _check_lossless(script, drafter, latency=0.001))


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("stream", [False, True])
async def test_lossless_on_every_api_and_mode(api, stream) -> None:
    script = [
        [call("get", key="a"), call("keys")],
        [call("put", key="a", value="z"), call("get", key="a")],
        [call("delete", key="b"), call("keys"), call("add", a=1, b=2)],
        say("done"),
    ]
    base, spec = await _check_lossless(script, LookaheadDrafter(script), api=api, stream=stream, latency=0.01)
    assert spec.final_text == "done" and spec.turns == 4
    assert spec.stats["hits"] + spec.stats["joins"] >= 2  # speculation did happen
    assert spec.stats["stale_discards"] >= 1  # and stale reads were caught


@pytest.mark.parametrize("failure", ["raise", "hang", "garbage"])
async def test_a_bad_drafter_changes_nothing_and_delays_nothing(failure) -> None:
    script = [call("get", key="a"), [call("put", key="c", value="x"), call("get", key="c")], say("ok")]
    base, spec = await _check_lossless(
        script, ScriptedDrafter(ScriptedModel(script), failure=failure), draft_timeout=5.0
    )
    # A hanging drafter is bounded by its timeout (5 s) but the main path never waits for it:
    # each turn's draft is cancelled when its calls resolve, so no timeout ever fires (had the
    # main path waited, every turn would). Structural: a wall bound (< 2.5 s for both runs)
    # failed on a loaded machine.
    assert spec.stats["draft_timeouts"] == 0
    assert spec.stats["speculative_started"] == 0


async def test_speculation_hides_tool_latency_behind_generation() -> None:
    script = [call("get", key="a"), call("keys"), say("done")]
    world_latency = 0.15

    class Arrivals(spectool.RequestHook):
        def __init__(self) -> None:
            self.at: list[float] = []

        async def after_response(self, request, response):
            self.at.append(time.monotonic())  # the clock the fake tools log with
            return response

    async def timed(drafter):
        world, arrivals = KeyValueWorld(latency=world_latency), Arrivals()
        model = ScriptedModel(script, first_token_latency=0.15)
        async with spectool.speculative(openai_client(model), world.toolbox, drafter, hooks=[arrivals]) as c:
            result = await spectool.run_agent(c, model="m", messages="go")
        return result, [start for _, _, start, _ in world.log.runs], arrivals.at

    base, base_starts, base_arrivals = await timed(None)
    spec, starts, arrivals = await timed(ScriptedDrafter(ScriptedModel(script)))
    assert spec.transcript_json() == base.transcript_json()
    assert spec.stats["joins"] + spec.stats["hits"] == 2
    # Ordering, not seconds: with speculation each tool started while the model was still
    # generating the response that calls it; without, only after that response arrived.
    assert len(starts) == len(base_starts) == 2 and len(arrivals) == len(base_arrivals) == 3
    assert all(start < arrived for start, arrived in zip(starts, arrivals))
    assert all(start > arrived for start, arrived in zip(base_starts, base_arrivals))


async def test_max_turns_stops_the_loop() -> None:
    script = [call("keys")] * 5 + [say("never")]
    result, _ = await _run(script, None)
    assert result.stop_reason == "answer"
    model = ScriptedModel(script)
    async with spectool.speculative(openai_client(model), KeyValueWorld().toolbox) as c:
        capped = await spectool.run_agent(c, model="m", messages="go", max_turns=2)
    assert capped.stop_reason == "max_turns" and capped.turns == 2 and capped.final_text is None
    with pytest.raises(spectool.ConfigError):
        await spectool.run_agent(c, model="m", messages="go", max_turns=0)


async def test_concurrent_agents_keep_separate_sessions_and_stay_lossless() -> None:
    # Eight agents on one scripted server at once, each with its own world and session.
    script = [[call("get", key="b")], [call("put", key="a", value="v")], [call("get", key="a")], say("ok")]
    model = ScriptedModel(script, first_token_latency=0.02)

    async def agent(drafter):
        world = KeyValueWorld(latency=0.02)
        async with spectool.speculative(openai_client(model), world.toolbox, drafter) as c:
            r = await spectool.run_agent(c, model="m", messages="go")
        return r.transcript_json(), world.data, r.stats

    results = {}

    async def both(i):
        results[i] = (await agent(None), await agent(LookaheadDrafter(script)))

    async with anyio.create_task_group() as tg:
        for i in range(8):
            tg.start_soon(both, i)
    for base, spec in results.values():
        assert spec[0] == base[0] and spec[1] == base[1] == {"a": "v", "b": "2"}
        # get(a) and a re-drafted get(b), both started before put(a), were caught as stale
        assert spec[2]["stale_discards"] == 2
        assert spec[2]["hits"] + spec[2]["joins"] == 2


def test_overhead_command_runs_and_reports_both_figures() -> None:
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "spectool.cli",
            "overhead",
            "--turns",
            "20",
            "--latency",
            "0.05",
            "--agent-turns",
            "2",
            "--repeats",
            "1",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    over = result["overhead"]
    assert over["turns"] == 20 and over["hits_or_joins"] == 70  # 50 warm-up + 20 measured
    assert over["wrapped_p50_ms"] > 0 and "cpu_overhead_p99_ms" in over
    saved = result["time_saved"]
    assert [s["samples"] for s in saved] == [3, 1, 3] and saved[0]["alpha_measured"] == 1.0
    assert all(s["transcripts_identical"] for s in saved) and saved[0]["time_saved_pct"] > 10
