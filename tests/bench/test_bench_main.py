"""The main job's pieces on the replay model: the stub outputs, streamed parallel steps, the eager
arm and its attribution, λ = auto beside fixed λ, and the headline plot (CLI included).

The main model is the replay of BFCL ground truth (labelled as such); drafters are real
(history) or the oracle where a test needs a known α.
"""

import time

import anyio
import pytest
from openai import AsyncOpenAI

from spectool import ToolCall
from spectool_bench.bfcl._splits import split_of_id
from spectool_bench.bfcl._tasks import load_tasks
from spectool_bench.harness._agents import Setup, assign, run_agents
from spectool_bench.harness._metrics import run_row
from spectool_bench.harness._oracle import OracleDrafter
from spectool_bench.harness._replay import ReplayModel, TokenRates, next_step
from spectool_bench.harness._sweep import headline_plan
from spectool_bench.workloads._latency import Latency
from spectool_bench.workloads._toolbox import ToolStats, build_toolbox, precomputed_output, task_output
from tests.bench.helpers import REPLAY_CLOCK, run_bench


def test_equal_canonical_calls_get_equal_stub_outputs():
    schema = {
        "type": "object",
        "properties": {"x": {"type": "number"}, "unit": {"type": "string", "default": "m"}},
    }
    a = precomputed_output("t1", ToolCall("f", {"x": 2}), schema)
    assert a == precomputed_output("t1", ToolCall("f", {"x": 2.0, "unit": "m"}), schema)  # default, int/float
    assert a != precomputed_output("t1", ToolCall("f", {"x": 3}), schema)
    assert a != precomputed_output("t2", ToolCall("f", {"x": 2}), schema)  # fixed per task


def test_drafter_prompts_show_the_outputs_the_bench_tools_return():
    # traces and drafter-eval prompts render tool results with task_output: it must be the
    # very string the bench's stub tool returns, schema-keyed (2 and 2.0 give one output)
    task = next(t for t in load_tasks("multiple", limit=20) if t.ground_truth[0])
    call = task.ground_truth[0][0]
    box = build_toolbox(task, Latency(0.0), ToolStats())

    async def run_tool():
        return await box.get(call.name).fn(**dict(call.arguments))

    assert anyio.run(run_tool) == task_output(task, call)


def test_single_turn_steps_are_parallel_calls_streamed_at_the_decode_rate():
    task = next(t for t in load_tasks("parallel", limit=20) if len(t.ground_truth[0]) >= 2)
    model = ReplayModel([task], TokenRates(prefill_tok_s=20000.0, decode_tok_s=40.0, overhead_s=0.05))
    step = next_step(task, list(task.turns[0]))
    assert isinstance(step, list) and step == list(task.ground_truth[0])
    expected = model.step(list(task.turns[0]))

    async def stream():
        client = AsyncOpenAI(api_key="x", base_url="http://replay.local/v1", http_client=model.http_client())
        t0, arrivals = time.perf_counter(), []
        reply = await client.chat.completions.create(
            model="replay", messages=list(task.turns[0]), stream=True
        )
        async for chunk in reply:
            for c in chunk.choices:
                for tc in c.delta.tool_calls or ():
                    arrivals.append((tc.index, time.perf_counter() - t0))
        return arrivals

    arrivals = anyio.run(stream)
    assert {i for i, _ in arrivals} == set(range(len(step)))
    first_done = max(t for i, t in arrivals if i == 0)
    # The first call's arguments are complete well before the response ends; the whole response
    # takes the token-rate time.
    assert first_done < arrivals[-1][1] - 0.05
    assert expected.seconds - 0.05 <= arrivals[-1][1] < 1.5 * expected.seconds + 0.5  # sleeps only overshoot


def test_eager_arm_is_lossless_and_the_drafter_is_credited_over_it():
    tasks = [t for t in load_tasks("parallel", limit=12) if len(t.ground_truth[0]) >= 2][:3]
    replay = ReplayModel(tasks, TokenRates(prefill_tok_s=20000.0, decode_tok_s=40.0, overhead_s=0.05))
    common = {
        "make_client": lambda: AsyncOpenAI(
            api_key="x", base_url="http://replay.local/v1", http_client=replay.http_client()
        ),
        "latency": Latency(0.3, cv=0.05),
        "stream": True,
        "request_options": {"stream": True, "stream_options": {"include_usage": True}},
    }
    assignment = assign(tasks, agents=1, per_agent=3)

    async def arms():
        base = await run_agents(assignment, Setup(**common))
        eager = await run_agents(assignment, Setup(eager="speculable", **common))
        spec = await run_agents(
            assignment, Setup(eager="speculable", drafter=lambda: OracleDrafter(tasks, 1.0, 0.01), **common)
        )
        return base, eager, spec

    base, eager, spec = anyio.run(arms)
    e = run_row(
        {"config": "eager", "agents": 1, "samples": 0, "drafter": "none"}, base, eager, reference=eager
    )
    d = run_row(
        {"config": "client+eager", "agents": 1, "samples": 1, "drafter": "oracle"},
        base,
        spec,
        reference=eager,
    )
    assert e["same_transcripts"] and d["same_transcripts"]
    assert e["hit_rate"] == 0.0 and e["predicted_speedup"] is None  # the paper's model has no eager term
    # Eager dispatch starts the first calls while the last is decoded; the response still waits for
    # its last call, so with similar latencies it gains little (its timing is tested in test_eager).
    assert e["time_saved_pct"] > -3 and e["wasted_tool_runs"] == 0
    assert d["hit_rate"] == 1.0 and d["speedup_over"] == "eager"
    # eager's share is not the drafter's: the drafter's column is measured over the eager run,
    # (1 - saved) = (1 - saved by eager) * (1 - saved over eager), whatever eager saved this time
    s_d, s_e, s_de = (
        x / 100 for x in (d["time_saved_pct"], e["time_saved_pct"], d["time_saved_vs_eager_pct"])
    )
    assert 1 - s_d == pytest.approx((1 - s_e) * (1 - s_de), rel=0.02)
    assert d["measured_over_predicted"] == pytest.approx(1.0, abs=0.1)
    curve = d["model_curve"]
    assert (
        curve[0][0] == 0.0
        and curve[-1][0] == 1.0
        and curve[0][1] == pytest.approx(e["time_saved_pct"], abs=1e-6)
    )


def test_headline_plan_reports_test_split_tasks():
    plan = headline_plan()
    assert plan.split == "test" and plan.eager_arm and "auto" in plan.samples and plan.latency_matches_G
    assert "history" in plan.drafters and plan.main == "replay"


def test_cli_replay_with_eager_arm_and_auto_writes_the_headline_plot(tmp_path, capsys):
    out = tmp_path / "bench"
    printed, results = run_bench(
        out,
        capsys,
        "--main replay --categories simple_python,parallel --split test --tasks-per-category 2",
        "--tasks-per-agent 4 --agents 1 --drafters history --samples 1,auto",
        REPLAY_CLOCK,
    )
    assert "vs eager %" in printed and "replay of BFCL ground truth" in printed
    runs = results["runs"]
    assert [(r["config"], r["samples"]) for r in runs] == [
        ("baseline", 0),
        ("eager", 0),
        ("client+eager", 1),
        ("client+eager", "auto"),
    ]
    assert all(r["same_transcripts"] for r in runs)
    # λ per model request: the fixed arm drafts λ = 1 at every step, auto reports what it chose
    assert runs[0]["samples_chosen"] == {} and runs[2]["samples_chosen"] == {"1": runs[2]["steps"]}
    auto = runs[3]["samples_chosen"]
    assert sum(auto.values()) == runs[3]["steps"] and set(auto) <= {str(k) for k in range(10)}
    assert "λ chosen" in printed
    # the time budget is checked per section: each says how long it took
    walls = results["section_wall_s"]
    assert list(walls) == ["headline"] and 0 < walls["headline"] <= results["wall_s"]
    assert f"(headline {walls['headline']:.0f} s)" in printed
    assert all(split_of_id(t) == "test" for t in results["tasks"])
    assert runs[0]["tool_latency_mean"] == pytest.approx(runs[0]["G_mean_s"], rel=0.35)  # T ≈ G
    assert (out / "time_saved_vs_alpha.png").read_bytes()[:4] == b"\x89PNG"


def test_quick_runs_the_headline_then_tau2_then_the_embedded_engine():
    import argparse

    from spectool_bench.harness._cli import add_arguments, build_plans

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    headline, tau2, embedded = build_plans(parser.parse_args(["--quick"]))
    assert headline.main == "replay" and headline.split == "test" and headline.eager_arm
    assert tau2.section == "tau2" and tau2.categories == ("tau2_airline", "tau2_retail")
    assert tau2.main == "replay" and tau2.split == "test" and tau2.eager_arm
    reduced = build_plans(parser.parse_args(["--quick", "--tasks-per-category", "1"]))[1]
    assert reduced.tasks_per_category == 1 and reduced.section == "tau2"
    only_tau2 = build_plans(parser.parse_args(["--workload", "tau2", "--domains", "retail"]))
    assert len(only_tau2) == 1 and only_tau2[0].categories == ("tau2_retail",)
    assert embedded.main == "embedded" and embedded.split == "test" and "engine" in embedded.configs
    only = build_plans(parser.parse_args(["--quick", "--main", "replay", "--samples", "1,3,auto"]))
    assert len(only) == 1 and only[0].samples == (1, 3, "auto")


def test_the_tuned_arm_appears_when_the_adapter_is_shipped(tmp_path, monkeypatch):
    from spectool.drafters.local import _adapter
    from spectool_bench.harness import _arms, _sweep

    assert _sweep.headline_drafters()[0] == "history"
    (tmp_path / "adapter_config.json").write_text("{}")
    monkeypatch.setattr(_adapter, "shipped_adapter_path", lambda: tmp_path)
    monkeypatch.setattr(_arms, "_SHARED", {})
    assert _sweep.headline_drafters() == ("history", "tuned")
    factory, label = _arms._drafter(headline_plan(), "tuned")
    assert label.startswith("tuned") and factory() is factory()  # one loaded model for every agent
