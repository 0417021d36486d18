"""Tree-forward time per backend, one run, same trees: C kernels vs torch.compile vs eager torch.

    flock /tmp/spectool-bench.lock python -m spectool_bench.backends._forward [--ctx 300]
        [--tokens 1,8,16] [--reps 30] [--threads N] [--out results.json]

The embedded SmolLM2-135M-Instruct in fp32 on the CPU. Each backend runs the same forward
(``LeanLlama``'s maths) on the same inputs: a context of ``--ctx`` cached tokens, then a tree
of Q new tokens (a random tree's ancestor mask and depth positions). Backends:

* ``c``: :class:`~spectool_serving.backends.fused.FusedLlama` (panel GEMMs + one C call per
  forward for every layer's glue), where the kernels build;
* ``compile``: ``torch.compile`` (inductor, weights frozen) of the eager forward, one graph per Q;
* ``eager``: :class:`~spectool_serving.backends.lean.LeanLlama` on ``F.linear``.

Reps are interleaved backend by backend so load from other processes hits all of them alike;
the median per (backend, Q) is printed and written to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any


def _tree_inputs(q: int, ctx: int, seed: int):
    import torch

    from spectool_serving.tree.tree import ancestor_matrix, tree_depths

    rng = random.Random(seed)
    parents = [-1] + [rng.randrange(i) for i in range(1, q)]
    anc = ancestor_matrix(parents)  # [Q, Q] bool
    depth = torch.tensor(tree_depths(parents))
    ids = torch.tensor([[rng.randrange(1000, 20000) for _ in range(q)]])
    pos = (ctx + depth)[None]
    allowed = torch.ones(q, ctx + q, dtype=torch.bool)
    allowed[:, ctx:] = anc
    mask = torch.zeros(1, 1, q, ctx + q).masked_fill(~allowed, torch.finfo(torch.float32).min)
    return ids, pos, mask


def _crop(cache, ctx: int) -> None:
    """Back to the ``ctx`` prefilled slots, so every timed forward sees the same cache."""
    for layer in cache.layers:
        layer.keys, layer.values = layer.keys[:, :, :ctx], layer.values[:, :, :ctx]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ctx", type=int, default=300)
    p.add_argument("--tokens", default="1,8,16")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)

    import torch
    from transformers import DynamicCache

    from spectool.embedded import load_causal_lm
    from spectool_serving.backends import kernels
    from spectool_serving.backends.fastpath import linear_kernels
    from spectool_serving.backends.fused import FusedLlama, fusable
    from spectool_serving.backends.lean import LeanLlama

    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model, _tok = load_causal_lm(dtype="float32")
    model.eval()
    eager = LeanLlama(model, linear_kernels(model, packed=False))
    backends: dict[str, Any] = {"eager": eager}  # name -> a forward (module or compiled function)
    if kernels.available() and fusable(model):
        backends["c"] = FusedLlama(model, LeanLlama(model, linear_kernels(model, packed=False)))
    import torch._inductor.config as inductor_config

    inductor_config.freezing = True
    backends["compile"] = torch.compile(eager.__call__, dynamic=False)

    ctx = a.ctx
    prompt = torch.randint(1000, 20000, (1, ctx))
    widths = [int(x) for x in a.tokens.split(",")]
    caches = {}
    with torch.inference_mode():
        for name in backends:
            cache = DynamicCache()
            pmask = torch.zeros(1, 1, ctx, ctx).masked_fill(
                ~torch.ones(ctx, ctx, dtype=torch.bool).tril(), torch.finfo(torch.float32).min
            )
            eager(prompt, torch.arange(ctx)[None], pmask, cache, 1)
            caches[name] = cache
        inputs = {q: _tree_inputs(q, ctx, seed=q) for q in widths}
        # same outputs first: every backend against eager on every tree
        ref = {}
        for name, fwd in backends.items():
            for q, (ids, pos, mask) in inputs.items():
                t = time.perf_counter()
                out = fwd(ids, pos, mask, caches[name])
                _crop(caches[name], ctx)
                if name == "compile":
                    print(f"compile Q={q}: first call {time.perf_counter() - t:.1f} s", file=sys.stderr)
                if name == "eager":
                    ref[q] = out
                else:
                    diff = (out - ref[q]).abs().max().item()
                    print(f"{name} Q={q}: max |logit diff| vs eager {diff:.2e}", file=sys.stderr)
        times: dict[str, dict[int, list[float]]] = {n: {q: [] for q in widths} for n in backends}
        for _ in range(a.reps):
            for q, (ids, pos, mask) in inputs.items():
                for name, fwd in backends.items():
                    t = time.perf_counter()
                    fwd(ids, pos, mask, caches[name])
                    times[name][q].append(time.perf_counter() - t)
                    _crop(caches[name], ctx)
    table = {n: {q: statistics.median(v) * 1e3 for q, v in per.items()} for n, per in times.items()}
    print(
        f"tree forward, SmolLM2-135M fp32, ctx {ctx}, median of {a.reps} (ms); "
        f"threads {torch.get_num_threads()}"
    )
    print("backend  " + "  ".join(f"Q={q:>3}" for q in widths))
    for name, row in table.items():
        print(f"{name:8} " + "  ".join(f"{row[q]:6.1f}" for q in widths))
    if a.out:
        a.out.write_text(json.dumps({"ctx": ctx, "reps": a.reps, "ms": table}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
