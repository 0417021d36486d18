"""``--o2 auto|on|off`` and what ``auto`` is told: the flags, and the choice from them.

The rule itself is :mod:`._o2choice` (pure); this module reads the command line, including
vLLM's own ``--max-num-seqs`` as the expected concurrency when ``--o2-streams`` is not given.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from spectool.errors import ConfigError

from ._o2choice import MEASURED_TAX, HitGain, O2Choice, O2Expectation, choose_o2, parse_tax

__all__ = ["add_o2_arguments", "o2_choice"]

#: expected traffic when the operator says nothing: agent turns (short responses, about half
#: of them a tool call whose output the client posted in time)
DEFAULT_HIT_RATE = 0.5
DEFAULT_RESPONSE_TOKENS = 64
#: vLLM's own ``max_num_seqs`` for the OpenAI server on CPU (0.32), used when none is given
VLLM_DEFAULT_MAX_NUM_SEQS = 128


def _tax(text: str) -> Any:
    try:
        return parse_tax(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def add_o2_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--o2",
        default="auto",
        choices=["auto", "on", "off"],
        help="vllm backend: O2 (drafting cached calls) on vLLM's speculative path, which costs "
        "every step; auto: on when the expected hits pay for it (docs/vllm.md)",
    )
    p.add_argument(
        "--o2-hit-rate",
        type=float,
        default=DEFAULT_HIT_RATE,
        help=f"--o2 auto: expected cached calls drafted per response (default {DEFAULT_HIT_RATE})",
    )
    p.add_argument(
        "--o2-response-tokens",
        type=float,
        default=DEFAULT_RESPONSE_TOKENS,
        help=f"--o2 auto: expected tokens per response (default {DEFAULT_RESPONSE_TOKENS})",
    )
    p.add_argument(
        "--o2-streams",
        type=int,
        default=None,
        help="--o2 auto: expected concurrent streams (default: vLLM's --max-num-seqs)",
    )
    p.add_argument(
        "--o2-tax",
        type=_tax,
        default=MEASURED_TAX,
        help="--o2 auto: O2's measured cost as streams:ratio pairs (default: the CPU table)",
    )


def _max_num_seqs(vllm_flags: Sequence[str]) -> int | None:
    for i, a in enumerate(vllm_flags):
        value = vllm_flags[i + 1] if a == "--max-num-seqs" and i + 1 < len(vllm_flags) else None
        if a.startswith("--max-num-seqs="):
            value = a.split("=", 1)[1]
        if value is not None:
            try:
                return int(value)
            except ValueError:
                raise ConfigError(f"--max-num-seqs must be a whole number, got {value!r}") from None
    return None


def o2_choice(args: argparse.Namespace, vllm_flags: Sequence[str]) -> O2Choice:
    """The choice for these arguments; ``--no-o2`` / ``--no-tool-cache`` mean ``off``."""

    def opt(name: str, default: Any) -> Any:
        value = getattr(args, name, None)
        return default if value is None else value

    mode = "off" if opt("no_o2", False) or opt("no_tool_cache", False) else opt("o2", "auto")
    streams = opt("o2_streams", None)
    if streams is None:
        streams = _max_num_seqs(vllm_flags) or VLLM_DEFAULT_MAX_NUM_SEQS
    try:
        expect = O2Expectation(
            streams=streams,
            hit_rate=opt("o2_hit_rate", DEFAULT_HIT_RATE),
            response_tokens=opt("o2_response_tokens", DEFAULT_RESPONSE_TOKENS),
            gain=HitGain(draft_tokens=opt("num_draft_tokens", 8)),
            tax=tuple(opt("o2_tax", MEASURED_TAX)),
        )
        return choose_o2(mode, expect)
    except ValueError as exc:
        raise ConfigError(f"--o2 auto: {exc}") from exc
