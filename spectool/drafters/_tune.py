"""``spectool drafters tune``: LoRA-tune the local drafter on drafting traces.

Each trace example (:mod:`spectool._traces`) is rendered in the compact drafter format
(:mod:`._compact`) — the very prompt the drafter later sees — followed by the calls as the
grammar lets the drafter write them. The loss covers the call tokens only (prompt tokens are
labelled -100). Batches group examples of similar length so little padding is computed. The
output folder holds a peft adapter (fp16 weights) and ``manifest.json``: base model, data,
split, command, options, loss curve and time. torch/transformers/peft load lazily.

    python -m spectool.drafters._tune --traces train.jsonl --out adapter/ --epochs 1
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import hashlib
import json
import math
import random
import shlex
import shutil
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._quiet import quiet_peft_wrap
from .._traces import TraceExample, iter_traces
from ..errors import ConfigError
from ._compact import COMPACT_FORMAT_VERSION, compact_prompt_ids, compact_target

__all__ = [
    "Encoded",
    "add_arguments",
    "encode_example",
    "resolve_precision",
    "run",
    "select_examples",
    "tune",
]

IGNORE = -100
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Encoded:
    """One training example: token ids and labels (-100 on the prompt)."""

    input_ids: list[int]
    labels: list[int]

    @property
    def prompt_tokens(self) -> int:
        return sum(1 for x in self.labels if x == IGNORE)


def encode_example(tokenizer: Any, example: TraceExample) -> Encoded:
    """Prompt (compact format, exactly as drafting renders it) + target, prompt masked."""
    prompt = compact_prompt_ids(tokenizer, example.request)
    eos = tokenizer.eos_token or ""
    target = list(
        tokenizer(compact_target(example.calls, example.request.tools, eos), add_special_tokens=False)[
            "input_ids"
        ]
    )
    return Encoded(prompt + target, [IGNORE] * len(prompt) + target)


def select_examples(
    examples: Sequence[TraceExample],
    *,
    max_examples: int | None = None,
    max_per_category: int | None = None,
    seed: int = 0,
) -> list[TraceExample]:
    """A seeded, shuffled subset: at most ``max_per_category`` per ``meta.category``, then
    ``max_examples`` in all (categories interleaved by the shuffle)."""
    cats = [str(ex.meta.get("category", "")) for ex in examples]
    chosen = select_indices(cats, max_examples=max_examples, max_per_category=max_per_category, seed=seed)
    return [examples[i] for i in chosen]


def select_indices(
    categories: Sequence[str],
    *,
    max_examples: int | None = None,
    max_per_category: int | None = None,
    seed: int = 0,
) -> list[int]:
    """:func:`select_examples` on positions: which examples (by their ``meta.category``) a
    seeded shuffle keeps, so a trace file can be chosen from without holding its examples."""
    rng = random.Random(seed)
    pool = list(range(len(categories)))
    rng.shuffle(pool)
    if max_per_category:
        seen: collections.Counter[str] = collections.Counter()
        kept = []
        for i in pool:
            if seen[categories[i]] < max_per_category:
                seen[categories[i]] += 1
                kept.append(i)
        pool = kept
    return pool[:max_examples] if max_examples else pool


def training_examples(
    path: str, *, max_examples: int | None = None, max_per_category: int | None = None, seed: int = 0
) -> tuple[Iterator[TraceExample], dict[str, Any]]:
    """The chosen examples of a trace file, streamed, and the data summary for the manifest.

    Two passes over the file, one line in memory at a time: the first reads each line's
    category (and split) to choose, the second yields the chosen examples in file order. A
    trace file can be far larger than memory (``drafters tune`` once held every example of
    10 MB lines at once)."""
    seen = [
        (str(ex.meta.get("category", "")), str(ex.meta.get("split", "?")), str(ex.meta.get("content") or ""))
        for ex in iter_traces(path)
    ]
    chosen = set(
        select_indices(
            [c for c, _, _ in seen], max_examples=max_examples, max_per_category=max_per_category, seed=seed
        )
    )
    cats = collections.Counter(seen[i][0] or "?" for i in chosen)
    summary = {
        "traces": str(path),
        "sha256_16": _file_digest(path),
        "examples_by_category": dict(sorted(cats.items())),
        "splits": sorted({seen[i][1] for i in chosen}),
        # the content digest of every example trained on (traces that record one), so a leakage
        # check can hold the shipped traces against any held-out set
        "content_hashes": sorted({seen[i][2] for i in chosen if seen[i][2]}),
    }
    return (ex for i, ex in enumerate(iter_traces(path)) if i in chosen), summary


def _file_digest(path: str) -> str | None:
    if not Path(path).is_file():
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def encode_fitting(
    tokenizer: Any, examples: Iterable[TraceExample], max_tokens: int
) -> tuple[list[Encoded], int]:
    """Encode examples as they come, keeping those of at most ``max_tokens`` tokens; returns
    them and how many were dropped. Holds one example at a time beside what it keeps."""
    kept, dropped = [], 0
    for ex in examples:
        enc = encode_example(tokenizer, ex)
        if len(enc.input_ids) > max_tokens:
            dropped += 1
        else:
            kept.append(enc)
    return kept, dropped


def _batches(encoded: list[Encoded], batch_size: int, rng: random.Random) -> list[list[Encoded]]:
    """Batches of similar length (sorted runs), visited in random order."""
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i].input_ids))
    groups = [[encoded[i] for i in order[k : k + batch_size]] for k in range(0, len(order), batch_size)]
    rng.shuffle(groups)
    return groups


def _collate(batch: list[Encoded], pad_id: int) -> tuple[dict[str, Any], Any, int]:
    """Model inputs, labels and the target width of a batch, padded on the left.

    Left padding ends every row at the last column, so the targets (each row's suffix) all lie
    in the last ``keep`` columns and only those need the output layer (:func:`_target_loss`).
    Positions count real tokens only, as when drafting."""
    import torch

    width = max(len(e.input_ids) for e in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, e in enumerate(batch):
        n = len(e.input_ids)
        ids[row, width - n :] = torch.tensor(e.input_ids)
        labels[row, width - n :] = torch.tensor(e.labels)
        mask[row, width - n :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    keep = max(len(e.labels) - e.prompt_tokens for e in batch)
    return {"input_ids": ids, "attention_mask": mask, "position_ids": positions}, labels, keep


def _target_loss(model: Any, batch: list[Encoded], pad_id: int) -> Any:
    """Mean cross-entropy over the call tokens, the output layer applied to the target columns
    only: with a 262k vocabulary (Gemma 3) the full logits would cost more than the body."""
    import torch

    inputs, labels, keep = _collate(batch, pad_id)
    logits = model(**inputs, logits_to_keep=keep + 1).logits  # [B, keep + 1, V]
    predicted = logits[:, :-1].float()  # column t predicts the token at t + 1
    return torch.nn.functional.cross_entropy(
        predicted.reshape(-1, predicted.shape[-1]), labels[:, -keep:].reshape(-1), ignore_index=IGNORE
    )


def _lora(model: Any, rank: int, alpha: float, dropout: float) -> Any:
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as exc:
        raise ConfigError("tuning needs peft: pip install 'spectool[tune]'") from exc
    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
    targets = [t for t in LORA_TARGETS if t in names]
    if not targets:
        raise ConfigError(f"no LoRA target layers ({', '.join(LORA_TARGETS)}) in this model")
    config = LoraConfig(
        r=rank,
        lora_alpha=alpha,  # type: ignore[arg-type]  # peft accepts a float scale
        lora_dropout=dropout,
        target_modules=targets,
        task_type="CAUSAL_LM",
    )
    with quiet_peft_wrap():
        return get_peft_model(model, config)


@contextlib.contextmanager
def _output_layer_in_fp32(model: Any) -> Iterator[None]:
    """Run the output layer outside bf16 autocast while training.

    CPU bf16 matmuls with a long inner dimension fall back to a slow kernel: the output
    layer's backward (gradient [N, vocab] @ weight [vocab, hidden]) took 67 s in bf16 and
    0.37 s in fp32 for N = 256 over SmolLM2's 49k vocabulary on the 2-core reference machine;
    Gemma 3's 262k vocabulary stalled a step for minutes. The layer is small beside the body,
    so fp32 costs little elsewhere."""
    import torch

    head = model.get_output_embeddings()
    plain = head.forward

    def forward(hidden: Any) -> Any:
        with torch.autocast(hidden.device.type, enabled=False):
            return plain(hidden.float())

    head.forward = forward
    try:
        yield
    finally:
        del head.forward  # the class's forward again: the tuned model leaves as it came


def tune(
    model: Any,
    tokenizer: Any,
    examples: Iterable[TraceExample],
    *,
    epochs: float = 1.0,
    rank: int = 16,
    alpha: float | None = None,
    lr: float = 5e-4,
    batch_size: int = 4,
    max_tokens: int = 768,
    seed: int = 0,
    log_every: int = 10,
    dropout: float = 0.0,
    bf16: bool = False,
    max_seconds: float | None = None,
    out=sys.stderr,
) -> tuple[Any, dict[str, Any]]:
    """LoRA-tune ``model`` on ``examples`` (any iterable: consumed once, one at a time);
    returns the peft model and a training report."""
    import torch

    torch.manual_seed(seed)
    rng = random.Random(seed)
    encoded, dropped = encode_fitting(tokenizer, examples, max_tokens)
    if not encoded:
        raise ConfigError("no training examples left (empty traces, or all longer than --max-tokens)")
    peft_model = _lora(model, rank, float(alpha if alpha is not None else 2 * rank), dropout)
    peft_model.train()
    params = [p for p in peft_model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    per_epoch = math.ceil(len(encoded) / batch_size)
    total = max(1, round(per_epoch * epochs))
    warmup = max(1, total // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warmup, max(0.0, (total - s) / max(1, total - warmup)))
    )
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    curve: list[dict[str, float]] = []
    start, seen, step, ema = time.perf_counter(), 0, 0, None
    while step < total and not (max_seconds and time.perf_counter() - start > max_seconds):
        for batch in _batches(encoded, batch_size, rng):
            if step >= total or (max_seconds and time.perf_counter() - start > max_seconds):
                break
            # bf16 autocast: ~1.5-2x faster steps on CPUs with AVX512-BF16; weights stay fp32
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16), _output_layer_in_fp32(peft_model):
                loss = _target_loss(peft_model, batch, pad)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            step, seen = step + 1, seen + len(batch)
            value = float(loss.detach())
            ema = value if ema is None else 0.9 * ema + 0.1 * value
            if step % log_every == 0 or step == total or step <= 3:
                elapsed = time.perf_counter() - start
                rate = seen / elapsed
                eta = (total - step) * elapsed / step
                curve.append({"step": step, "loss": round(ema, 4), "elapsed_s": round(elapsed, 1)})
                print(
                    f"step {step}/{total}  loss {ema:.4f}  {rate:.2f} ex/s  eta {eta / 60:.1f} min",
                    file=out,
                    flush=True,
                )
    peft_model.eval()
    tokens = [len(e.input_ids) for e in encoded]
    report = {
        "examples": len(encoded),
        "dropped_too_long": dropped,
        "steps": step,
        "planned_steps": total,
        "examples_seen": seen,
        "epochs": epochs,
        "seconds": round(time.perf_counter() - start, 1),
        "loss_curve": curve,
        "tokens_median": sorted(tokens)[len(tokens) // 2],
        "tokens_max": max(tokens),
        "target_tokens": sum(len(e.labels) - e.prompt_tokens for e in encoded),
    }
    return peft_model, report


def save_adapter(peft_model: Any, out_dir: str | Path, manifest: dict[str, Any]) -> Path:
    """The adapter (fp16 safetensors + adapter_config.json) and ``manifest.json``."""
    import torch
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = {
        k: v.detach().to(torch.float16).contiguous() for k, v in get_peft_model_state_dict(peft_model).items()
    }
    save_file(state, str(out / "adapter_model.safetensors"))
    peft_model.peft_config["default"].save_pretrained(str(out))
    (out / "manifest.json").write_text(
        json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--traces", required=True, help="trace JSONL (spectool drafters traces, or recorded)")
    parser.add_argument("--out", required=True, help="output folder for the adapter + manifest.json")
    parser.add_argument("--model", default="embedded", help="base model (default: the embedded SmolLM2)")
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-examples", type=int, default=None)
    parser.add_argument("--max-per-category", type=int, default=None)
    parser.add_argument("--max-tokens", type=int, default=768, help="drop longer examples")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument(
        "--precision",
        choices=("auto", "bf16", "fp32"),
        default="auto",
        help="compute precision of the forward/backward (weights stay fp32); auto: bf16 where the "
        "CPU computes it natively (AVX-512), else fp32 (an AVX2-only CPU runs bf16 ~20x slower)",
    )
    parser.add_argument("--seed", type=int, default=0)
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

    from ..embedded import load_causal_lm

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
    peft_model, report = tune(
        model,
        tokenizer,
        examples,
        epochs=args.epochs,
        rank=args.rank,
        lr=args.lr,
        batch_size=args.batch_size,
        max_tokens=args.max_tokens,
        seed=args.seed,
        bf16=precision == "bf16",
        max_seconds=args.max_minutes * 60 if args.max_minutes else None,
    )
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


if __name__ == "__main__":
    raise SystemExit(main())
