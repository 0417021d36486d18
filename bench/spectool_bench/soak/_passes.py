"""One pass of ``spectool soak``: the agents' clients, the reference pass (no speculation) and a
soak pass (engine-side speculation under drafter and tool faults, dropped streams and a server
restart), each sampling the process's RSS as it runs. :mod:`._cli` runs the passes and compares.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import anyio

from ..harness._agents import AgentResult, Setup, _run_agent
from ..workloads._latency import Latency
from ._compare import PassRun
from ._faults import FaultCounts, FaultyDrafter, disconnecting_clients, faulty_tools
from ._leak import rss_mb
from ._mcp import Prestep, pass_world, with_world
from ._tiny import TINY, ReplayDrafter

__all__ = [
    "Statuses",
    "agents",
    "base_options",
    "client_factory",
    "describe",
    "reference_pass",
    "say",
    "soak_pass",
]


class Statuses:
    """httpx response hook: counts 5xx answers the agents' clients saw."""

    def __init__(self) -> None:
        self.server_errors = 0
        self.responses = 0

    async def __call__(self, response: Any) -> None:
        self.responses += 1
        self.server_errors += response.status_code >= 500


def say(msg: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def client_factory(base_url: str, statuses: Statuses) -> Callable[[], Any]:
    from openai import AsyncOpenAI

    http_lib: Any
    try:  # the HTTP library the installed openai is built on (httpx2 from openai 3 on)
        import httpx2 as http_lib
    except ImportError:
        import httpx as http_lib

    def make() -> Any:
        http = http_lib.AsyncClient(timeout=600.0, event_hooks={"response": [statuses]})
        return AsyncOpenAI(api_key="EMPTY", base_url=base_url, http_client=http, max_retries=3)

    return make


def describe(exc: BaseException) -> str:
    """``Type: message`` of the exceptions that happened: a task group's wrapper names none."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


async def agents(
    assignment: Sequence[Sequence[Any]], setup: Setup, prestep: Prestep | None = None
) -> tuple[list[AgentResult], list[str], list[list[Any]]]:
    """Run every agent (its scripted MCP pre-step first); one agent's failure is recorded (a
    lost transcript), not fatal. Returns the results, errors and pre-step outputs."""
    results = [AgentResult(agent=i) for i in range(len(assignment))]
    errors = [""] * len(assignment)
    scripted: list[list[Any]] = [[] for _ in assignment]

    async def one(i: int) -> None:
        try:
            if prestep is not None:
                scripted[i] = await prestep(i)
            await _run_agent(i, assignment[i], setup, results[i])
        except Exception as exc:  # noqa: BLE001 - the report names it
            errors[i] = describe(exc)[:600]

    async with anyio.create_task_group() as tg:
        for i in range(len(assignment)):
            tg.start_soon(one, i)
    return results, errors, scripted


async def _sample_rss(
    rss: list[tuple[float, float]],
    stop: anyio.Event,
    t0: float,
    label: str,
    statuses: Statuses,
    counts: FaultCounts,
) -> None:
    """RSS every 0.5 s until ``stop``, with a progress line every 15 s (runs last minutes)."""
    said = 0.0
    while not stop.is_set():
        now = time.perf_counter() - t0
        rss.append((now, rss_mb()))
        if now - said >= 15:
            said = now
            say(
                f"{label} {now:.0f} s: {statuses.responses} responses ({statuses.server_errors} 5xx), "
                f"RSS {rss[-1][1]:.0f} MB, faults {sum(counts.as_dict().values())}"
            )
        with anyio.move_on_after(0.5):
            await stop.wait()


async def reference_pass(
    args: argparse.Namespace, assignment: list, setup: Setup, statuses: Statuses, counts: FaultCounts
):
    """The pass without speculation (RSS sampled as in a soak pass): the transcripts and
    world state to match."""
    rss: list[tuple[float, float]] = []
    stop = anyio.Event()
    async with pass_world(args.mcp) as world, anyio.create_task_group() as tg:
        tasks, setup, prestep = with_world(world, assignment, setup, "off")
        tg.start_soon(_sample_rss, rss, stop, time.perf_counter(), "reference pass", statuses, counts)
        results, errors, scripted = await agents(tasks, setup, prestep)
        stop.set()
        state = world.notes.state() if world is not None else {}
    return results, errors, scripted, state, rss


def _drafter(args: argparse.Namespace, reference: list[AgentResult]) -> Any:
    """The history drafter; for the tiny model, behind the reference pass's calls replayed."""
    from spectool.drafters import HistoryDrafter

    if args.model != TINY:
        return HistoryDrafter()
    return ReplayDrafter.from_transcripts([t for r in reference for t in r.transcript], HistoryDrafter())


async def soak_pass(
    args: argparse.Namespace,
    main: Any,
    assignment: list,
    base: dict,
    counts: FaultCounts,
    reference: list[AgentResult],
):
    statuses = Statuses()
    make_client = client_factory(main.base_url, statuses)
    salt = iter(range(10**6))
    setup = Setup(
        **base,
        make_client=make_client,
        drafter=lambda: FaultyDrafter(
            _drafter(args, reference), counts, salt=str(next(salt)), **args.drafter_pct
        ),
        mode="engine",
        engine_options={"base_url": main.base_url},
        request_retries=8,
        tools_hook=faulty_tools(counts, **args.tool_pct),
        eager=args.eager,
    )
    rss: list[tuple[float, float]] = []
    marks: list[tuple[float, str]] = []
    stop = anyio.Event()
    t0 = time.perf_counter()
    sample = functools.partial(_sample_rss, rss, stop, t0, "soak pass", statuses, counts)

    first_drop = anyio.Event()

    async def restart() -> None:
        if args.restart_after_responses > 0:
            # ordered by events, not time: after the first dropped stream (not cut by the
            # restart instead) and once the agents' clients saw that many responses
            while not stop.is_set() and statuses.responses < args.restart_after_responses:
                await anyio.sleep(0.02)
            with anyio.move_on_after(600):
                await first_drop.wait()
        else:
            with anyio.move_on_after(args.restart_after):
                await stop.wait()
        if not stop.is_set():
            marks.append((time.perf_counter() - t0, "server restart"))
            await anyio.to_thread.run_sync(main.restart_http, 1.0)
            counts.restarts += 1

    async with pass_world(args.mcp) as world, anyio.create_task_group() as tg:
        tasks, setup, prestep = with_world(world, assignment, setup, args.eager)
        tg.start_soon(sample)
        tg.start_soon(
            functools.partial(
                disconnecting_clients,
                make_client,
                base["model"],
                counts,
                every_s=args.disconnect_every,
                stop=stop,
                first_done=first_drop,
            )
        )
        if args.restart_after > 0 or args.restart_after_responses > 0:
            tg.start_soon(restart)
        results, errors, scripted = await agents(tasks, setup, prestep)
        stop.set()
        wall = time.perf_counter() - t0
        # speculative runs still in flight get their timeout to finish, and a late early write
        # must land before the world state is read
        await anyio.sleep(args.settle)
        state = world.notes.state() if world is not None else {}
    return PassRun(results, errors, scripted, state), statuses, rss, marks, wall


def base_options(args: argparse.Namespace, main: Any) -> dict[str, Any]:
    """What both passes' agents share: the model, the tools' latency and the request options."""
    return {
        "model": main.model_name,
        "max_turns": 1,
        "max_steps_per_turn": args.max_steps,
        "stream": True,
        "latency": Latency(args.tool_latency, cv=0.2),
        "request_options": {
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": 0.0,
            "max_tokens": args.max_tokens,
            "tool_choice": "required",
        },
    }
