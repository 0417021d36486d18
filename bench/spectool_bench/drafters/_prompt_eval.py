"""Quick check of the local drafter: parse rate, validity and correctness of drafted calls.

    python -m spectool_bench.drafters._prompt_eval [--model embedded] [--threads 1] [--max-new-tokens 48]

Runs a handful of one-call prompts greedily (λ = 1) with and without the schema constraint
(compact prompt), then times one draft per λ. Prints a table; the
figures in docs/drafters.md come from here.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Mapping
from typing import Any

import anyio

from spectool import DraftRequest, ToolCall, canonical_key
from spectool.drafters import LocalDrafter, LocalDrafterOptions, tool_schemas

__all__ = ["CASES", "TOOLS", "main", "valid"]


def _fn(name: str, desc: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": desc,
            "parameters": {"type": "object", "properties": props, "required": required},
        },
    }


TOOLS = [
    _fn(
        "get_weather",
        "Current weather in a city",
        {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        ["city"],
    ),
    _fn("add", "Add two numbers", {"a": {"type": "number"}, "b": {"type": "number"}}, ["a", "b"]),
    _fn(
        "get_stock_price",
        "Latest price of a stock by ticker symbol",
        {"symbol": {"type": "string"}},
        ["symbol"],
    ),
    _fn(
        "send_email",
        "Send an email",
        {"to": {"type": "string"}, "subject": {"type": "string"}},
        ["to", "subject"],
    ),
    _fn(
        "search_files",
        "Find files whose names match a glob pattern",
        {"pattern": {"type": "string"}},
        ["pattern"],
    ),
]

CASES: list[tuple[str, ToolCall]] = [
    ("What's the weather in Paris?", ToolCall("get_weather", {"city": "Paris"})),
    ("What is 17 plus 25?", ToolCall("add", {"a": 17, "b": 25})),
    ("What's the current stock price of NVDA?", ToolCall("get_stock_price", {"symbol": "NVDA"})),
    (
        "Email bob@example.com with the subject Lunch.",
        ToolCall("send_email", {"to": "bob@example.com", "subject": "Lunch"}),
    ),
    ("Find files matching *.py", ToolCall("search_files", {"pattern": "*.py"})),
    ("How warm is it in Tokyo right now?", ToolCall("get_weather", {"city": "Tokyo"})),
    ("Add 3.5 and 4.", ToolCall("add", {"a": 3.5, "b": 4})),
    ("Look up the share price for AAPL.", ToolCall("get_stock_price", {"symbol": "AAPL"})),
]

_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "number": (int, float),
    "integer": int,
    "boolean": bool,
    "object": dict,
    "array": list,
}


def valid(call: ToolCall, tools: Mapping[str, Mapping[str, Any]]) -> bool:
    """The call names an offered tool; required present, no unknown keys, types and enums fit."""
    body = tools.get(call.name)
    if body is None:
        return False
    params = body["parameters"]
    props = params.get("properties") or {}
    if any(r not in call.arguments for r in params.get("required") or ()):
        return False
    for key, value in call.arguments.items():
        schema = props.get(key)
        if schema is None or ("enum" in schema and value not in schema["enum"]):
            return False
        expected = _TYPES.get(schema.get("type", ""), object)
        if isinstance(value, bool) and schema.get("type") != "boolean":
            return False
        if not isinstance(value, expected):
            return False
    return True


def _key(call: ToolCall, tools: Mapping[str, Mapping[str, Any]]) -> str:
    return canonical_key(call.name, call.arguments, tools.get(call.name, {}).get("parameters"))


async def _quality(drafter: LocalDrafter) -> tuple[int, int, int, float]:
    """(parsed, valid, correct, seconds) over CASES, greedy, first call of each sample."""
    tools = tool_schemas(TOOLS)
    parsed = ok = correct = 0
    spent = 0.0
    for text, expected in CASES:
        calls = await drafter.propose(DraftRequest([{"role": "user", "content": text}], TOOLS, 1))
        spent += drafter.last_generate_s or 0.0
        raw_ok = bool(drafter.last_texts) and _parses(drafter.last_texts[0])
        parsed += raw_ok
        first = calls[0] if calls else None
        ok += first is not None and valid(first, tools)
        correct += first is not None and _key(first, tools) == _key(expected, tools)
    return parsed, ok, correct, spent


def _parses(text: str) -> bool:
    from spectool.toolcall_text import parse_tool_calls

    try:
        return bool(parse_tool_calls(text))
    except Exception:
        return False


async def _run(args: argparse.Namespace) -> None:
    n = len(CASES)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"model={args.model} threads={args.threads} max_new_tokens={args.max_new_tokens} cases={n} "
        f"load average={load:.1f} (other processes slow every figure)",
        flush=True,
    )
    if args.only in ("quality", "all"):
        await _table(args)
    if args.only in ("lambda", "all"):
        await _lambdas(args)


async def _table(args: argparse.Namespace) -> None:
    n = len(CASES)
    print(f"{'constrained':>11} {'parsed':>7} {'valid':>6} {'correct':>8} {'gen s':>7}")
    for constrained in (False, True):
        options = LocalDrafterOptions(constrained=constrained, max_new_tokens=args.max_new_tokens)
        p, v, c, s = await _quality(LocalDrafter(args.model, options))
        print(f"{constrained!s:>11} {p:>4}/{n} {v:>3}/{n} {c:>5}/{n} {s:7.1f}", flush=True)


async def _lambdas(args: argparse.Namespace) -> None:
    drafter = LocalDrafter(args.model, LocalDrafterOptions(max_new_tokens=args.max_new_tokens))
    tools = tool_schemas(TOOLS)
    print("\nλ rows: one draft of λ rows (constrained, compact prompt), first 4 cases")
    print(f"{'λ':>3} {'mean gen s':>10} {'mean CPU s':>10} {'any-correct':>12}")
    for lam in args.lambdas:
        spent, cpu, hits = 0.0, 0.0, 0
        for text, expected in CASES[:4]:
            calls = await drafter.propose(DraftRequest([{"role": "user", "content": text}], TOOLS, lam))
            spent += drafter.last_generate_s or 0.0
            cpu += drafter.last_generate_cpu_s or 0.0
            hits += any(_key(c, tools) == _key(expected, tools) for c in calls)
        print(f"{lam:>3} {spent / 4:10.2f} {cpu / 4:10.2f} {hits:>9}/4", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--lambdas", type=int, nargs="*", default=[1, 3, 5])
    parser.add_argument("--only", choices=["quality", "lambda", "all"], default="all")
    args = parser.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    anyio.run(_run, args)
    print(f"\ntotal {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
