"""The sweep's plans: what ``spectool bench`` runs (agents × latency × drafter × λ), and its presets."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from spectool.errors import ConfigError

from ._metrics import PRICES
from ._replay import TokenRates

__all__ = [
    "Plan",
    "full_plan",
    "headline_drafters",
    "headline_plan",
    "long_plans",
    "quick_plan",
    "replay_plan",
    "tau2_plan",
    "tuned_adapter",
]


@dataclass
class Plan:
    categories: tuple[str, ...] = ("multi_turn_base",)
    tasks_per_agent: int = 1  # 0: every selected task, in order (one pass)
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
    #: with ``eager_arm``: also run eager dispatch alone as its own arm (False: the drafter arms
    #: keep eager dispatch, the arm alone is left out — the main job's τ² section, for time)
    eager_alone: bool = True
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
        categories=HEADLINE_CATEGORIES,
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

    The drafter is the best mining one: the learning drafter primed with the train split's
    replays (plan context and value selection; it goes on learning from the tasks it drafts
    for) at λ = 1 with eager dispatch: more tasks for fewer arms (history predicts almost
    nothing here; ``--drafters history,mined,learning+train`` compares them). Eager dispatch
    alone is not an arm here (τ² answers one call per response: it saved +0.2 to +1.2 % in the
    main job; the long run measures it on every τ² test task), which saves a quarter of the
    section's runs. A τ² task
    makes 3–5 calls, so the replay's clock is a fast hosted model's (0.1 s per request, output at
    120 tok/s: G ≈ 0.3 s per call step, T ≈ G), stated in the output; the drafter's g (ms) is
    the same real time either way."""
    return replace(
        headline_plan(),
        categories=("tau2_airline", "tau2_retail"),
        tasks_per_category=6,
        tasks_per_agent=12,
        drafters=("learning+train",),
        eager_alone=False,
        samples=(1,),
        rates=TokenRates(prefill_tok_s=16000.0, decode_tok_s=120.0, overhead_s=0.1),
        timeline=False,
        title="τ²-bench: airline + retail test tasks (τ²'s split), real tools and database, replay model",
        section="tau2",
    )


#: the BFCL categories of the headline and of the long run (their content-clean test split)
HEADLINE_CATEGORIES = ("simple_python", "multiple", "parallel", "live_simple")


def long_drafters() -> tuple[str, ...]:
    """The long run's drafter arms: the training-free history drafter, the learning drafter primed
    on the train split (the best mining drafter), and the best model drafter — ``tuned`` where its
    adapter is shipped, else the untuned ``local``."""
    return ("history", "learning+train", headline_drafters()[1])


def long_plans() -> list[Plan]:
    """``--long``: the main job's two replay sections at a size that separates drafters.

    BFCL: the first 16 test-split tasks of each headline category (64 content-clean tasks);
    τ²: every airline and retail test task with a gold call (τ²'s split). Same clocks as the
    main job, one agent, T ≈ G, λ = 1, eager dispatch on; arms: baseline, eager dispatch alone,
    ``history``, the learning drafter primed on the train split and the best model drafter
    (:func:`long_drafters`). ≈ 40 min on 2 quiet cores; ``--tasks-per-category N`` makes it
    smaller, ``--drafters`` adds arms (``mined``, ``learning`` from nothing)."""
    bfcl = replace(
        headline_plan(),
        tasks_per_category=16,
        tasks_per_agent=0,
        samples=(1,),
        drafters=long_drafters(),
        timeline=False,
        title="Long run: BFCL test split (64 tasks), replay main model (T ≈ G)",
        section="long_bfcl",
    )
    tau2 = replace(
        tau2_plan(),
        tasks_per_category=None,
        tasks_per_agent=0,
        eager_alone=True,
        drafters=long_drafters(),
        title="Long run: τ²-bench, every airline + retail test task, real tools and database",
        section="long_tau2",
    )
    return [bfcl, tau2]


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


def tuned_adapter() -> Any:
    """The shipped LoRA adapter of the tuned drafter, or None where this checkout has none."""
    from spectool.drafters import shipped_adapter_path

    try:
        return shipped_adapter_path()
    except ConfigError:  # the adapter's folder is missing from this installation
        return None
