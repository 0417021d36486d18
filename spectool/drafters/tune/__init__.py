"""``spectool drafters tune``: LoRA-tune the local drafter on drafting traces.

The command around :func:`spectool.drafters.tune._tune.tune`: it streams the chosen examples of a
trace file, loads the base model, tunes and writes the adapter with its ``manifest.json`` (base
model, data, split, command, options, loss curve and time). torch/transformers/peft load on use.

    python -m spectool.drafters.tune --traces train.jsonl --out adapter/ --epochs 1
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..local._compact import COMPACT_FORMAT_VERSION
from ._tune import TuneOptions, save_adapter, tune
from ._tune_data import training_examples

__all__ = ["add_arguments", "main", "resolve_precision", "run"]

#: TuneOptions' fields the command sets by a flag of the same name (--batch-size)
_FLAGS = [f for f in dataclasses.fields(TuneOptions) if "help" in f.metadata]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--traces", required=True, help="trace JSONL (spectool drafters traces, or recorded)")
    parser.add_argument("--out", required=True, help="output folder for the adapter + manifest.json")
    parser.add_argument("--model", default="embedded", help="base model (default: the embedded SmolLM2)")
    for f in _FLAGS:  # the training options, with TuneOptions' defaults
        flag = "--" + f.name.replace("_", "-")
        parser.add_argument(flag, type=type(f.default), default=f.default, help=f.metadata["help"])
    parser.add_argument("--max-examples", type=int, default=None)
    parser.add_argument("--max-per-category", type=int, default=None)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument(
        "--precision",
        choices=("auto", "bf16", "fp32"),
        default="auto",
        help="compute precision of the forward/backward (weights stay fp32); auto: bf16 where the "
        "CPU computes it natively (AVX-512), else fp32 (an AVX2-only CPU runs bf16 ~20x slower)",
    )
    parser.add_argument(
        "--max-minutes",
        type=float,
        default=None,
        help="stop after this much training time (the manifest records the steps done)",
    )


def resolve_precision(precision: str) -> str:
    """``auto`` → ``bf16`` where oneDNN computes bf16 natively (AVX-512 and up), else ``fp32``.

    On an AVX2-only CPU a bf16 training step of SmolLM2 took 96 s against 4.4 s in fp32 (batch
    of 4, ~140 tokens, two threads): without native support bf16 is a slow path, not a saving."""
    if precision != "auto":
        return precision
    import torch

    return "bf16" if torch.ops.mkldnn._is_mkldnn_bf16_supported() else "fp32"


def run(args: argparse.Namespace) -> int:
    import torch

    from ...embedded import load_causal_lm

    if args.threads:
        torch.set_num_threads(args.threads)
    path = args.traces
    if path in ("-", "/dev/stdin") or path.startswith("/dev/fd/"):
        # a pipe or process substitution can be read once only: keep a copy beside the adapter
        Path(args.out).mkdir(parents=True, exist_ok=True)
        copy = Path(args.out) / "traces.jsonl"
        with copy.open("wb") as dst:  # streamed: a trace file may not fit in memory
            if path == "-":
                shutil.copyfileobj(sys.stdin.buffer, dst)
            else:
                with open(path, "rb") as src:
                    shutil.copyfileobj(src, dst)
        path = str(copy)
    examples, data = training_examples(
        path, max_examples=args.max_examples, max_per_category=args.max_per_category, seed=args.seed
    )
    precision = resolve_precision(args.precision)
    source = None if args.model in ("", "embedded") else args.model
    model, tokenizer = load_causal_lm(source, dtype="float32")
    digest = _model_digest(model)  # before LoRA layers are injected
    chosen = sum(data["examples_by_category"].values())
    print(f"tuning on {chosen} examples from {path}", file=sys.stderr, flush=True)
    options = TuneOptions(
        **{f.name: getattr(args, f.name) for f in _FLAGS},
        bf16=precision == "bf16",
        max_seconds=args.max_minutes * 60 if args.max_minutes else None,
    )
    peft_model, report = tune(model, tokenizer, examples, options)
    manifest = {
        "format": "spectool-drafter-adapter",
        "compact_format_version": COMPACT_FORMAT_VERSION,
        "base_model": getattr(model.config, "_name_or_path", "") or str(args.model),
        "base_model_source": args.model,
        "base_model_digest": digest,
        "data": data,
        "command": "spectool drafters tune "
        + " ".join(shlex.quote(a) for a in sys.argv[1:] if a not in ("drafters", "tune")),
        "options": {k: v for k, v in vars(args).items() if k not in ("func", "handler")},
        "torch_threads": torch.get_num_threads(),
        "precision": precision,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        **report,
    }
    save_adapter(peft_model, args.out, manifest)
    print(
        f"saved adapter to {args.out} ({report['seconds']:.0f} s, {report['examples']} examples)",
        file=sys.stderr,
    )
    return 0


def _model_digest(model: Any) -> str:
    """A short fingerprint of the base weights (an adapter only fits the weights it was tuned on)."""
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items())[:8]:
        h.update(name.encode())
        h.update(p.detach().float().flatten()[:256].numpy().tobytes())
    return h.hexdigest()[:16]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="spectool drafters tune", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))
