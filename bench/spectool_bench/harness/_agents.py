"""M concurrent agents over BFCL tasks, through the same client code with and without speculation.

Every agent runs its tasks through :func:`spectool.speculative` — with no drafter for the
baseline, with the drafter for ``client`` (Algorithm 2) and, when an engine is attached, with
``mode="engine"`` (Algorithm 4). The code path is the same, so a paired run differs only in
speculation. Per model step the agent records G (model time) and T (time waiting for tools).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from spectool import Drafter, DraftRequest, Toolbox, ToolCall
from spectool.errors import ConfigError

from ..bfcl._tasks import Task
from ..workloads._catalog import open_world, world_state
from ..workloads._latency import Latency
from ..workloads._toolbox import ToolStats, build_toolbox

__all__ = ["AgentResult", "Setup", "TimedDrafter", "run_agents"]

CONFIGS = ("baseline", "client", "engine")


class TimedDrafter:
    """Wraps a drafter to measure g (seconds per propose) and the tokens it reports."""

    def __init__(self, inner: Drafter) -> None:
        self.inner = inner
        self.durations: list[float] = []
        self.tokens = 0

    async def propose(self, request: DraftRequest) -> list[ToolCall]:
        t0 = time.perf_counter()
        try:
            return await self.inner.propose(request)
        finally:
            self.durations.append(time.perf_counter() - t0)
            usage = getattr(self.inner, "last_usage_tokens", None)
            if isinstance(usage, int):
                self.tokens += usage


@dataclass
class Setup:
    """What one run needs: how to reach the main model and what drafts."""

    make_client: Callable[[], Any]  # -> AsyncOpenAI-compatible client
    model: str = "replay"
    drafter: Callable[[], Drafter] | None = None  # fresh drafter per agent
    samples: int | str = 1  # λ, or "auto" (chosen per request by the speculator)
    eager: str | bool = False  # eager dispatch of streamed calls (False: the sequential baseline)
    sample_cost: float = 0.0  # samples="auto": one draft sample's cost in seconds
    latency: Latency = field(default_factory=lambda: Latency(0.0))
    mode: str = "client"
    engine_options: dict[str, Any] = field(default_factory=dict)
    max_steps_per_turn: int = 20  # model messages (engine-resolved calls included) per user turn
    max_turns: int | None = None  # user turns per task (None: all)
    stream: bool = False  # the engine config needs streaming (the response id comes first)
    request_options: dict[str, Any] = field(default_factory=dict)  # temperature, max_tokens, tool_choice …
    on_step: Callable[[], None] | None = None  # progress callback
    hooks: list[Any] = field(default_factory=list)  # request hooks (e.g. a TimelineRecorder)
    # model requests cut by a transport failure (a server restart) are re-sent, as an agent
    # would: the same messages, so the same answer; 0 lets the failure end the run
    request_retries: int = 0
    tools_hook: Callable[[Task, Toolbox], Toolbox] | None = None  # e.g. fault injection (soak)
    #: builds the session's tool cache from the toolbox (default: spectool's own); the negative
    #: controls of ``same`` plant a deliberately broken one here
    cache: Callable[[Toolbox], Any] | None = None


@dataclass
class AgentResult:
    agent: int
    wall_s: float = 0.0
    completion_tokens: int = 0
    steps: int = 0
    G: list[float] = field(default_factory=list)  # model time per step
    T: list[float] = field(default_factory=list)  # tool wait per step (0 when no call)
    calls: int = 0
    hits: int = 0  # main-path calls served by a speculative run (finished or in flight)
    tool_runs: int = 0
    tool_seconds: float = 0.0
    draft_seconds: list[float] = field(default_factory=list)
    drafter_tokens: int = 0
    transcript: list[list[dict[str, Any]]] = field(default_factory=list)
    #: per task: digest of the world's state after the task (None: stub tools change nothing)
    world_states: list[str | None] = field(default_factory=list)
    task_walls: list[float] = field(default_factory=list)  # seconds per task, in order
    task_ids: list[str] = field(default_factory=list)  # the task of each entry of task_walls
    engine_resolved: int = 0  # calls the engine resolved in place (O3)
    drafts: int = 0  # drafter requests made
    undrafted: int = 0  # model requests samples="auto" did not draft for
    retries: int = 0  # model requests re-sent after a transport failure
    #: per request: {"turn", "prompt", "completion", "calls", "G", "T", "samples"} (samples: λ drafted)
    requests: list[dict[str, Any]] = field(default_factory=list)

    @property
    def hit_rate(self) -> float:
        return self.hits / self.calls if self.calls else 0.0


def _assistant_dict(message: Any) -> dict[str, Any]:
    calls = getattr(message, "tool_calls", None) or []
    out: dict[str, Any] = {"role": "assistant", "content": getattr(message, "content", None)}
    if calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.function.name, "arguments": c.function.arguments},
            }
            for c in calls
        ]
    return out


@dataclass
class _Reply:
    messages: list[dict[str, Any]]  # engine-resolved (assistant, tool) pairs, then the final message
    final: Any  # what run_tool_calls takes
    prompt_tokens: int = 0
    completion_tokens: int = 0


async def _reply(response: Any, stream: bool) -> _Reply:
    """The messages of one response; a stream is read to the end (resolved calls, usage)."""
    from spectool import resolved_messages

    if not stream:
        usage = getattr(response, "usage", None)
        return _Reply(
            [_assistant_dict(response.choices[0].message)],
            response,
            getattr(usage, "prompt_tokens", 0) or 0,
            getattr(usage, "completion_tokens", 0) or 0,
        )
    out = _Reply([], response)
    async for chunk in response:
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            out.prompt_tokens, out.completion_tokens = usage.prompt_tokens, usage.completion_tokens
        for choice in getattr(chunk, "choices", None) or ():
            if choice.index == 0:
                out.messages.extend(resolved_messages(choice))
    final = response.final_message()
    out.messages.append(
        {
            "role": "assistant",
            "content": final.get("content"),
            **({"tool_calls": final["tool_calls"]} if final.get("tool_calls") else {}),
        }
    )
    return out


async def _run_turn(
    spec: Any, task: Task, setup: Setup, messages: list, result: AgentResult, turn: int
) -> None:
    left = setup.max_steps_per_turn
    while left > 0:
        t0 = time.perf_counter()
        reply = await _ask(spec, task, setup, messages, result)
        t1 = time.perf_counter()
        # Resolved calls count as steps: past the cap the baseline would have stopped there.
        resolved = reply.messages[:-1][: 2 * left]
        final = reply.messages[-1] if len(resolved) < 2 * left else None
        messages.extend(resolved)
        left -= len(resolved) // 2 + (final is not None)
        result.engine_resolved += len(resolved) // 2
        result.calls += len(resolved) // 2
        result.completion_tokens += reply.completion_tokens
        result.steps += len(resolved) // 2 + (final is not None)
        result.G.append(t1 - t0)
        if setup.on_step:
            setup.on_step()
        calls = (final or {}).get("tool_calls") or []
        if final is not None:
            messages.append(final)
        if calls:
            messages.extend(await spec.run_tool_calls(reply.final))
            result.calls += len(calls)
        result.T.append(time.perf_counter() - t1 if calls else 0.0)
        result.requests.append(
            {
                "task": len(result.transcript),
                "turn": turn,
                "prompt": reply.prompt_tokens,
                "completion": reply.completion_tokens,
                "calls": len(calls) + len(resolved) // 2,
                "G": t1 - t0,
                "T": result.T[-1],
                # λ drafted for this request (None: no drafter); with "auto", the speculator's pick
                "samples": chosen[-1] if (chosen := spec.speculator.samples_chosen) else None,
            }
        )
        if not calls:
            return


async def _ask(spec: Any, task: Task, setup: Setup, messages: list, result: AgentResult) -> _Reply:
    """One model request read to its end, re-sent after a transport failure (``request_retries``)."""
    import httpx
    import openai

    retryable: tuple[type[BaseException], ...] = (openai.APIConnectionError, httpx.TransportError)
    try:  # openai 3 speaks httpx2; a stream cut mid-way raises that library's transport error
        import httpx2

        retryable += (httpx2.TransportError,)
    except ImportError:
        pass
    for attempt in range(setup.request_retries + 1):
        try:
            response = await spec.chat.completions.create(
                model=setup.model, messages=messages, tools=list(task.tools), **setup.request_options
            )
            return await _reply(response, setup.stream)
        except retryable:
            if attempt == setup.request_retries:
                raise
            result.retries += 1
            await anyio.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


async def _run_task(
    client: Any, task: Task, setup: Setup, result: AgentResult, drafter: Drafter | None, world: Any
) -> None:
    from spectool import speculative  # the client-side core

    stats = ToolStats()
    box = build_toolbox(task, setup.latency, stats, world)
    if setup.tools_hook is not None:
        box = setup.tools_hook(task, box)
    options: dict[str, Any] = {"samples": setup.samples, "eager": setup.eager}
    if setup.samples == "auto":
        options["sample_cost"] = setup.sample_cost
    if drafter is not None and setup.mode == "engine":
        options.update(mode="engine", engine_options=setup.engine_options)
    if setup.hooks:
        options["hooks"] = list(setup.hooks)
    if setup.cache is not None:
        options["cache"] = setup.cache(box)
    messages: list[dict[str, Any]] = []
    resolved_before = result.engine_resolved
    async with speculative(client, box, drafter, **options) as spec:
        for i, turn in enumerate(task.turns[: setup.max_turns]):
            messages.extend(dict(m) for m in turn)
            await _run_turn(spec, task, setup, messages, result, i)
        c = spec.counters
        result.hits += c.hits + c.joins
        result.drafts += spec.speculator.draft_counters.drafts
        result.undrafted += spec.speculator.draft_counters.undrafted_turns
    result.hits += result.engine_resolved - resolved_before
    result.tool_runs += stats.runs
    result.tool_seconds += stats.seconds
    result.transcript.append(messages)


async def _run_agent(i: int, tasks: Sequence[Task], setup: Setup, result: AgentResult) -> None:
    client = setup.make_client()
    drafter = TimedDrafter(setup.drafter()) if setup.drafter is not None else None
    for task in tasks:
        # A fresh world is built untimed (a τ² database copy takes ~0.1–0.3 s of CPU): the wall
        # time is the agent's work on the task, and speculation cannot shorten set-up.
        world = open_world(task)
        t0 = time.perf_counter()
        await _run_task(client, task, setup, result, drafter, world)
        result.task_walls.append(time.perf_counter() - t0)
        result.task_ids.append(task.id)
        result.wall_s += result.task_walls[-1]
        result.world_states.append(world_state(world))
    if drafter is not None:
        result.draft_seconds, result.drafter_tokens = drafter.durations, drafter.tokens


async def run_agents(assignments: Sequence[Sequence[Task]], setup: Setup) -> list[AgentResult]:
    """Run one agent per task list, all concurrently; results in agent order."""
    if setup.mode not in ("client", "engine"):
        raise ConfigError(f"mode must be client or engine, got {setup.mode!r}")
    results = [AgentResult(agent=i) for i in range(len(assignments))]
    async with anyio.create_task_group() as tg:
        for i, tasks in enumerate(assignments):
            tg.start_soon(_run_agent, i, tasks, setup, results[i])
    return results


def assign(tasks: Sequence[Task], agents: int, per_agent: int) -> list[list[Task]]:
    """Agent i gets ``per_agent`` tasks, starting at i·per_agent and wrapping around."""
    if not tasks:
        raise ConfigError("no tasks to run")
    return [[tasks[(i * per_agent + j) % len(tasks)] for j in range(per_agent)] for i in range(agents)]
