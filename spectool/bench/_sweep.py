"""The experiment grid: paired baseline/speculative runs over agents × latency × drafter × λ."""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import anyio

from .._errors import ConfigError
from ._bfcl import load_tasks
from ._harness import Setup, assign, run_agents
from ._latency import Latency
from ._metrics import PRICES, run_row
from ._oracle import OracleDrafter
from ._replay import ReplayModel, TokenRates

__all__ = ["Plan", "full_plan", "quick_plan", "run_plan"]


@dataclass
class Plan:
    categories: tuple[str, ...] = ("multi_turn_base",)
    tasks_per_agent: int = 1
    agents: tuple[int, ...] = (1, 4)
    latencies: tuple[float, ...] = (0.5, 1.5)
    latency_cv: float = 0.2
    samples: tuple[int, ...] = (1, 3)
    configs: tuple[str, ...] = ("client",)
    drafters: tuple[str, ...] = ("oracle", "history")
    repeats: int = 1
    seed: int = 0
    oracle_alphas: tuple[float, ...] = (0.8,)
    oracle_delay: float = 0.05
    main: str = "replay"  # replay | endpoint
    base_url: str | None = None
    model: str = "replay"
    drafter_base_url: str | None = None
    drafter_model: str | None = None
    rates: TokenRates = field(default_factory=TokenRates)
    prices: dict[str, float] = field(default_factory=lambda: dict(PRICES))


def quick_plan() -> Plan:
    return Plan()


def full_plan() -> Plan:
    """The paper's grid: M ∈ {1, 8, 32}, 32 tasks each, λ ∈ {1,3,5,7,9}, both sweeps, 5 repeats."""
    return Plan(tasks_per_agent=32, agents=(1, 8, 32), latencies=(0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0),
                samples=(1, 3, 5, 7, 9), repeats=5, drafters=("oracle", "history", "local"))


def _make_client(plan: Plan, replay: ReplayModel | None) -> Callable[[], Any]:
    from openai import AsyncOpenAI

    if plan.main == "replay":
        assert replay is not None
        return lambda: AsyncOpenAI(api_key="replay", base_url="http://replay.local/v1", http_client=replay.http_client())
    if not plan.base_url:
        raise ConfigError("--main endpoint needs --base-url")
    return lambda: AsyncOpenAI(api_key="EMPTY", base_url=plan.base_url)


def _drafters(plan: Plan, name: str, tasks: list, seed: int) -> list[tuple[Callable[[], Any], str]]:
    """(factory, label) per drafter variant; the oracle has one variant per α."""
    if name == "oracle":
        return [(_oracle(tasks, a, plan.oracle_delay, seed), OracleDrafter(tasks, a, plan.oracle_delay).label)
                for a in plan.oracle_alphas]
    return [_drafter(plan, name)]


def _oracle(tasks: list, alpha: float, delay: float, seed: int) -> Callable[[], Any]:
    return lambda: OracleDrafter(tasks, alpha, delay, seed=seed)


def _drafter(plan: Plan, name: str) -> tuple[Callable[[], Any], str]:
    from .. import drafters

    if name == "history":
        return (lambda: drafters.HistoryDrafter()), "history"
    if name == "local":
        shared = drafters.LocalDrafter()  # one loaded model for all agents
        return (lambda: shared), "local(embedded SmolLM2)"
    if name == "endpoint":
        if not plan.drafter_base_url or not plan.drafter_model:
            raise ConfigError("the endpoint drafter needs --drafter-base-url and --drafter-model")
        return (lambda: drafters.EndpointDrafter(model=plan.drafter_model, base_url=plan.drafter_base_url)), \
            f"endpoint({plan.drafter_model})"
    raise ConfigError(f"unknown drafter {name!r} (oracle, history, local, endpoint)")


def _warm_up(tasks: list) -> None:
    """Pay one-time costs (imports of the BFCL classes and the client core) before any timed run,
    so the first baseline of a sweep is not charged for them."""
    from .._openai import speculative  # noqa: F401
    from ._executable import Environment

    for t in tasks:
        if t.multi_turn:
            Environment(t.classes, t.initial_config, t.long_context)


class Progress:
    """A one-line progress bar on stderr (model steps done / expected)."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total, self.done, self.enabled, self.t0 = max(1, total), 0, enabled, time.perf_counter()
        self.label = ""
        self._shown = -1

    def step(self) -> None:
        self.done += 1
        if not self.enabled:
            return
        frac = min(1.0, self.done / self.total)
        tty = sys.stderr.isatty()
        shown = int(frac * (100 if tty else 10))  # redraw per percent on a terminal, per 10% in logs
        if shown == self._shown:
            return
        self._shown = shown
        bar = "#" * int(30 * frac) + "." * (30 - int(30 * frac))
        text = f"[{bar}] {100 * frac:5.1f}% {time.perf_counter() - self.t0:6.1f}s {self.label:<48}"
        sys.stderr.write(f"\r{text}" if tty else f"{text}\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled and sys.stderr.isatty():
            sys.stderr.write("\n")


def run_plan(plan: Plan, progress: bool = True) -> dict[str, Any]:
    return anyio.run(_run_plan, plan, progress)


async def _run_plan(plan: Plan, progress: bool) -> dict[str, Any]:
    tasks = [t for c in plan.categories for t in load_tasks(c)]
    replay = ReplayModel(tasks, plan.rates) if plan.main == "replay" else None
    make_client = _make_client(plan, replay)
    _warm_up(tasks[: max(plan.agents) * plan.tasks_per_agent])
    runs_per_cell = 1 + sum(len(plan.samples) if d != "oracle" else len(plan.oracle_alphas)
                            for d in plan.drafters) * len(plan.configs)
    steps = plan.repeats * len(plan.latencies) * runs_per_cell * sum(
        t.calls + len(t.turns) for m in plan.agents for a in assign(tasks, m, plan.tasks_per_agent) for t in a)
    bar = Progress(steps, progress)
    rows: list[dict[str, Any]] = []
    main_label = "replay (BFCL ground truth, token-rate model)" if replay else f"endpoint({plan.model})"
    for repeat in range(plan.repeats):
        seed = plan.seed + repeat
        for m in plan.agents:
            assignment = assign(tasks, m, plan.tasks_per_agent)
            for mean in plan.latencies:
                latency = Latency(mean, plan.latency_cv, seed=seed)
                base_setup = Setup(make_client=make_client, model=plan.model, latency=latency, on_step=bar.step)
                bar.label = f"baseline M={m} T={mean}s"
                base = await run_agents(assignment, base_setup)
                meta = {"config": "baseline", "agents": m, "samples": 0, "drafter": "none",
                        "tool_latency_mean": mean, "main_model": main_label, "seed": seed, "repeat": repeat}
                rows.append(run_row(meta, base, base, plan.prices))
                for name, (factory, label) in ((n, v) for n in plan.drafters for v in _drafters(plan, n, tasks, seed)):
                    # the oracle ignores λ: one run at the first λ
                    for lam in (plan.samples if name != "oracle" else plan.samples[:1]):
                        for config in plan.configs:
                            bar.label = f"{config} {label} λ={lam} M={m} T={mean}s"
                            setup = Setup(make_client=make_client, model=plan.model, drafter=factory,
                                          samples=lam, latency=latency, mode=config, on_step=bar.step)
                            spec = await run_agents(assignment, setup)
                            rows.append(run_row({**meta, "config": config, "samples": lam, "drafter": label}, base, spec, plan.prices))
    bar.close()
    return {"plan": {k: (asdict(v) if k == "rates" else v) for k, v in vars(plan).items()},
            "main_model": main_label, "runs": rows}
