"""The experiment grid: paired baseline/speculative runs over agents × latency × drafter × λ."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import anyio

from spectool.errors import ConfigError

from ..bfcl._tasks import Task
from ..report._progress import Progress
from ._agents import Setup, assign, run_agents
from ._latency import Latency
from ._metrics import PRICES, run_row
from ._oracle import OracleDrafter
from ._replay import ReplayModel, TokenRates
from ._workloads import skipped

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


@dataclass
class Plan:
    categories: tuple[str, ...] = ("multi_turn_base",)
    tasks_per_agent: int = 1
    agents: tuple[int, ...] = (1, 4)
    latencies: tuple[float, ...] = (0.5, 1.5)
    latency_cv: float = 0.2
    samples: tuple[int | str, ...] = (1, 3)  # λ values; "auto" lets the speculator choose per request
    configs: tuple[str, ...] = ("client",)
    drafters: tuple[str, ...] = ("oracle", "history")
    repeats: int = 1
    seed: int = 0
    oracle_alphas: tuple[float, ...] = (0.8,)
    oracle_delay: float = 0.05
    main: str = "replay"  # replay | endpoint | embedded
    base_url: str | None = None
    model: str = "replay"
    task_ids: tuple[str, ...] | None = None  # pick these tasks (in this order) instead of the first ones
    max_turns: int | None = None  # user turns per task
    max_steps_per_turn: int = 20  # model messages per user turn
    max_tokens: int | None = None  # per model message (request option)
    tool_choice: str | None = None  # request option: auto / required
    threads: int | None = None  # torch threads of the embedded engine (None: torch's default)
    backend: str = "torch"  # embedded main model on: torch (in-process engine) | vllm (see _backend.py)
    dtype: str = "float32"  # embedded main model weights (fp32: O2 verification stays lossless)
    drafter_base_url: str | None = None
    drafter_model: str | None = None
    rates: TokenRates = field(default_factory=TokenRates)
    prices: dict[str, float] = field(default_factory=lambda: dict(PRICES))
    #: run an arm with eager dispatch alone (no drafter) and give every drafter arm eager dispatch
    #: too, so its saving over that arm is the drafter's own
    eager_arm: bool = False
    timeline: bool = True  # record one task alone, plain and sped up, for turn_timeline.png
    split: str | None = None  # keep only tasks of this split (train / dev / test)
    tasks_per_category: int | None = None  # first N tasks of each category (after the split)
    latency_matches_G: bool = False  # tool latency mean = the replay model's mean seconds per call step
    calibration_tokens: int = 1024  # embedded engine: prompt-length difference φ is timed over
    sample_cost: float = (
        0.05  # samples="auto": one draft sample's price (and the run it may waste), in seconds
    )
    title: str = ""
    section: str = "headline"  # where results.json keeps this plan's runs (headline | tau2 | embedded)


def quick_plan() -> Plan:
    """The main job's second part: the embedded SmolLM2 engine as main model, end to end.

    It shows the whole path on a real model — drafts, the client cache, the engine's tool cache
    (``mode="engine"``), lossless transcripts, the engine model's prediction — not a drafter's
    skill: a 135M main model rarely makes BFCL's calls, so no drafter predicts them. One agent,
    one short single-turn task of the test split, ≤ 2 model messages (``tool_choice="required"``:
    the 135M model rarely calls a tool on its own), ≤ 48 tokens each, greedy; history λ = 1;
    baseline vs client-side vs engine-side. One torch thread: the agent, tools and HTTP share the
    process, and on a busy 2-core box two OpenMP threads spin-wait; ``--threads 2`` on an idle one."""
    return Plan(
        main="embedded",
        model="smollm2",
        categories=("simple_python",),
        split="test",
        tasks_per_category=1,
        agents=(1,),
        threads=1,
        latencies=(1.0,),
        samples=(1,),
        drafters=("history",),
        configs=("client", "engine"),
        max_turns=1,
        max_steps_per_turn=2,
        max_tokens=48,
        calibration_tokens=384,
        tool_choice="required",
        title="Embedded engine end to end (SmolLM2-135M-Instruct as main model, CPU)",
        section="embedded",
    )


def headline_drafters() -> tuple[str, ...]:
    """history beside the tuned drafter where its adapter is shipped, else beside the untuned local."""
    return ("history", "tuned") if tuned_adapter() is not None else ("history", "local")


def headline_plan() -> Plan:
    """The main job's headline: real drafters on BFCL test-split tasks no tuning saw.

    The main model is the replay of BFCL's ground truth standing in for a strong remote model
    (it makes the right calls; its speed is stated: 0.4 s per request + prompt at 4000 tok/s +
    output at 30 tok/s, G ≈ 1.5–2 s per call step). Tool latency T = the mean G of a call step
    (T ≈ G, where the model says speculation pays most). One agent, so a local drafter's model is
    not shared between agents. Arms: the sequential baseline; eager dispatch alone; each drafter at
    λ = 1 and λ = "auto" with eager dispatch on (their "vs eager" column is the drafter's own)."""
    return Plan(
        main="replay",
        model="replay",
        categories=("simple_python", "multiple", "parallel", "live_simple"),
        split="test",
        tasks_per_category=2,
        agents=(1,),
        tasks_per_agent=8,
        latency_matches_G=True,
        latency_cv=0.1,
        samples=(1, "auto"),
        drafters=headline_drafters(),
        eager_arm=True,
        rates=TokenRates(prefill_tok_s=4000.0, decode_tok_s=30.0, overhead_s=0.4),
        title="Headline: real drafters, BFCL test split, replay main model (T ≈ G)",
    )


def tau2_plan() -> Plan:
    """The main job's τ² section: airline and retail test tasks (τ²'s own split), gold actions
    replayed one call per response on the domain's real database, READ tools speculable.

    The drafter is mined (the history drafter seeded with patterns mined from the train split's
    replays, e.g. user → their reservations) at λ = 1, beside eager dispatch alone: more tasks
    for fewer arms (history predicts almost nothing here: ``--drafters history,mined``). A τ² task
    makes 3–5 calls, so the replay's clock is a fast hosted model's (0.1 s per request, output at
    120 tok/s: G ≈ 0.3 s per call step, T ≈ G), stated in the output; the drafter's g (ms) is
    the same real time either way."""
    return replace(
        headline_plan(),
        categories=("tau2_airline", "tau2_retail"),
        tasks_per_category=6,
        tasks_per_agent=12,
        drafters=("mined",),
        samples=(1,),
        rates=TokenRates(prefill_tok_s=16000.0, decode_tok_s=120.0, overhead_s=0.1),
        timeline=False,
        title="τ²-bench: airline + retail test tasks (τ²'s split), real tools and database, replay model",
        section="tau2",
    )


def replay_plan() -> Plan:
    """The controlled experiment on the replay model (``--main replay``): M ∈ {1, 4}."""
    return Plan()


def full_plan() -> Plan:
    """The paper's grid on the embedded engine: M ∈ {1, 8, 32}, 32 tasks each, λ ∈ {1,3,5,7,9},
    both sweeps, 5 repeats, client- and engine-side (days on a 2-core CPU; meant for a GPU box
    or ``--main endpoint``)."""
    return Plan(
        main="embedded",
        model="smollm2",
        tasks_per_agent=32,
        agents=(1, 8, 32),
        latencies=(0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0),
        samples=(1, 3, 5, 7, 9),
        repeats=5,
        drafters=("history", "local"),
        configs=("client", "engine"),
        max_steps_per_turn=4,
        max_tokens=128,
        tool_choice="required",
    )


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
    from ._workloads import check_categories, load_category, split_tasks

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


def _drafters(plan: Plan, name: str, tasks: list, seed: int) -> list[tuple[Callable[[], Any], str]]:
    """(factory, label) per drafter variant; the oracle has one variant per α."""
    if name == "oracle":
        return [
            (_oracle(tasks, a, plan.oracle_delay, seed), OracleDrafter(tasks, a, plan.oracle_delay).label)
            for a in plan.oracle_alphas
        ]
    return [_drafter(plan, name)]


def _oracle(tasks: list, alpha: float, delay: float, seed: int) -> Callable[[], Any]:
    return lambda: OracleDrafter(tasks, alpha, delay, seed=seed)


_SHARED: dict[str, tuple[Callable[[], Any], str]] = {}


def _drafter(plan: Plan, name: str) -> tuple[Callable[[], Any], str]:
    from spectool import drafters

    if name == "history":
        return (lambda: drafters.HistoryDrafter()), "history"
    if name == "mined":  # the history drafter seeded with the train split's replays
        from ..drafters._eval import train_traces

        traces = [t for c in plan.categories for t in train_traces(c)]
        return (lambda: drafters.HistoryDrafter.from_traces(traces)), "mined(train split)"
    if name in _SHARED:  # one loaded model per process: warm-up and every arm share it
        return _SHARED[name]
    if name == "local":
        shared = drafters.LocalDrafter()  # one loaded model for all agents
        _SHARED[name] = (lambda: shared), "local(embedded SmolLM2)"
        return _SHARED[name]
    if name == "tuned":
        from spectool.drafters import shipped_adapter_path

        tuned = drafters.LocalDrafter(adapter=shipped_adapter_path())  # ConfigError if missing
        _SHARED[name] = (lambda: tuned), "tuned(SmolLM2 + LoRA)"
        return _SHARED[name]
    if name == "endpoint":
        if not plan.drafter_base_url or not plan.drafter_model:
            raise ConfigError("the endpoint drafter needs --drafter-base-url and --drafter-model")
        return (
            lambda: drafters.EndpointDrafter(model=plan.drafter_model, base_url=plan.drafter_base_url)
        ), f"endpoint({plan.drafter_model})"
    raise ConfigError(f"unknown drafter {name!r} (oracle, history, mined, local, tuned, endpoint)")


def tuned_adapter() -> Any:
    """The shipped LoRA adapter of the tuned drafter, or None where this checkout has none."""
    from spectool.drafters import shipped_adapter_path

    try:
        return shipped_adapter_path()
    except ConfigError:  # the adapter's folder is missing from this installation
        return None


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
    """Pay one-time costs (imports of the BFCL classes and the client core) before any timed run,
    so the first baseline of a sweep is not charged for them."""
    from spectool import speculative  # noqa: F401

    from ._workloads import open_world

    for t in tasks:
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
        + plan.eager_arm
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


async def _warm_drafters(plan: Plan, tasks: list) -> None:
    """One draft per drafter before any timed run (a local model loads and compiles its grammar
    here, not in the first timed draft), on a train-split task: nothing a timed run will ask."""
    from spectool import DraftRequest

    from ._workloads import split_tasks

    warm = (split_tasks(tasks[0].category, "train") or tasks)[0]
    request = DraftRequest(messages=[dict(m) for m in warm.turns[0]], tools=list(warm.tools), samples=1)
    for name in plan.drafters:
        if name == "oracle":
            continue
        for factory, _ in _drafters(plan, name, tasks, plan.seed):
            with anyio.move_on_after(120):
                try:
                    await factory().propose(request)
                except Exception:  # noqa: BLE001 - a failing drafter is measured as such later
                    pass


async def _run_plan(plan: Plan, progress: bool, base_url: str | None, calibration: Any) -> dict[str, Any]:
    tasks = _select_tasks(plan)
    replay = ReplayModel(tasks, plan.rates) if plan.main == "replay" else None
    make_client = _make_client(plan, replay, base_url)
    truth_client = (
        _make_client(plan, ReplayModel(tasks, CLOCK_FREE), base_url) if replay is not None else make_client
    )
    _warm_up(tasks[: max(plan.agents) * plan.tasks_per_agent])
    await _warm_main(make_client, plan, tasks[0])
    await _warm_drafters(plan, tasks)
    bar = Progress(_expected_steps(plan, tasks), progress)
    engine = "vLLM + spectool plugins" if plan.backend == "vllm" else "spectool serving engine"
    r = plan.rates
    main_label = {
        "replay": f"replay of {_truth_name(tasks)} standing in for a remote model (token-rate clock: "
        f"{r.overhead_s:g} s per request + prompt at {r.prefill_tok_s:g} tok/s + output at "
        f"{r.decode_tok_s:g} tok/s; G ≈ {expected_call_G(tasks, r):.2f} s per call step)",
        "embedded": f"embedded ({engine}, SmolLM2-135M-Instruct, CPU)",
    }.get(plan.main, f"endpoint({plan.model})")
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
    eager = "speculable" if plan.eager_arm else False
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
                latency = Latency(mean, plan.latency_cv, seed=seed)
                bar.label = f"baseline M={m} T={mean}s"
                base, base_cpu = await _timed_cpu(run_agents(assignment, Setup(latency=latency, **common)))
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
                rows.append(run_row(meta, base, base, plan.prices, calibration, truth=truth))
                ref = None
                if plan.eager_arm:
                    bar.label = f"eager dispatch alone M={m} T={mean}s"
                    ref = await run_agents(assignment, Setup(latency=latency, eager="speculable", **common))
                    rows.append(
                        run_row(
                            {**meta, "config": "eager", "drafter": "none (eager dispatch)"},
                            base,
                            ref,
                            plan.prices,
                            calibration,
                            reference=ref,
                            truth=truth,
                        )
                    )
                for name, (factory, label) in (
                    (n, v) for n in plan.drafters for v in _drafters(plan, n, tasks, seed)
                ):
                    # the oracle ignores λ: one run at the first λ
                    for lam in plan.samples if name != "oracle" else plan.samples[:1]:
                        for config in plan.configs:
                            bar.label = f"{config} {label} λ={lam} M={m} T={mean}s"
                            setup = Setup(
                                drafter=factory,
                                samples=lam,
                                latency=latency,
                                mode=config,
                                eager=eager,
                                sample_cost=plan.sample_cost,
                                engine_options={"base_url": base_url} if config == "engine" else {},
                                **common,
                            )
                            spec, cpu = await _timed_cpu(run_agents(assignment, setup))
                            rows.append(
                                run_row(
                                    {
                                        **meta,
                                        "config": config + ("+eager" if eager else ""),
                                        "samples": lam,
                                        "drafter": label,
                                        **_drafter_cpu(cpu, base_cpu, spec),
                                    },
                                    base,
                                    spec,
                                    plan.prices,
                                    calibration,
                                    reference=ref,
                                    truth=truth,
                                )
                            )
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


async def _record_timelines(
    plan: Plan, tasks: Sequence[Task], common: dict[str, Any], mean: float
) -> dict[str, Any] | None:
    """One task run alone twice — sequential baseline, then the first drafter arm — each under a
    TimelineRecorder, for the picture of one turn (``turn_timeline.png``)."""
    from ..report._timeline import TimelineRecorder

    arms = [v for n in plan.drafters for v in _drafters(plan, n, list(tasks), plan.seed)]
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
