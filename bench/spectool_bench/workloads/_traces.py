"""Drafting traces from BFCL ground truth (the data the shipped adapter is tuned on).

Each example is what a drafter would see at one step of the replay main model
(:mod:`spectool_bench.harness._replay`: one ground-truth call per model response) and the calls
that follow:

* single-turn: at step i the question plus calls 0..i-1 with their stub outputs; the target is
  the remaining calls i.. (a drafter that writes them all at step 0 covers the later steps);
* multi-turn: the ground truth is replayed with BFCL's executable classes (true outputs, true
  state), one example per ground-truth call with the true history before it; the target is
  that one call. τ² tasks (categories ``tau2_<domain>``) the same way, on τ²'s tools and a fresh
  copy of the domain's database, split by τ²'s ``split_tasks.json``.

Only tasks in ``split`` (:mod:`spectool_bench.bfcl._splits`, by content) are used: tune on
``train``, report on ``test``. Each example records ``meta["content"]``, the digest of its question
and functions.

    python -m spectool_bench.workloads._traces --split train --categories simple_python,multiple \\
        --out t.jsonl
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from spectool import DraftRequest, ToolCall, TraceExample, TraceRecorder

from ..bfcl._splits import content_digest
from ..bfcl._tasks import Task
from ._catalog import open_world, split_tasks
from ._toolbox import task_output

__all__ = ["add_arguments", "bfcl_examples", "run", "task_examples"]


def _assistant(call: ToolCall, n: int) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{n}",
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json},
            }
        ],
    }


def _speculable(task: Task, env: Any, call: ToolCall) -> bool:
    if env is None:
        return True  # single-turn stubs are pure
    return bool(env.effect(call.name).speculable)


def task_examples(task: Task, split: str = "") -> Iterator[TraceExample]:
    """The drafting examples of one task, in replay order."""
    env = open_world(task)  # BFCL's classes, a τ² domain's database, or None (stubs)
    messages: list[dict[str, Any]] = []
    n = 0
    for turn_no, (user_msgs, calls) in enumerate(zip(task.turns, task.ground_truth)):
        messages.extend(dict(m) for m in user_msgs)
        for i, call in enumerate(calls):
            target = [call] if env is not None else list(calls[i:])
            meta = {
                "task": task.id,
                "category": task.category,
                "split": split,
                "turn": turn_no,
                "step": i,
                "speculable": _speculable(task, env, call),
                "content": content_digest(messages, task.tools),  # what the adapter manifest lists
            }
            yield TraceExample(DraftRequest(messages=list(messages), tools=task.tools), target, meta)
            out = env.call(call) if env is not None else task_output(task, call)
            messages.append(_assistant(call, n))
            messages.append({"role": "tool", "tool_call_id": f"call_{n}", "content": out})
            n += 1
        # the replay model closes every user turn with a short text answer
        messages.append(
            {
                "role": "assistant",
                "content": "Done: " + ", ".join(c.name for c in calls) + "." if calls else "Nothing to do.",
            }
        )


def bfcl_examples(
    categories: Sequence[str],
    split: str,
    *,
    limit: int | None = None,
    first_step_only: bool = False,
    speculable_only: bool = False,
) -> Iterator[TraceExample]:
    """Examples of every task of ``categories`` in ``split`` (``limit`` tasks per category);
    ``speculable_only`` keeps the steps whose call may run early (the only ones a draft can win)."""
    for category in categories:
        tasks = split_tasks(category, split)[:limit]  # τ² categories (tau2_<domain>): τ²'s own split
        for task in tasks:
            for ex in task_examples(task, split):
                if first_step_only and not task.multi_turn and ex.meta["step"] > 0:
                    continue
                if speculable_only and not ex.meta["speculable"]:
                    continue
                yield ex


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--categories",
        default="simple_python,multiple,live_simple,live_multiple,parallel,parallel_multiple,multi_turn_base",
        help="comma-separated BFCL categories and τ² domains as tau2_<domain> (e.g. tau2_airline)",
    )
    parser.add_argument("--split", default="train", help="train|dev|test|all (default train)")
    parser.add_argument("--limit", type=int, default=None, help="tasks per category")
    parser.add_argument(
        "--first-step-only",
        action="store_true",
        help="single-turn: only the example at step 0 (question → all calls)",
    )
    parser.add_argument(
        "--speculable-only",
        action="store_true",
        help="only steps whose call is speculable (the speculator drops other proposals)",
    )
    parser.add_argument("--out", default="-", help="JSONL file (default stdout)")


def run(args: argparse.Namespace) -> int:
    cats = [c.strip() for c in args.categories.split(",") if c.strip()]
    examples = bfcl_examples(
        cats,
        args.split,
        limit=args.limit,
        first_step_only=args.first_step_only,
        speculable_only=args.speculable_only,
    )
    if args.out == "-":
        import json

        for ex in examples:
            sys.stdout.write(json.dumps(ex.as_json(), ensure_ascii=False, default=str) + "\n")
        return 0
    rec = TraceRecorder(args.out, mode="w")
    for ex in examples:
        rec.write(ex)
    print(f"wrote {rec.written} examples to {args.out}", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m spectool_bench.workloads._traces", description=__doc__.split("\n\n")[0]
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
