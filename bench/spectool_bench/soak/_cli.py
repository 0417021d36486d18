"""``spectool soak``: many agents on the embedded engine under faults; is anything lost?

One process serves the embedded SmolLM2 on spectool's torch engine (HTTP on localhost) and runs
passes of the same agents over the same BFCL test-split tasks (greedy, streamed,
``tool_choice="required"``, the same tools, whose injected failures depend on the call only):

1. **reference**: no drafter, no faults beyond the tools' own — the transcripts to match;
2. **soak**: engine-side speculation (``mode="engine"``, history drafter λ = 1) with a drafter
   that raises, hangs and returns garbage; clients that open streams and drop them; and the
   HTTP server restarted mid-run (open connections cut; agents re-send the cut request).

With ``--mcp`` (default) every pass gets a fresh in-process MCP server (:mod:`._mcp`) whose
read and write tools join each task's tools, and each agent first runs a scripted read, write,
read through spectool; the server's state after a pass is its *world state*, compared with the
reference pass's. ``--eager`` (default ``speculable``) sets eager dispatch in the soak passes.

The soak pass runs ``--passes`` times (default 4). Reported: transcripts lost (an agent that
did not finish) or changed (≠ the reference, call ids aside), asyncio tasks and threads left
after the passes, the process's RSS (client and server share it here) at the end of each pass
once its work is done and collected, and that series' least-squares slope per pass
(:mod:`._leak`), responses with a 5xx status, and how many faults of each kind were injected.
Exit status 1 when anything was lost or changed (a transcript or a world state), a 5xx came
back, or the slope is above ``--max-leak-pct``. Both passes run under the same concurrency on
the same engine, so a changed transcript is speculation's doing, not batching's.

    spectool soak --agents 32 --tasks-per-agent 4 --out soak-out
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio

from spectool.errors import ConfigError

from ..bfcl._splits import in_split
from ..bfcl._tasks import load_tasks
from ..harness._agents import AgentResult, Setup, _run_agent, assign
from ..workloads._latency import Latency
from . import _report as soak_report
from ._compare import PassRun, compare
from ._faults import FaultCounts, FaultyDrafter, disconnecting_clients, faulty_tools
from ._leak import DEFAULT_MAX_LEAK_PCT, judge, rss_mb, run_passes, settled_rss_mb
from ._mcp import Prestep, pass_world, with_world
from ._tiny import TINY, ReplayDrafter, tiny_model_folder

__all__ = ["add_arguments", "run"]


class _Statuses:
    """httpx response hook: counts 5xx answers the agents' clients saw."""

    def __init__(self) -> None:
        self.server_errors = 0
        self.responses = 0

    async def __call__(self, response: Any) -> None:
        self.responses += 1
        self.server_errors += response.status_code >= 500


def _say(msg: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _client_factory(base_url: str, statuses: _Statuses) -> Callable[[], Any]:
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


def _describe(exc: BaseException) -> str:
    """``Type: message`` of the exceptions that happened: a task group's wrapper names none."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


async def _agents(
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
            errors[i] = _describe(exc)[:600]

    async with anyio.create_task_group() as tg:
        for i in range(len(assignment)):
            tg.start_soon(one, i)
    return results, errors, scripted


async def _sample_rss(
    rss: list[tuple[float, float]],
    stop: anyio.Event,
    t0: float,
    label: str,
    statuses: _Statuses,
    counts: FaultCounts,
) -> None:
    """RSS every 0.5 s until ``stop``, with a progress line every 15 s (runs last minutes)."""
    said = 0.0
    while not stop.is_set():
        now = time.perf_counter() - t0
        rss.append((now, rss_mb()))
        if now - said >= 15:
            said = now
            _say(
                f"{label} {now:.0f} s: {statuses.responses} responses ({statuses.server_errors} 5xx), "
                f"RSS {rss[-1][1]:.0f} MB, faults {sum(counts.as_dict().values())}"
            )
        with anyio.move_on_after(0.5):
            await stop.wait()


async def _reference_pass(
    args: argparse.Namespace, assignment: list, setup: Setup, statuses: _Statuses, counts: FaultCounts
):
    """The pass without speculation (RSS sampled as in a soak pass): the transcripts and
    world state to match."""
    rss: list[tuple[float, float]] = []
    stop = anyio.Event()
    async with pass_world(args.mcp) as world, anyio.create_task_group() as tg:
        tasks, setup, prestep = with_world(world, assignment, setup, "off")
        tg.start_soon(_sample_rss, rss, stop, time.perf_counter(), "reference pass", statuses, counts)
        results, errors, scripted = await _agents(tasks, setup, prestep)
        stop.set()
        state = world.notes.state() if world is not None else {}
    return results, errors, scripted, state, rss


def _drafter(args: argparse.Namespace, reference: list[AgentResult]) -> Any:
    """The history drafter; for the tiny model, behind the reference pass's calls replayed."""
    from spectool.drafters import HistoryDrafter

    if args.model != TINY:
        return HistoryDrafter()
    return ReplayDrafter.from_transcripts([t for r in reference for t in r.transcript], HistoryDrafter())


async def _soak_pass(
    args: argparse.Namespace,
    main: Any,
    assignment: list,
    base: dict,
    counts: FaultCounts,
    reference: list[AgentResult],
):
    statuses = _Statuses()
    make_client = _client_factory(main.base_url, statuses)
    salt = iter(range(10**6))
    setup = Setup(
        **base,
        make_client=make_client,
        drafter=lambda: FaultyDrafter(
            _drafter(args, reference), counts, salt=str(next(salt)), **_drafter_pcts(args)
        ),
        mode="engine",
        engine_options={"base_url": main.base_url},
        request_retries=8,
        tools_hook=faulty_tools(counts, **_tool_pcts(args)),
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
        results, errors, scripted = await _agents(tasks, setup, prestep)
        stop.set()
        wall = time.perf_counter() - t0
        # speculative runs still in flight get their timeout to finish, and a late early write
        # must land before the world state is read
        await anyio.sleep(args.settle)
        state = world.notes.state() if world is not None else {}
    return PassRun(results, errors, scripted, state), statuses, rss, marks, wall


def _pcts(text: str, names: tuple[str, ...], option: str) -> dict[str, int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if len(values) != len(names) or not all(0 <= v <= 100 for v in values) or sum(values) > 100:
        raise ConfigError(
            f"{option} takes {len(names)} comma-separated percentages summing to <= 100, got {text!r}"
        )
    return dict(zip(names, values, strict=True))


def _drafter_pcts(args: argparse.Namespace) -> dict[str, int]:
    return _pcts(args.drafter_faults, ("raise_pct", "hang_pct", "garbage_pct"), "--drafter-faults")


def _tool_pcts(args: argparse.Namespace) -> dict[str, int]:
    return _pcts(args.tool_faults, ("raise_pct", "slow_pct"), "--tool-faults")


def _base(args: argparse.Namespace, main: Any) -> dict[str, Any]:
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


async def _run_async(args: argparse.Namespace, main: Any) -> dict[str, Any]:
    tasks = [t for c in args.categories.split(",") for t in in_split(load_tasks(c), "test")]
    assignment = assign(tasks, args.agents, args.tasks_per_agent)
    base = _base(args, main)
    ref_statuses = _Statuses()
    ref_counts = FaultCounts()
    _say(f"reference pass: {len(tasks)} test tasks over {len(assignment)} agents, no speculation, no faults")
    reference, ref_errors, ref_scripted, ref_state, ref_rss = await _reference_pass(
        args,
        assignment,
        Setup(
            **base,
            make_client=_client_factory(main.base_url, ref_statuses),
            tools_hook=faulty_tools(ref_counts, **_tool_pcts(args)),
        ),
        ref_statuses,
        ref_counts,
    )
    if any(ref_errors):
        raise RuntimeError(f"the reference pass failed: {next(e for e in ref_errors if e)}")
    ref_run = PassRun(reference, ref_errors, ref_scripted, ref_state)
    ref_end_mb = settled_rss_mb()
    counts = FaultCounts()
    lost: list[int] = []
    changed: list[int] = []
    worlds_changed: list[int] = []
    last: dict[str, Any] = {}  # the last pass's results, for the report

    async def one_pass(k: int) -> dict[str, Any]:
        _say(
            f"soak pass {k + 1}/{args.passes}: engine-side speculation (eager {args.eager}, "
            f"MCP {'on' if args.mcp else 'off'}) under drafter/tool faults, dropped streams, a restart"
        )
        run, statuses, rss, marks, wall = await _soak_pass(args, main, assignment, base, counts, reference)
        verdict = compare(ref_run, run, [len(a) for a in assignment])
        lost.extend(verdict.lost)
        changed.extend(verdict.changed)
        if verdict.world_changed:
            worlds_changed.append(k)
            _say(f"soak pass {k + 1}: the MCP server's state differs from the reference pass's")
        last.update(
            results=run.results, errors=run.errors, statuses=statuses, rss=rss, marks=marks, wall=wall
        )
        summary = soak_report.pass_summary(verdict.lost, verdict.changed, statuses, rss, wall)
        summary["world_changed"] = verdict.world_changed
        return summary

    # RSS is read after each pass's work is done and collected: the series a leak would raise
    passes, end_mb = await run_passes(args.passes, one_pass)
    for summary, end in zip(passes, end_mb, strict=True):
        summary["rss_end_mb"] = round(end, 1)
    me = asyncio.current_task()
    tasks_left = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
    report = soak_report.report(
        args,
        reference,
        last["results"],
        last["errors"],
        lost,
        changed,
        tasks_left,
        last["statuses"],
        ref_statuses,
        counts,
        last["rss"],
        last["marks"],
        last["wall"],
        main,
    )
    report["passes"] = passes
    report["reference_rss_end_mb"] = round(ref_end_mb, 1)
    report["reference_peak_rss_mb"] = round(max((v for _, v in ref_rss), default=0.0), 1)
    report.update(judge(end_mb, args.max_leak_pct))
    report["server_errors_5xx"] = sum(p["server_errors_5xx"] for p in passes)
    report["eager"], report["mcp"] = args.eager, args.mcp
    report["changed_world_states"] = len(worlds_changed)
    report["reference_world_state"] = ref_state
    return report


def run(args: argparse.Namespace) -> int:
    from ..backends._embedded_main import EmbeddedMain

    if args.quick:
        args.agents, args.tasks_per_agent = 4, 2
    if args.passes < 1 or args.max_leak_pct < 0:
        raise ConfigError("--passes must be >= 1 and --max-leak-pct >= 0")
    _drafter_pcts(args), _tool_pcts(args)  # a bad value fails before the model loads
    args.out.mkdir(parents=True, exist_ok=True)
    source = str(tiny_model_folder(args.out)) if args.model == TINY else args.model
    # the tiny model repeats its call, so the engine would resolve repeat after repeat, up to
    # its own cap, in one response whose extra rounds the agent drops (it keeps --max-steps
    # messages): the rounds an agent can use, no more
    rounds = max(args.max_steps - 1, 1) if args.model == TINY else None
    with EmbeddedMain(source, backend="torch", threads=args.threads, max_batch=16, max_rounds=rounds) as main:
        before = {t.ident for t in threading.enumerate()}
        report = anyio.run(_run_async, args, main)
        # after the event loop closed (its worker pools with it): what did the run leave behind?
        # The engine's and the HTTP server's own threads are daemons that live as long as it.
        left = [t.name for t in threading.enumerate() if t.ident not in before and not t.daemon]
    report["threads_left"], report["threads_left_names"] = len(left), left[:10]
    (args.out / "results.json").write_text(json.dumps(report, indent=1) + "\n")
    soak_report.print_report(report)
    png = None if args.no_plot else soak_report.plot(report, args.out)
    print(f"wrote {args.out / 'results.json'}" + (f" and {png}" if png else ""))
    bad = (
        report["lost_transcripts"]
        or report["changed_transcripts"]
        or report.get("changed_world_states")
        or report["server_errors_5xx"]
    )
    return 1 if bad or report["rss_leak"] else 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        default="embedded",
        help="the engine's model: 'embedded' (SmolLM2-135M-Instruct, the default), an HF folder, "
        "a .gguf, or 'tiny': a random 2-layer Llama of SmolLM2's architecture and tokenizer "
        "(fixed seed) for a fast check of the soak's machinery, whose outputs mean nothing",
    )
    p.add_argument("--agents", type=int, default=32, help="concurrent agents (default 32)")
    p.add_argument("--tasks-per-agent", type=int, default=4)
    p.add_argument("--categories", default="simple_python,multiple,parallel")
    p.add_argument("--max-steps", type=int, default=2, help="model messages per task")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--tool-latency", type=float, default=0.3, help="mean tool seconds")
    p.add_argument("--restart-after", type=float, default=20.0, help="seconds into the soak pass (0: never)")
    p.add_argument(
        "--restart-after-responses",
        type=int,
        default=0,
        help="restart instead once the soak pass's clients saw this many responses and its "
        "first stream was dropped (0: use --restart-after); a short pass still meets its restart",
    )
    p.add_argument(
        "--disconnect-every",
        type=float,
        default=3.0,
        help="seconds between dropped streams (one is dropped at the start of each pass)",
    )
    p.add_argument("--settle", type=float, default=6.0, help="seconds to wait before counting leftovers")
    p.add_argument("--threads", type=int, default=2, help="torch threads of the engine")
    p.add_argument(
        "--drafter-faults",
        default="10,5,10",
        help="percent of draft requests on which the drafter raises, hangs past the draft timeout, "
        "returns garbage (default 10,5,10)",
    )
    p.add_argument(
        "--tool-faults",
        default="8,5",
        help="percent of tool call keys that raise, run slow (default 8,5; the reference pass "
        "meets the same ones)",
    )
    p.add_argument(
        "--passes",
        type=int,
        default=4,
        help="soak passes over the same tasks (default 4): RSS is read at the end of each, and "
        "its slope per pass judged from 4 passes on",
    )
    p.add_argument(
        "--max-leak-pct",
        type=float,
        default=DEFAULT_MAX_LEAK_PCT,
        help="end-of-pass RSS slope, in %% of the first pass's per pass, above which the soak "
        f"fails (default {DEFAULT_MAX_LEAK_PCT:g})",
    )
    p.add_argument(
        "--eager",
        choices=("off", "speculable", "all"),
        default="speculable",
        help="eager dispatch in the soak passes (default speculable, the wrapper's default: "
        "read-only and pure calls start while the response streams; 'all' also starts mutating "
        "calls once the stream ends, which is only safe when every streamed response's calls "
        "are executed — the soak checks that the world state says so)",
    )
    p.add_argument(
        "--mcp",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="an in-process MCP server's read and write tools among the agents' tools, a "
        "scripted read/write/read per agent through spectool, and its state compared with the "
        "reference pass's (default on)",
    )
    p.add_argument("--quick", action="store_true", help="4 agents × 2 tasks")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--out", type=Path, default=Path("soak-out"))
