"""Local drafter speed, configurations side by side, in one run on the same BFCL prompts.

``python -m spectool_bench.drafters._speed --single 20 --multi 20`` drafts the first call of
``--single`` test-split tasks of each single-turn category and ``--multi`` steps of
multi_turn_base test-split tasks (each step sees the conversation so far: earlier turns, the
ground-truth calls made and their executed results), with every configuration in turn on each
request, and prints per configuration and category: median / p90 draft time g, the share of
drafts whose first call is exactly the ground truth's next call (canonical key), and prompt
tokens. With ``--threads 1`` torch computes in the drafting thread, so ``g_cpu_median_s`` (that
thread's CPU seconds for prefill + decode) is what the draft would take on an idle core even
when other work shares the machine. Configurations (:data:`CONFIGS`): ``new`` (compact prompt,
fast decoder), ablations of its levers, ``new-beam`` (λ rows as a constrained beam), ``native``
(the model's own tool-call format; a base whose template takes tools), and ``llama`` /
``llama-native`` (the same two prompts on the llama.cpp runtime: the GGUF's Q4 kernels; needs
``spectool[llamacpp]``). g of a llama.cpp draft counts the CPU of its whole process (its thread
pool), of a torch draft the drafting thread's. The worked-examples prompt
and the ``generate`` decoder measured in docs/drafters.md have left the drafter.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from spectool import DraftRequest, ToolCall, canonical_key
from spectool.drafters import LocalDrafter, LocalDrafterOptions, tool_schemas

from ..bfcl._splits import in_split
from ..bfcl._tasks import Task, load_tasks

__all__ = ["CONFIGS", "main", "requests_for"]

#: name -> LocalDrafterOptions fields (the compact prompt and the fast decoder unless said). The
#: transformers configurations name their runtime: "auto" would take llama.cpp where installed.
_TF: dict[str, Any] = {"runtime": "transformers"}
CONFIGS: dict[str, dict[str, Any]] = {
    "new-nojump": {**_TF, "jump_forward": False},
    "new-nocache": {**_TF, "prefix_cache": False},
    "new": {**_TF},  # dtype "auto": int8 weights on CPU
    "new-fp32": {**_TF, "dtype": "float32"},
    "new-bf16": {**_TF, "dtype": "bfloat16"},
    # no tool descriptions: the tool list no longer depends on the last user message, so
    # multi-turn drafts reuse far more of the previous prompt's cache
    "new-stable": {**_TF, "described": 0},
    # λ rows as a grammar-constrained beam (distinct guesses by sequence log-probability)
    "new-beam": {**_TF, "diversity": "beam"},
    # the model's own chat template and tool-call tags (bases whose template takes tools: Qwen)
    "native": {**_TF, "prompt": "native"},
    "native-bf16": {**_TF, "prompt": "native", "dtype": "bfloat16"},
    # the GGUF as shipped (Q4 kernels) through llama-cpp-python: the same prompts, GBNF grammar
    "llama": {"runtime": "llama.cpp"},
    "llama-native": {"runtime": "llama.cpp", "prompt": "native"},
}


@dataclass
class Row:
    """One configuration on one category: draft times and first-call hits."""

    times: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    hits: int = 0
    prompt_tokens: list[int] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        ts = sorted(self.times)
        return {
            "n": len(ts),
            "g_median_s": round(statistics.median(ts), 3) if ts else None,
            "g_p90_s": round(ts[min(len(ts) - 1, int(0.9 * len(ts)))], 3) if ts else None,
            "g_cpu_median_s": round(statistics.median(self.cpu), 3) if self.cpu else None,
            "right_first": round(self.hits / len(ts), 3) if ts else None,
            "prompt_tokens_median": statistics.median(self.prompt_tokens) if self.prompt_tokens else None,
        }


def _assistant(call: ToolCall, index: int) -> tuple[dict[str, Any], str]:
    cid = f"call_{index}"
    msg = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": cid,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(dict(call.arguments))},
            }
        ],
    }
    return msg, cid


def _multi_steps(task: Task) -> Iterator[tuple[DraftRequest, ToolCall]]:
    """Every ground-truth call of a multi-turn task, with the conversation that precedes it."""
    from ..bfcl._executable import Environment

    env = Environment(list(task.classes), task.initial_config, task.long_context)
    messages: list[dict[str, Any]] = []
    n = 0
    for turn, calls in zip(task.turns, task.ground_truth):
        messages.extend(dict(m) for m in turn)
        for call in calls:
            yield DraftRequest(list(messages), task.tools, 1), call
            msg, cid = _assistant(call, n)
            n += 1
            messages += [msg, {"role": "tool", "tool_call_id": cid, "content": env.call(call)[:2000]}]
        messages.append({"role": "assistant", "content": "Done."})


def requests_for(category: str, n: int, split: str = "test") -> list[tuple[DraftRequest, ToolCall]]:
    """Up to ``n`` (request, the call the model made next) pairs of ``category``'s ``split``."""
    tasks = in_split(load_tasks(category), split)
    out: list[tuple[DraftRequest, ToolCall]] = []
    for task in tasks:
        if task.multi_turn:
            for pair in _multi_steps(task):
                out.append(pair)
                if len(out) >= n:
                    return out
        elif task.ground_truth and task.ground_truth[0]:
            out.append((DraftRequest(list(task.turns[0]), task.tools, 1), task.ground_truth[0][0]))
            if len(out) >= n:
                return out
    return out


def _hit(calls: list[ToolCall], truth: ToolCall, tools: Mapping[str, Mapping[str, Any]]) -> bool:
    if not calls:
        return False
    schema = (tools.get(truth.name) or {}).get("parameters")
    first = calls[0]
    return canonical_key(first.name, dict(first.arguments), schema) == canonical_key(
        truth.name, dict(truth.arguments), schema
    )


def _threads(config: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """``--threads`` for a llama.cpp configuration too (torch's is set process-wide in main)."""
    return {**config, "threads": args.threads} if config.get("runtime") == "llama.cpp" else config


async def _run(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    names = args.configs.split(",")
    drafters = {
        name: LocalDrafter(
            args.model,
            LocalDrafterOptions(max_new_tokens=args.max_new_tokens, **_threads(CONFIGS[name], args)),
        )
        for name in names
    }
    for d in drafters.values():
        await d.load()
    cats = [c for c in args.categories.split(",") if c]
    results: dict[str, dict[str, Any]] = {}
    for cat in cats:
        n = args.multi if cat.startswith("multi_turn") else args.single
        pairs = requests_for(cat, n, args.split)
        rows = {name: Row() for name in names}
        for i, (request, truth) in enumerate(pairs):
            request = DraftRequest(request.messages, request.tools, args.samples)
            tools = tool_schemas(request.tools)
            for name, d in drafters.items():
                start = time.perf_counter()
                calls = await d.propose(request)
                rows[name].times.append(time.perf_counter() - start)
                if d.last_generate_cpu_s is not None:  # the model's CPU seconds: robust to a busy machine
                    rows[name].cpu.append(d.last_generate_cpu_s)
                rows[name].hits += _hit(calls, truth, tools)
                rows[name].prompt_tokens.append(len(d.token_ids(await d.load(), request)))
            if args.verbose:
                print(
                    f"{cat} {i}: " + " ".join(f"{k}={r.times[-1]:.2f}s" for k, r in rows.items()), flush=True
                )
        results[cat] = {name: row.summary() for name, row in rows.items()}
        for name, row in rows.items():
            print(f"{cat:16s} {name:18s} {json.dumps(row.summary())}", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spectool_bench.drafters._speed", description=__doc__)
    parser.add_argument("--model", default=None, help="drafter model (default: the embedded SmolLM2)")
    parser.add_argument("--categories", default="simple_python,live_simple,multi_turn_base")
    parser.add_argument("--single", type=int, default=20, help="tasks per single-turn category")
    parser.add_argument("--multi", type=int, default=20, help="steps of multi-turn categories")
    parser.add_argument("--split", default="test")
    parser.add_argument("--samples", type=int, default=1, help="λ rows per draft")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--configs", default="new,new-beam", help=f"comma list of {', '.join(CONFIGS)}")
    parser.add_argument("--out", default=None, help="write the figures as JSON here")
    parser.add_argument(
        "--threads", type=int, default=0, help="torch and llama.cpp threads (0: their defaults, every core)"
    )
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    unknown = [c for c in args.configs.split(",") if c not in CONFIGS]
    if unknown:
        parser.error(f"unknown configs {unknown}")
    results = anyio.run(_run, args)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"args": vars(args), "results": results}, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
