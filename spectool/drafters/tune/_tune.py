"""The tuning recipe: LoRA on the local drafter, loss on the call tokens of each example.

Examples come encoded from :mod:`._tune_data` (prompt tokens labelled -100, so the loss covers
the call tokens only). Batches group examples of similar length so little padding is computed.
:func:`save_adapter` writes a peft adapter (fp16 weights) and its ``manifest.json``; the command
is :mod:`spectool.drafters.tune`. torch/transformers/peft load lazily.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..._quiet import quiet_peft_wrap
from ..._traces import TraceExample
from ...errors import ConfigError
from ._tune_data import IGNORE, Encoded, encode_example, encode_fitting, training_examples

__all__ = [
    "IGNORE",
    "Encoded",
    "TuneOptions",
    "encode_example",
    "encode_fitting",
    "save_adapter",
    "training_examples",
    "tune",
]

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


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


@dataclass(frozen=True)
class TuneOptions:
    """How :func:`tune` trains. The fields with a ``help`` are flags of ``spectool drafters
    tune`` of the same name (``batch_size``: ``--batch-size``)."""

    epochs: float = field(default=1.0, metadata={"help": "passes over the examples (2.5: two and a half)"})
    rank: int = field(default=16, metadata={"help": "LoRA rank"})
    lr: float = field(default=5e-4, metadata={"help": "peak learning rate (linear warm-up and decay)"})
    batch_size: int = field(default=4, metadata={"help": "examples per step"})
    max_tokens: int = field(default=768, metadata={"help": "drop longer examples"})
    seed: int = field(default=0, metadata={"help": "seed of the example choice, batches and LoRA init"})
    #: LoRA alpha (None: twice the rank)
    alpha: float | None = None
    dropout: float = 0.0
    #: steps between two loss lines (the first three are always written)
    log_every: int = 10
    #: bf16 autocast of the forward and backward (weights stay fp32; the command: --precision)
    bf16: bool = False
    #: stop after this much training time (the command: --max-minutes)
    max_seconds: float | None = None


def tune(
    model: Any,
    tokenizer: Any,
    examples: Iterable[TraceExample],
    options: TuneOptions = TuneOptions(),
    *,
    out: Any = sys.stderr,
) -> tuple[Any, dict[str, Any]]:
    """LoRA-tune ``model`` on ``examples`` (any iterable: consumed once, one at a time);
    returns the peft model and a training report."""
    import torch

    o = options
    epochs, batch_size, max_seconds = o.epochs, o.batch_size, o.max_seconds
    torch.manual_seed(o.seed)
    rng = random.Random(o.seed)
    encoded, dropped = encode_fitting(tokenizer, examples, o.max_tokens)
    if not encoded:
        raise ConfigError("no training examples left (empty traces, or all longer than --max-tokens)")
    peft_model = _lora(model, o.rank, float(o.alpha if o.alpha is not None else 2 * o.rank), o.dropout)
    peft_model.train()
    params = [p for p in peft_model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=o.lr, weight_decay=0.0)
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
            with (
                torch.autocast("cpu", dtype=torch.bfloat16, enabled=o.bf16),
                _output_layer_in_fp32(peft_model),
            ):
                loss = _target_loss(peft_model, batch, pad)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            step, seen = step + 1, seen + len(batch)
            value = float(loss.detach())
            ema = value if ema is None else 0.9 * ema + 0.1 * value
            if step % o.log_every == 0 or step == total or step <= 3:
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
