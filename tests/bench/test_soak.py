"""``spectool soak`` end to end, tiny: three agents on the real embedded engine (serving a tiny
random model of SmolLM2's architecture), a drafter that misbehaves, tools that fail, dropped
streams and a server restart per pass; nothing may be lost or changed.

Behaviour, not timing: the assertions are the report's loss, leak and 5xx fields and that each
fault kind was really injected (a soak that injected nothing would prove nothing).
"""

import json

import pytest

from spectool.cli import main


@pytest.mark.timeout(300)
def test_a_tiny_soak_loses_and_changes_nothing(tmp_path, capsys):
    out = tmp_path / "soak"
    # the tiny random model of SmolLM2's architecture: what is checked here (faults survived,
    # nothing lost or changed) does not depend on what the model says, and SmolLM2-135M made
    # this test take minutes; its calls take ~40-60 tokens, so 128 of them. One torch thread:
    # spin-waiting OpenMP threads on a shared 2-core CPU slow every request down. The restart
    # is ordered by events (after 4 responses and the pass's first dropped stream), so a fast
    # pass still meets it; a stream is dropped at the start of each pass and every 3 s
    argv = (
        "soak --model tiny --max-tokens 128 --agents 3 --tasks-per-agent 2 --restart-after-responses 4"
        " --disconnect-every 3 --settle 2 --threads 1"
    )
    # fault shares high enough that six tasks meet every kind (the defaults, 10,5,10 and 8,5,
    # suit long soaks), low enough that some speculative runs still succeed
    faulty = ["--drafter-faults", "15,15,15", "--tool-faults", "10,20"]
    rc = main([*argv.split(), *faulty, "--passes", "2", "--no-plot", "--out", str(out)])
    report = json.loads((out / "results.json").read_text())
    assert rc == 0, report
    assert report["lost_transcripts"] == 0 and report["changed_transcripts"] == 0
    assert report["server_errors_5xx"] == 0
    assert report["asyncio_tasks_left"] == 0 and report["threads_left"] == 0, report["threads_left_names"]
    faults = report["faults"]
    assert faults["restarts"] == 2 and faults["disconnects"] >= 2  # one restart per pass
    kinds = ("drafter_raised", "drafter_hung", "drafter_garbage", "tool_raised", "tool_slow")
    assert all(faults[k] >= 1 for k in kinds), faults
    assert report["engine_resolved_calls"] >= 1  # speculation's own path ran, not only its faults
    assert [(p["lost"], p["changed"]) for p in report["passes"]] == [(0, 0), (0, 0)]
    assert report["model_requests"] >= 6 and report["tasks"] == 6
    # RSS read once per pass, after its work: two passes give a series but no verdict (4 needed)
    ends = report["rss_end_of_pass_mb"]
    assert [p["rss_end_mb"] for p in report["passes"]] == ends and len(ends) == 2
    assert all(0 < end <= report["peak_rss_mb"] for end in ends)
    assert report["rss_leak"] is None and "at least 4" in report["rss_leak_note"]
    # eager dispatch on (the default) and the MCP server's tools among the agents' tools: every
    # agent's scripted write is in the reference world state, and no soak pass changed it
    assert report["eager"] == "speculable" and report["mcp"] is True
    assert (
        report["changed_world_states"] == 0 and [p["world_changed"] for p in report["passes"]] == [False] * 2
    )
    written = {k for k, _, _ in report["reference_world_state"]["writes"]}
    assert {"agent-0", "agent-1", "agent-2"} <= written
    printed = capsys.readouterr().out
    assert "transcripts lost / changed" in printed and "world states changed" in printed


def test_a_lost_agent_is_reported_by_the_errors_inside_its_task_group():
    from spectool_bench.soak._passes import describe

    group = ExceptionGroup("unhandled errors in a TaskGroup", [ValueError("bad args"), KeyError("x")])
    assert describe(group) == "ValueError: bad args; KeyError: 'x'"


def test_the_slope_is_least_squares_per_pass():
    from spectool_bench.soak._leak import slope

    assert slope([1000.0, 1050.0, 1100.0, 1150.0]) == pytest.approx(50.0)
    # a hand-computed fit: x̄ = 1.5, ȳ = 2233.1, Σ(x−x̄)(y−ȳ) = 644.7, Σ(x−x̄)² = 5
    assert slope([1970.1, 2214.4, 2414.8, 2333.1]) == pytest.approx(128.94, abs=0.01)
    assert slope([5.0]) == 0.0 and slope([]) == 0.0
    assert slope([2.0, 1.0, 0.0]) == pytest.approx(-1.0)


NOISE = [0.03, -0.03, 0.02, -0.02, 0.03, -0.03]  # ±3 % of the base, pass to pass


@pytest.mark.parametrize("passes", [4, 6])
def test_a_five_percent_leak_is_caught_through_noise_and_a_flat_series_passes(passes):
    from spectool_bench.soak._leak import judge

    base = 2000.0
    flat = [base * (1 + NOISE[k]) for k in range(passes)]
    leaking = [base * (1 + 0.05 * k + NOISE[k]) for k in range(passes)]
    assert judge(flat)["rss_leak"] is False
    verdict = judge(leaking)
    assert verdict["rss_leak"] is True and verdict["rss_slope_pct_per_pass"] > 3.0
    assert verdict["rss_end_of_pass_mb"] == [round(v, 1) for v in leaking]
    # the threshold is the knob: the same leak passes a limit above it
    assert judge(leaking, max_pct=10.0)["rss_leak"] is False
    # too few passes: a series, a slope, no verdict
    short = judge(leaking[:3])
    assert short["rss_leak"] is None and short["rss_slope_pct_per_pass"] > 0


_KEPT: list[bytes] = []


def test_the_pass_loop_sees_a_planted_leak_in_real_rss():
    """The real measurement (gc, malloc_trim, /proc RSS) after each pass of a fake workload
    (the embedded model is not needed to test the loop): a pass that keeps 5 % of the process's
    RSS is caught; the same work, freed, is not."""
    import anyio

    from spectool_bench.soak._leak import judge, rss_mb, run_passes

    start = rss_mb()
    if start <= 0:
        pytest.skip("no /proc/self/status here: RSS cannot be read")
    chunk = int(start * 0.05 * 1024 * 1024)

    async def leaky(k: int) -> int:
        _KEPT.append(b"\x01" * chunk)  # written, so resident
        await anyio.sleep(0)
        return k

    async def tidy(k: int) -> int:
        work = [b"\x01" * chunk for _ in range(3)]  # as much work, all of it let go
        await anyio.sleep(0)
        return len(work) + k

    try:
        done, ends = anyio.run(run_passes, 5, tidy)
        assert done == [3, 4, 5, 6, 7] and len(ends) == 5
        assert judge(ends)["rss_leak"] is False, ends
        done, ends = anyio.run(run_passes, 5, leaky)
        assert done == [0, 1, 2, 3, 4]
        verdict = judge(ends)
        assert verdict["rss_leak"] is True and verdict["rss_slope_pct_per_pass"] >= 3.0, ends
    finally:
        _KEPT.clear()


def test_the_soak_fails_on_a_leak_and_reports_the_series(monkeypatch, tmp_path, capsys):
    """``run`` with the passes faked (no model): a leak alone turns the exit status to 1."""
    import argparse

    from spectool_bench.soak import _cli

    def fake_report(leak: bool) -> dict:
        from spectool_bench.soak._leak import judge

        ends = [1000.0 * (1 + (0.05 if leak else 0.0) * k) for k in range(4)]
        report = {
            "agents": 2,
            "tasks": 4,
            "wall_s": 1.0,
            "main_model": "fake",
            "lost_transcripts": 0,
            "changed_transcripts": 0,
            "asyncio_tasks_left": 0,
            "peak_rss_mb": 1200.0,
            "server_errors_5xx": 0,
            "model_requests": 4,
            "request_retries": 0,
            "engine_resolved_calls": 0,
            "faults": {},
            "rss_series": [],
            "marks": [],
            "passes": [{"rss_end_mb": e} for e in ends],
            "reference_rss_end_mb": 990.0,
        }
        report.update(judge(ends))
        return report

    class FakeMain:  # stands in for EmbeddedMain: the model is not what this test is about
        def __init__(self, *a, **kw):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    import spectool_bench.backends._embedded_main as embedded

    monkeypatch.setattr(embedded, "EmbeddedMain", FakeMain)
    parser = argparse.ArgumentParser()
    _cli.add_arguments(parser)
    for leak, expected in ((False, 0), (True, 1)):
        monkeypatch.setattr(_cli.anyio, "run", lambda *a, leak=leak: fake_report(leak))
        args = parser.parse_args(["--no-plot", "--out", str(tmp_path / str(leak))])
        assert args.passes == 4 and _cli.run(args) == expected
        printed = capsys.readouterr().out
        assert "RSS at the end of each pass (collected)" in printed
        assert ("LEAK" in printed) is leak


async def _mcp_pass(tamper=None, *, eager: str = "off", agents: int = 2):
    """One pass of a fake workload (no model: the agents' transcripts are given) whose
    scripted MCP pre-step runs for real: a real MCP server in memory, spectool's session over a
    real OpenAI client that is never contacted (the pre-step sends no model request).
    ``tamper(world, agent)`` runs before an agent's pre-step: what a broken pass would do."""
    from openai import AsyncOpenAI

    from spectool_bench.harness._agents import AgentResult
    from spectool_bench.soak._compare import PassRun
    from spectool_bench.soak._mcp import mcp_world

    def make_client():
        return AsyncOpenAI(api_key="EMPTY", base_url="http://127.0.0.1:9/v1", max_retries=0)

    async with mcp_world() as world:
        scripted = []
        for i in range(agents):
            if tamper is not None:
                await tamper(world, i)
            scripted.append(await world.prestep(make_client, i, eager=eager))
        state = world.notes.state()
    results = [
        AgentResult(agent=i, transcript=[[{"role": "user", "content": f"task {i}"}]]) for i in range(agents)
    ]
    return PassRun(results, [""] * agents, scripted, state)


def _spec(world, name):
    return next(s for s in world.specs if s.name == name)


@pytest.mark.parametrize("eager", ["speculable", "all"])
def test_the_mcp_pre_step_reads_its_write_and_a_faithful_pass_changes_nothing(eager):
    import anyio

    from spectool_bench.soak._compare import compare

    ref = anyio.run(_mcp_pass)
    assert ref.scripted[0] == ["(no note)", "saved agent-0", "soak note of agent 0"]
    assert ref.state["writes"] == [
        ["agent-0", "soak note of agent 0", 1],
        ["agent-1", "soak note of agent 1", 1],
    ]
    verdict = compare(ref, anyio.run(lambda: _mcp_pass(eager=eager)), [1, 1])
    assert (verdict.lost, verdict.changed, verdict.world_changed) == ([], [], False)


def test_the_mcp_tools_carry_the_servers_effects():
    import anyio

    from spectool import Effect

    async def effects():
        from spectool_bench.soak._mcp import mcp_world

        async with mcp_world() as world:
            return {s.name: s.effect for s in world.specs}, [t["function"]["name"] for t in world.schemas]

    by_name, offered = anyio.run(effects)
    assert by_name == {"notes_read": Effect.READ_ONLY, "notes_write": Effect.MUTATING}
    assert offered == ["notes_read", "notes_write"]


def test_a_pass_that_runs_the_mcp_write_twice_or_early_changes_the_world_state():
    """Negative controls of the world-state comparison: each tampering flips it."""
    import anyio

    from spectool_bench.soak._compare import compare

    ref = anyio.run(_mcp_pass)

    async def twice(world, agent):  # the write ran once more than the transcript says
        if agent == 1:
            await _spec(world, "notes_write").fn(key="agent-1", text="soak note of agent 1")

    async def early_draft(world, agent):  # an early write with arguments the final call lacks
        if agent == 0:
            await _spec(world, "notes_write").fn(key="agent-0", text="drafted")

    async def early_final(world, agent):  # the final call's write, run before the read
        if agent == 0:
            await _spec(world, "notes_write").fn(key="agent-0", text="soak note of agent 0")

    verdict = compare(ref, anyio.run(lambda: _mcp_pass(twice)), [1, 1])
    assert verdict.world_changed and verdict.lost == []
    verdict = compare(ref, anyio.run(lambda: _mcp_pass(early_draft)), [1, 1])
    assert verdict.world_changed and verdict.changed == [0]  # its first read saw the draft
    # the same write early leaves the same writes behind, but twice; once it replaces the
    # final call, the transcript shows it: the pre-step's first read saw the note
    verdict = compare(ref, anyio.run(lambda: _mcp_pass(early_final)), [1, 1])
    assert verdict.world_changed and verdict.changed == [0]


def test_a_changed_transcript_or_a_lost_agent_is_counted_apart_from_the_world():
    import anyio

    from spectool_bench.soak._compare import compare

    ref = anyio.run(_mcp_pass)
    run = anyio.run(_mcp_pass)
    run.results[1].transcript[0][0]["content"] = "another answer"
    run.errors[0] = "ValueError: cut"
    verdict = compare(ref, run, [1, 1])
    assert (verdict.lost, verdict.changed, verdict.world_changed) == ([0], [1], False)


@pytest.mark.parametrize("eager", ["off", "all"])
def test_the_soak_wiring_offers_the_mcp_tools_and_runs_the_models_mcp_call(eager):
    """The soak's own pass wiring (``_with_world`` + ``_agents``, the real harness) against a
    scripted model standing in for the embedded one (no weights here): the model is offered
    the MCP tools, its streamed ``notes_write`` runs once per agent through spectool (eager
    ``all`` included), and the pre-step ran for every agent."""
    import anyio

    from spectool.testing import ScriptedModel, call, say
    from spectool.testing._socket import openai_client
    from spectool_bench.bfcl._splits import in_split
    from spectool_bench.bfcl._tasks import load_tasks
    from spectool_bench.harness._agents import Setup, assign
    from spectool_bench.soak import _passes
    from spectool_bench.soak._mcp import pass_world, with_world

    model = ScriptedModel([call("notes_write", key="m", text="from the model"), say("done")])
    tasks = in_split(load_tasks("simple_python"), "test")[:2]
    setup = Setup(
        make_client=lambda: openai_client(model),
        model="scripted",
        stream=True,
        max_turns=1,
        max_steps_per_turn=2,
        eager=eager,
        request_options={"stream": True},
    )

    async def one_pass():
        async with pass_world(True) as world:
            assignment, s, prestep = with_world(world, assign(tasks, 2, 1), setup, eager)
            results, errors, scripted = await _passes.agents(assignment, s, prestep)
            return results, errors, scripted, world.notes.state()

    results, errors, scripted, state = anyio.run(one_pass)
    assert errors == ["", ""]
    offered = {t["function"]["name"] for t in model.requests[0]["tools"]}
    assert {"notes_read", "notes_write"} <= offered
    assert [s[2] for s in scripted] == ["soak note of agent 0", "soak note of agent 1"]
    assert ["m", "from the model", 2] in state["writes"]  # one per agent, not more
    tool_msgs = [m for m in results[0].transcript[0] if m.get("role") == "tool"]
    assert [m["content"] for m in tool_msgs] == ["saved m"]


def test_fault_shares_are_checked_before_the_model_loads(tmp_path):
    import argparse

    from spectool.errors import ConfigError
    from spectool_bench.soak import _cli, _options

    parser = argparse.ArgumentParser()
    _cli.add_arguments(parser)
    args = parser.parse_args([])
    _options.fault_shares(args)  # parsed once, onto the args the passes read
    assert args.drafter_pct == {"raise_pct": 10, "hang_pct": 5, "garbage_pct": 10}
    assert args.tool_pct == {"raise_pct": 8, "slow_pct": 5}
    for bad in (["--drafter-faults", "10,5"], ["--tool-faults", "60,50"], ["--tool-faults", "x,1"]):
        with pytest.raises(ConfigError, match="percentages"):
            _cli.run(parser.parse_args([*bad, "--out", str(tmp_path)]))


def test_eager_defaults_to_speculable_and_mcp_to_on():
    import argparse

    from spectool_bench.soak import _cli

    parser = argparse.ArgumentParser()
    _cli.add_arguments(parser)
    args = parser.parse_args([])
    assert (args.eager, args.mcp) == ("speculable", True)
    args = parser.parse_args(["--eager", "all", "--no-mcp"])
    assert (args.eager, args.mcp) == ("all", False)
    with pytest.raises(SystemExit):
        parser.parse_args(["--eager", "sometimes"])


def _conversation(call_id: str, output: str) -> list[dict]:
    return [
        {"role": "user", "content": "area of a circle of radius 3"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "area", "arguments": '{"r": -3}'}}
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": output},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call_id + "b", "type": "function", "function": {"name": "log", "arguments": "{}"}}
            ],
        },
    ]


def test_the_replay_drafter_proposes_the_reference_calls_ids_aside():
    """The tiny soak's drafter: the call the reference pass made next in the same conversation
    (call ids differ from pass to pass), then the inner drafter's; a conversation that differs
    (another tool output) gets the inner drafter's proposals only."""
    import anyio

    from spectool import DraftRequest, ToolCall
    from spectool_bench.soak._tiny import ReplayDrafter

    class Inner:  # a drafter with one fixed proposal: what the replay falls back to
        async def propose(self, request):
            return [ToolCall("inner", {})]

    drafter = ReplayDrafter.from_transcripts([_conversation("call_ref", "28.3")], Inner())
    run = _conversation("call_other", "28.3")

    def propose(messages, samples=1):
        return anyio.run(drafter.propose, DraftRequest(messages, [], samples))

    assert propose(run[:1]) == [ToolCall("area", {"r": -3})]
    assert propose(run[:3], samples=2) == [ToolCall("log", {}), ToolCall("inner", {})]
    # negative controls: another tool output, another first message
    assert propose(_conversation("call_other", "0")[:3]) == [ToolCall("inner", {})]
    assert propose([{"role": "user", "content": "area of a circle of radius 4"}]) == [ToolCall("inner", {})]


def test_the_tiny_model_is_the_same_for_a_seed_and_another_for_another(tmp_path):
    """Greedy soak passes compare transcripts, so the tiny model must be reproducible."""
    from safetensors.torch import load_file

    from spectool_bench.soak._tiny import tiny_model_folder

    a, b, c = (tiny_model_folder(tmp_path / name, seed=s) for name, s in (("a", 0), ("b", 0), ("c", 1)))
    wa, wb, wc = (load_file(str(f / "model.safetensors")) for f in (a, b, c))
    assert wa.keys() == wb.keys() and all((wa[k] == wb[k]).all() for k in wa)
    assert any(not (wa[k] == wc[k]).all() for k in wa)  # negative control: another seed
    assert wa["model.embed_tokens.weight"].shape == (49152, 64) and (a / "tokenizer.json").exists()
