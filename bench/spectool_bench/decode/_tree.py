"""decode-bench: autoregressive vs HF prompt lookup vs UniSpec / CAST / both, one run.

Every method decodes the same prompts in the same process, interleaved prompt by prompt, so
the ratios are side by side even on a shared, noisy CPU. Speed = generated tokens per second
including prefill. The reference output is HF ``generate`` greedy at batch 1 (``ar``).

The tree policies run where users run them: the serving engine with a
:class:`~spectool_serving.tree.policy.DecodingPolicy` (:mod:`._loop`), as ``spectool serve
--decoding`` builds it. Two autoregressive baselines, because the engine runs spectool's own
forward (:mod:`spectool_serving.backends.lean`), not transformers': ``ar`` is HF ``generate``
— what prompt lookup is measured against too — and ``engine_ar`` is the same engine with no
policy (plain one-token decoding). ``speedup_vs_ar`` includes whatever the forward itself
gains over transformers; ``speedup_vs_engine_ar`` is the speculation alone.
"""

from __future__ import annotations

import json
import time
from importlib import resources
from pathlib import Path
from typing import Any

from spectool_serving.tree.calibrate import MODEL_NAME, cost_table, device_name
from spectool_serving.tree.cast import CostTable
from spectool_serving.tree.policy import DecodingPolicy

from ._calibrate import Calibration, calibrate, load_calibration
from ._loop import Run, bench_engine, run_engine
from ._summary import TREE_POLICIES, merge_repeats, plot, summarize

__all__ = ["load_calibration_prompts", "load_prompts", "run_bench"]


def _prompt_data() -> dict[str, Any]:
    return json.loads(
        resources.files("spectool_bench.decode").joinpath("prompts.json").read_text(encoding="utf-8")
    )


def load_calibration_prompts() -> list[dict[str, Any]]:
    """The held-out calibration prompts: one per category, none of them benchmarked."""
    return _prompt_data()["calibration"]


def load_prompts(quick: bool = False, ids: list[str] | None = None) -> list[dict[str, Any]]:
    """The shipped prompt set; ``quick`` keeps the first item of each category, ``ids`` only
    the named items (an unknown id is an error, not an empty run)."""
    items = _prompt_data()["items"]
    if ids:
        known = {i["id"] for i in items}
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise ValueError(f"unknown prompt id(s) {unknown}; known: {sorted(known)}")
        return [i for i in items if i["id"] in ids]
    if quick:
        first: dict[str, dict] = {}  # the first item of each category, in their order
        items = [first.setdefault(i["category"], i) for i in items if i["category"] not in first]
    return items


def get_calibration(
    model: Any, tok: Any, dtype: str, table: CostTable, batch: int = 1, refresh: bool = False
) -> Calibration:
    cal = None if refresh else load_calibration(device_name(), MODEL_NAME, dtype, batch)
    if cal is None:
        # every category, held out from the bench: τ(g) saturates early on fresh text, and
        # copy-heavy prompts alone (as before v3) pushed g* past where most prompts gain
        prompts = [_ids(tok, i["messages"]) for i in load_calibration_prompts()]
        cal = calibrate(model, tok, _fmt(tok), MODEL_NAME, prompts, table, batch=batch, max_new_tokens=24)
    return cal


def _fmt(tok: Any) -> Any:
    from spectool_serving.toolcalls import detect_format

    return detect_format(getattr(tok, "chat_template", None), "")


def _ids(tok: Any, messages: list[dict[str, str]]) -> list[int]:
    out = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)
    return list(out["input_ids"])


def _eos(model: Any) -> set[int]:
    eos = model.generation_config.eos_token_id
    return set(eos) if isinstance(eos, (list, tuple)) else ({eos} if eos is not None else set())


def _hf(model: Any, tok: Any, prompts: list[list[int]], n: int, lookup: int | None = None):
    import torch

    width = max(len(p) for p in prompts)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    kw = {"prompt_lookup_num_tokens": lookup} if lookup else {}
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(
            ids, attention_mask=mask, max_new_tokens=n, do_sample=False, pad_token_id=pad, **kw
        )
    secs = time.perf_counter() - t0
    eos = _eos(model)
    outs = []
    for row in out[:, width:].tolist():
        cut = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
        outs.append(row[:cut])
    return outs, secs


def _record(outs: list[list[int]], secs: float, refs: list[list[int]], **extra: Any) -> dict:
    toks = sum(len(o) for o in outs)
    return {
        "tokens": toks,
        "seconds": secs,
        "tok_s": toks / secs,
        "identical": all(o == r for o, r in zip(outs, refs)),
        **extra,
    }


def _run_dtype(
    dtype: str,
    items: list[dict],
    n: int,
    batches: list[int],
    log: Any,
    refresh: bool,
    gate: bool = True,
    repeat: int = 1,
) -> dict:
    from spectool.embedded import load_causal_lm

    model, tok = load_causal_lm(dtype=dtype)
    table = cost_table(model, dtype, batches, refresh)
    cal = get_calibration(model, tok, dtype, table, refresh=refresh)
    log(
        f"[{dtype}] g* = {cal.g_star} ({cal.method}); tau(g) = "
        + ", ".join(f"{g}:{t:.2f}" for g, t in zip(cal.gs, cal.tau))
    )
    prompts = [_ids(tok, i["messages"]) for i in items]
    engine = _EngineArgs(model, tok, table, gate)
    rows: list[dict] = []
    single_refs: list[list[int]] = []
    for item, ids in zip(items, prompts):
        runs = [_run_single(model, tok, engine, ids, n) for _ in range(repeat)]
        single_refs.append(runs[0][1])
        reps = [methods for methods, _ in runs]
        rec = {"id": item["id"], "category": item["category"], "batch": 1, "methods": merge_repeats(reps)}
        rows.append(rec)
        log(
            f"[{dtype}] {item['id']}: "
            + "  ".join(f"{k} {v['tok_s']:.1f}" for k, v in rec["methods"].items())
        )
    for bsz in [b for b in batches if b > 1]:
        rows += _run_batched(engine, items, prompts, single_refs, n, bsz, log, dtype, repeat)
    return {
        "g_star": cal.g_star,
        "calibration": cal.__dict__,
        "rows": rows,
        "cost_table": json.loads(table.to_json()),
        "summary": summarize(rows),
    }


def _run_single(
    model: Any, tok: Any, engine: _EngineArgs, ids: list[int], n: int
) -> tuple[dict[str, dict], list[int]]:
    """One repetition of every method on one prompt, interleaved; HF greedy's output (returned
    too) is the reference."""
    ref, secs = _hf(model, tok, [ids], n)
    methods = {"ar": _record(ref, secs, ref)}
    for look in (3, 10):
        outs, secs = _hf(model, tok, [ids], n, look)
        methods[f"pl{look}"] = _record(outs, secs, ref)
    _run_engine(methods, engine, [ids], n, ref)
    return methods, ref[0]


class _EngineArgs:
    """What every engine run of one dtype shares: one engine over the model (its tokenizer and
    prompt format), the cost table (CAST) and whether the policies' draft gate is on."""

    def __init__(self, model: Any, tok: Any, table: CostTable, gate: bool = True) -> None:
        self.model, self.tok, self.table, self.gate = model, tok, table, gate
        self.engine = bench_engine(model, tok, _fmt(tok))

    def run(self, prompts: list[list[int]], n: int, mode: str = "off") -> Run:
        policy = None
        if mode != "off":  # the policy `spectool serve --decoding MODE` builds
            vocab = self.model.config.vocab_size
            policy = DecodingPolicy(mode, vocab, table=self.table, gate=self.gate)
        return run_engine(self.engine, prompts, n, policy)


def _run_engine(
    methods: dict, engine: _EngineArgs, prompts: list[list[int]], n: int, refs: list[list[int]]
) -> None:
    """``engine_ar`` and the tree policies, all through the serving engine, into ``methods``."""
    res = engine.run(prompts, n)
    # Every method's decode phase is its time after engine_ar's prefill of the same prompt, so
    # what a tree policy adds to its own prefill (the store's warm-up rows) counts against it.
    prefill_s = res.prefill_s
    methods["engine_ar"] = _record(res.outputs, res.total_s, refs, **_phase(res, prefill_s))
    for pol in TREE_POLICIES:
        res = engine.run(prompts, n, pol)
        methods[pol] = _record(
            res.outputs,
            res.total_s,
            refs,
            **_phase(res, prefill_s),
            tau=res.tau,
            draft=res.mean_draft,
            verify_s=res.stats.verify_s,
            plain_steps=res.stats.plain_steps,  # steps the draft gate decoded without drafting
            steps=res.steps,
        )


def _phase(res: Run, prefill_s: float) -> dict[str, float]:
    """The decode phase, where speculation acts: tokens per second after the prompt's forward.
    With long prompts and short answers (agentic) the prefill is most of a request, and a
    whole-request ratio then measures the prefill as much as the speculation."""
    decode_s = max(res.total_s - prefill_s, 1e-9)
    return {
        "prefill_s": prefill_s,
        "decode_s": decode_s,
        "decode_tok_s": sum(len(o) for o in res.outputs) / decode_s,
    }


def _run_batched(engine, items, prompts, single_refs, n, bsz, log, dtype, repeat=1) -> list[dict]:
    """Batches of ``bsz`` prompts; "identical" compares with each prompt's batch-1 output
    (HF prompt lookup has no batched mode, so it is absent here)."""
    rows = []
    model, tok = engine.model, engine.tok
    for start in range(0, len(prompts) - bsz + 1, bsz):
        group = prompts[start : start + bsz]
        refs = single_refs[start : start + bsz]
        reps = []
        for _ in range(repeat):
            outs, secs = _hf(model, tok, group, n)
            methods = {"ar": _record(outs, secs, refs)}
            _run_engine(methods, engine, group, n, refs)
            reps.append(methods)
        rec = {
            "id": "+".join(i["id"] for i in items[start : start + bsz]),
            "category": "mixed",
            "batch": bsz,
            "methods": merge_repeats(reps),
        }
        rows.append(rec)
        log(
            f"[{dtype}] batch {bsz} {rec['id']}: "
            + "  ".join(f"{k} {v['tok_s']:.1f}" for k, v in rec["methods"].items())
        )
    return rows


def run_bench(
    out: Path,
    *,
    quick: bool = False,
    dtypes: tuple[str, ...] = ("float32", "bfloat16"),
    batches: tuple[int, ...] = (1, 4),
    max_new_tokens: int | None = None,
    threads: int | None = None,
    refresh: bool = False,
    log: Any = print,
    prompt_ids: list[str] | None = None,
    gate: bool = True,
    repeat: int = 1,
) -> dict:
    """``repeat``: runs of every method per prompt (interleaved); rows keep the median run."""
    import torch

    if repeat < 1:
        raise ValueError("repeat must be >= 1")

    if threads:
        torch.set_num_threads(threads)
    items = load_prompts(quick, prompt_ids)
    n = max_new_tokens or (48 if quick else 128)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "model": MODEL_NAME,
        "device": device_name(),
        "quick": quick,
        "max_new_tokens": n,
        "threads": torch.get_num_threads(),
        "prompts": [i["id"] for i in items],
        "gate": gate,
        "repeat": repeat,
        "dtypes": {},
    }
    for dtype in dtypes:
        results["dtypes"][dtype] = _run_dtype(dtype, items, n, list(batches), log, refresh, gate, repeat)
        (out / "results.json").write_text(json.dumps(results, indent=1))
    plot(results, out / "speedup_vs_draft.png")
    return results
