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

``--model tiny`` serves a tiny random model of SmolLM2's architecture instead (:mod:`._tiny`):
the same machinery in seconds, for tests; its transcripts mean nothing beyond being equal.

    spectool soak --agents 32 --tasks-per-agent 4 --out soak-out
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
from typing import Any

import anyio

from spectool.errors import ConfigError

from ..bfcl._splits import in_split
from ..bfcl._tasks import load_tasks
from ..harness._agents import Setup, assign
from . import _report as soak_report
from ._compare import PassRun, compare
from ._faults import FaultCounts, faulty_tools
from ._leak import judge, run_passes, settled_rss_mb
from ._options import add_arguments, fault_shares
from ._passes import Statuses, base_options, client_factory, reference_pass, say, soak_pass
from ._tiny import TINY, tiny_model_folder

__all__ = ["add_arguments", "run"]


async def _run_async(args: argparse.Namespace, main: Any) -> dict[str, Any]:
    tasks = [t for c in args.categories.split(",") for t in in_split(load_tasks(c), "test")]
    assignment = assign(tasks, args.agents, args.tasks_per_agent)
    base = base_options(args, main)
    ref_statuses = Statuses()
    ref_counts = FaultCounts()
    say(f"reference pass: {len(tasks)} test tasks over {len(assignment)} agents, no speculation, no faults")
    reference, ref_errors, ref_scripted, ref_state, ref_rss = await reference_pass(
        args,
        assignment,
        Setup(
            **base,
            make_client=client_factory(main.base_url, ref_statuses),
            tools_hook=faulty_tools(ref_counts, **args.tool_pct),
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
        say(
            f"soak pass {k + 1}/{args.passes}: engine-side speculation (eager {args.eager}, "
            f"MCP {'on' if args.mcp else 'off'}) under drafter/tool faults, dropped streams, a restart"
        )
        run, statuses, rss, marks, wall = await soak_pass(args, main, assignment, base, counts, reference)
        verdict = compare(ref_run, run, [len(a) for a in assignment])
        lost.extend(verdict.lost)
        changed.extend(verdict.changed)
        if verdict.world_changed:
            worlds_changed.append(k)
            say(f"soak pass {k + 1}: the MCP server's state differs from the reference pass's")
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
    fault_shares(args)  # parsed once; a bad value fails before the model loads
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
