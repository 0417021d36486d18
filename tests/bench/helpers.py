"""Shared by the benchmark CLI tests: ``spectool bench`` run in-process and the fields of its rows."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from spectool.cli import main

#: The fields every results.json run row carries, whatever the main model.
REQUIRED = {
    "config",
    "agents",
    "samples",
    "drafter",
    "tool_latency_mean",
    "time_saved_pct",
    "throughput_tok_s",
    "hit_rate",
    "wasted_tool_runs",
    "predicted_speedup",
    "measured_speedup",
}
#: The replay model's token clock and the per-request overhead: fast enough for a unit test.
REPLAY_CLOCK = "--decode-rate 200 --prefill-rate 20000 --overhead 0.05"


def run_bench(out: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[str, dict[str, Any]]:
    """``spectool bench ARGS --no-progress --out OUT`` in-process (each of ``args`` a piece of a
    command line); asserts it exits 0 and returns what it printed and its results.json."""
    argv = ["bench", *(word for arg in args for word in shlex.split(arg)), "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    return capsys.readouterr().out, json.loads((out / "results.json").read_text())
