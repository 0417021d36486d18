"""The options of ``spectool soak`` and the parsing of its fault shares (done once, before the
model loads, so a bad value fails fast)."""

from __future__ import annotations

import argparse
from pathlib import Path

from spectool.errors import ConfigError

from ._leak import DEFAULT_MAX_LEAK_PCT

__all__ = ["add_arguments", "fault_shares"]


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


def fault_shares(args: argparse.Namespace) -> None:
    """Parse ``--drafter-faults`` and ``--tool-faults`` once into ``args.drafter_pct`` and
    ``args.tool_pct`` (keyword arguments of the fault injectors)."""
    args.drafter_pct, args.tool_pct = _drafter_pcts(args), _tool_pcts(args)


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
