"""The experiment grid: paired baseline/speculative runs over agents × latency × drafter × λ.

What to run is a :class:`._plans.Plan`; the drafter arms come from :mod:`._arms`. The plans and
``tuned_adapter`` are re-exported here, where the command and tests have always found them.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import anyio

from spectool.errors import ConfigError

from ..bfcl._tasks import Task
from ..report._progress import Progress
from ..workloads._catalog import check_categories, load_category, open_world, skipped, split_tasks
from ..workloads._latency import Latency
from ._agents import Setup, assign, run_agents
from ._arms import drafter_arms, warm_drafters
from ._metrics import run_row
from ._plans import (
    Plan,
    full_plan,
    headline_drafters,
    headline_plan,
    quick_plan,
    replay_plan,
    tau2_plan,
    tuned_adapter,
)
from ._replay import ReplayModel, TokenRates

__all__ = [
    "Plan",
    "expected_call_G",
    "full_plan",
    "headline_drafters",
    "headline_plan",
    "quick_plan",
    "replay_plan",
    "run_plan",
    "tau2_plan",
    "tuned_adapter",
]


def _make_client(plan: Plan, replay: ReplayModel | None, base_url: str | None) -> Callable[[], Any]:
    from openai import AsyncOpenAI

    if plan.main == "replay":
        assert replay is not None
        return lambda: AsyncOpenAI(
            api_key="replay", base_url="http://replay.local/v1", http_client=replay.http_client()
        )
    if not base_url:
        raise ConfigError("--main endpoint needs --base-url")
    return lambda: AsyncOpenAI(api_key="EMPTY", base_url=base_url, timeout=600.0)


def _request_options(plan: Plan) -> dict[str, Any]:
    # Streamed for every main model: the engine config needs the response id first, and eager
    # dispatch acts on calls as their arguments close.
    opts: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}}
    if plan.main == "replay":
        return opts
    opts["temperature"] = 0.0
    if plan.max_tokens is not None:
        opts["max_tokens"] = plan.max_tokens
    if plan.tool_choice is not None:
        opts["tool_choice"] = plan.tool_choice
    return opts


def _select_tasks(plan: Plan) -> list:
    check_categories(plan.categories)
    if not plan.task_ids:
        tasks = []
        for c in plan.categories:
            picked = split_tasks(c, plan.split)
            tasks.extend(picked[: plan.tasks_per_category] if plan.tasks_per_category else picked)
        return tasks
    tasks = [t for c in plan.categories for t in load_category(c)]  # named tasks: no split, no cap
    by_id = {t.id: t for t in tasks}
    missing = [i for i in plan.task_ids if i not in by_id]
    if missing:
        raise ConfigError(f"unknown BFCL task id(s) {missing} in categories {list(plan.categories)}")
    return [by_id[i] for i in plan.task_ids]


def expected_call_G(tasks: list, rates: TokenRates) -> float:
    """The replay model's mean seconds per step that makes calls, over ``tasks`` (no tool outputs
    in the prompt: a lower bound within a few ms, since prefill is fast)."""
    model, times = ReplayModel(tasks, rates), []
    for t in tasks:
        messages = [dict(m) for m in t.turns[0]]
        step = model.step(messages)
        if step.message.get("tool_calls"):
            times.append(step.seconds)
    return sum(times) / len(times) if times else 0.0


def _warm_up(tasks: list) -> None:
    """Pay one-time costs (imports of the BFCL classes, a τ² domain's database, the client core)
    before any timed run, so the first baseline of a sweep is not charged for them. One world per
    kind: a τ² world costs ≈ 0.5 s of CPU to build and its domain loads once, so building one per
    task (as this once did) only added seconds to a τ² section."""
    from spectool import speculative  # noqa: F401

    kinds: dict[tuple[str, tuple[str, ...]], Any] = {}
    for t in tasks:
        kinds.setdefault((t.category, tuple(t.classes or ())), t)
    for t in kinds.values():
        open_world(t)


def run_plan(plan: Plan, progress: bool = True) -> dict[str, Any]:
    if "engine" in plan.configs and plan.main == "replay":
        raise ConfigError(
            "the engine-side config needs a serving engine as main model (--main embedded, or "
            "--main endpoint --base-url …); the replay model has no tool cache"
        )
    if plan.main not in ("replay", "endpoint", "embedded"):
        raise ConfigError(f"unknown main model {plan.main!r} (replay, endpoint, embedded)")
    if plan.main != "embedded":
        return anyio.run(_run_plan, plan, progress, plan.base_url, None)
    from ..backends._embedded_main import EmbeddedMain

    if progress:
        sys.stderr.write(
            f"starting the embedded main model on {plan.backend} (SmolLM2-135M-Instruct, CPU)…\n"
        )
    # max_rounds: never resolve past the step cap
    with EmbeddedMain(
        threads=plan.threads,
        backend=plan.backend,
        dtype=plan.dtype,
        max_rounds=max(0, plan.max_steps_per_turn - 1),
    ) as main:
        calibration = main.calibrate(prefill_tokens=plan.calibration_tokens)
        return anyio.run(_run_plan, plan, progress, main.base_url, calibration)


#: the replay model's clock for the reference run of ``same``: no time to wait
def _truth_name(tasks: Sequence[Task]) -> str:
    world = [getattr(t, "world", None) is not None for t in tasks]
    return "τ²'s gold actions" if world and all(world) else "BFCL ground truth"


CLOCK_FREE = TokenRates(prefill_tok_s=1e12, decode_tok_s=1e12)


async def _timed_cpu(run: Any) -> tuple[Any, float]:
    """The run's result and the CPU seconds this process spent meanwhile (all threads)."""
    c0 = time.process_time()
    out = await run
    return out, time.process_time() - c0


def _drafter_cpu(cpu: float, base_cpu: float, spec: Sequence[Any]) -> dict[str, float]:
    """The drafter's CPU: what the arm's process used beyond the baseline's (same agent code and
    tools), in seconds and in cores busy over the arm's wall time."""
    extra = max(0.0, cpu - base_cpu)
    wall = sum(s.wall_s for s in spec)
    return {"drafter_cpu_s": round(extra, 2), "drafter_cpu_cores": round(extra / wall, 3) if wall else 0.0}


def _expected_steps(plan: Plan, tasks: list) -> int:
    """Model requests the progress bar expects (an upper bound for a real model)."""
    from ._replay import _steps

    def per_task(t: Any) -> int:
        turns = len(t.turns[: plan.max_turns])
        return turns * plan.max_steps_per_turn if plan.main != "replay" else len(_steps(t))

    runs_per_cell = (
        1
        + (plan.eager_arm and plan.eager_alone)
        + sum(len(plan.samples) if d != "oracle" else len(plan.oracle_alphas) for d in plan.drafters)
        * len(plan.configs)
    )
    cells = 1 if plan.latency_matches_G else len(plan.latencies)
    return (
        plan.repeats
        * cells
        * runs_per_cell
        * sum(per_task(t) for m in plan.agents for a in assign(tasks, m, plan.tasks_per_agent) for t in a)
    )


async def _warm_main(make_client: Callable[[], Any], plan: Plan, task: Any) -> None:
    """One request before any timed run: the SDK's lazy first-use costs (≈ 1 s on a busy box)
    and the engine's grammar compilation would otherwise be charged to the first baseline."""
    opts = {**_request_options(plan), "max_tokens": 8} if plan.main != "replay" else {}
    reply = await make_client().chat.completions.create(
        model=plan.model, messages=[dict(m) for m in task.turns[0]], tools=list(task.tools), **opts
    )
    if opts.get("stream"):
        async for _ in reply:
            pass


def _main_label(plan: Plan, tasks: list) -> str:
    """What the main model is, as the results state it."""
    engine = "vLLM + spectool plugins" if plan.backend == "vllm" else "spectool serving engine"
    r = plan.rates
    return {
        "replay": f"replay of {_truth_name(tasks)} standing in for a remote model (token-rate clock: "
        f"{r.overhead_s:g} s per request + prompt at {r.prefill_tok_s:g} tok/s + output at "
        f"{r.decode_tok_s:g} tok/s; G ≈ {expected_call_G(tasks, r):.2f} s per call step)",
        "embedded": f"embedded ({engine}, SmolLM2-135M-Instruct, CPU)",
    }.get(plan.main, f"endpoint({plan.model})")


@dataclass
class _Cell:
    """One cell of the grid (a repeat, an agent count M, a tool latency T): what its arms share."""

    plan: Plan
    tasks: list
    assignment: list
    latency: Latency
    meta: dict[str, Any]  # the baseline row's labels; each arm overrides its own
    common: dict[str, Any]  # Setup's fields shared by every arm
    truth: Any  # the independent run without speculation that ``same`` compares with
    calibration: Any
    base_url: str | None
    bar: Progress


async def _run_plan(plan: Plan, progress: bool, base_url: str | None, calibration: Any) -> dict[str, Any]:
    tasks = _select_tasks(plan)
    if plan.tasks_per_agent == 0:  # every selected task once, shared out between the agents
        plan = replace(plan, tasks_per_agent=-(-len(tasks) // max(plan.agents)))
    if progress:
        sys.stderr.write(f"{plan.title or plan.section}: {len(tasks)} tasks\n")
    replay = ReplayModel(tasks, plan.rates) if plan.main == "replay" else None
    make_client = _make_client(plan, replay, base_url)
    truth_client = (
        _make_client(plan, ReplayModel(tasks, CLOCK_FREE), base_url) if replay is not None else make_client
    )
    _warm_up(tasks[: max(plan.agents) * plan.tasks_per_agent])
    await _warm_main(make_client, plan, tasks[0])
    if progress and plan.drafters:
        sys.stderr.write(
            f"warming the drafters ({', '.join(plan.drafters)}; mined ones read the train split)…\n"
        )
    await warm_drafters(plan, tasks)
    bar = Progress(_expected_steps(plan, tasks), progress)
    main_label = _main_label(plan, tasks)
    common: dict[str, Any] = {  # Setup's fields shared by every arm
        "make_client": make_client,
        "model": plan.model,
        "on_step": bar.step,
        "max_turns": plan.max_turns,
        "max_steps_per_turn": plan.max_steps_per_turn,
        "stream": True,
        "request_options": _request_options(plan),
    }
    latencies = (round(expected_call_G(tasks, plan.rates), 3),) if plan.latency_matches_G else plan.latencies
    rows: list[dict[str, Any]] = []
    for repeat in range(plan.repeats):
        seed = plan.seed + repeat
        for m in plan.agents:
            assignment = assign(tasks, m, plan.tasks_per_agent)
            # ``same`` compares every row, the baseline's too, with this independent run
            # without speculation (tools at no latency; on the replay a clock-free model: what
            # it says does not depend on its clock). Untimed, before the baseline, so it also
            # warms a main model's prefix cache (vLLM): the baseline and each config then meet
            # the same cache, not one the baseline filled for the others.
            bar.label = f"reference run (no speculation) M={m}"
            plain = {**common, "make_client": truth_client, "on_step": None}
            truth = await run_agents(assignment, Setup(latency=Latency(0.0), **plain))
            for mean in latencies:
                meta = {
                    "config": "baseline",
                    "agents": m,
                    "samples": 0,
                    "drafter": "none",
                    "tool_latency_mean": mean,
                    "main_model": main_label,
                    "seed": seed,
                    "repeat": repeat,
                }
                latency = Latency(mean, plan.latency_cv, seed=seed)
                cell = _Cell(
                    plan, tasks, assignment, latency, meta, common, truth, calibration, base_url, bar
                )
                rows += await _cell_rows(cell)
    bar.close()
    timelines = await _record_timelines(plan, tasks, common, latencies[0]) if plan.timeline else None
    out = {
        "plan": {k: (asdict(v) if k == "rates" else v) for k, v in vars(plan).items()},
        "main_model": main_label,
        "runs": rows,
        "title": plan.title,
        "tasks": [t.id for t in tasks[: max(plan.agents) * plan.tasks_per_agent]],
        # tasks left out for having no gold call (τ²'s policy refusals), per category
        "skipped_no_gold_calls": {c: len(skipped(c, plan.split)) for c in plan.categories},
    }
    if calibration is not None:
        out["engine_calibration"] = asdict(calibration)
    if timelines is not None:
        out["timelines"] = timelines
    return out


async def _cell_rows(cell: _Cell) -> list[dict[str, Any]]:
    """The cell's rows: the sequential baseline, eager dispatch alone (if planned), then every
    drafter × λ × config, each compared with the baseline (and with eager dispatch alone)."""
    plan, meta, where = cell.plan, cell.meta, f"M={cell.meta['agents']} T={cell.meta['tool_latency_mean']}s"
    cell.bar.label = f"baseline {where}"
    base, base_cpu = await _timed_cpu(run_agents(cell.assignment, Setup(latency=cell.latency, **cell.common)))
    rows = [run_row(meta, base, base, plan.prices, cell.calibration, truth=cell.truth)]
    ref = None
    if plan.eager_arm and plan.eager_alone:
        cell.bar.label = f"eager dispatch alone {where}"
        ref = await run_agents(
            cell.assignment, Setup(latency=cell.latency, eager="speculable", **cell.common)
        )
        eager_meta = {**meta, "config": "eager", "drafter": "none (eager dispatch)"}
        rows.append(
            run_row(eager_meta, base, ref, plan.prices, cell.calibration, reference=ref, truth=cell.truth)
        )
    eager = "speculable" if plan.eager_arm else False
    seed = meta["seed"]
    for name, (factory, label) in (
        (n, v) for n in plan.drafters for v in drafter_arms(plan, n, cell.tasks, seed)
    ):
        for lam in plan.samples if name != "oracle" else plan.samples[:1]:  # the oracle ignores λ
            for config in plan.configs:
                cell.bar.label = f"{config} {label} λ={lam} {where}"
                setup = Setup(
                    drafter=factory,
                    samples=lam,
                    latency=cell.latency,
                    mode=config,
                    eager=eager,
                    sample_cost=plan.sample_cost,
                    engine_options={"base_url": cell.base_url} if config == "engine" else {},
                    **cell.common,
                )
                spec, cpu = await _timed_cpu(run_agents(cell.assignment, setup))
                arm = {
                    **meta,
                    "config": config + ("+eager" if eager else ""),
                    "samples": lam,
                    "drafter": label,
                    **_drafter_cpu(cpu, base_cpu, spec),
                }
                rows.append(
                    run_row(arm, base, spec, plan.prices, cell.calibration, reference=ref, truth=cell.truth)
                )
    return rows


async def _record_timelines(
    plan: Plan, tasks: Sequence[Task], common: dict[str, Any], mean: float
) -> dict[str, Any] | None:
    """One task run alone twice — sequential baseline, then the first drafter arm — each under a
    TimelineRecorder, for the picture of one turn (``turn_timeline.png``)."""
    from ..report._timeline import TimelineRecorder

    arms = [v for n in plan.drafters for v in drafter_arms(plan, n, list(tasks), plan.seed)]
    if not arms:
        return None
    factory, label = arms[0]
    eager = "speculable" if plan.eager_arm else False
    recorded: dict[str, Any] = {"drafter": label, "task": tasks[0].id}
    setups: dict[str, dict[str, Any]] = {
        "plain": {},
        "fast": {"drafter": factory, "samples": plan.samples[0], "eager": eager},
    }
    for name, extra in setups.items():
        rec = TimelineRecorder()
        setup = Setup(
            latency=Latency(mean, plan.latency_cv, seed=plan.seed),
            hooks=[rec],
            **{**common, "on_step": None},
            **extra,
        )
        with rec.observing():
            await run_agents([[tasks[0]]], setup)
        recorded[name] = rec.timeline()
    return recorded
