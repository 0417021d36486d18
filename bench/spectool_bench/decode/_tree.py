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
import math
import time
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from spectool_serving.tree.calibrate import MODEL_NAME, cost_table, device_name
from spectool_serving.tree.cast import CostTable
from spectool_serving.tree.policy import DecodingPolicy

from ._calibrate import Calibration, calibrate, load_calibration
from ._loop import Run, bench_engine, run_engine

__all__ = ["load_calibration_prompts", "load_prompts", "run_bench"]

TREE_POLICIES = ("unispec", "cast", "both")


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


def _geomean(xs: list[float]) -> float:
    xs = [x for x in xs if x and x > 0]
    return float(math.exp(np.mean(np.log(xs)))) if xs else float("nan")


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
    dtype: str, items: list[dict], n: int, batches: list[int], log: Any, refresh: bool, gate: bool = True
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
        ref, secs = _hf(model, tok, [ids], n)
        single_refs.append(ref[0])
        rec = {
            "id": item["id"],
            "category": item["category"],
            "batch": 1,
            "methods": {"ar": _record(ref, secs, ref)},
        }
        for look in (3, 10):
            outs, secs = _hf(model, tok, [ids], n, look)
            rec["methods"][f"pl{look}"] = _record(outs, secs, ref)
        _run_engine(rec, engine, [ids], n, ref)
        rows.append(rec)
        log(
            f"[{dtype}] {item['id']}: "
            + "  ".join(f"{k} {v['tok_s']:.1f}" for k, v in rec["methods"].items())
        )
    for bsz in [b for b in batches if b > 1]:
        rows += _run_batched(engine, items, prompts, single_refs, n, bsz, log, dtype)
    return {
        "g_star": cal.g_star,
        "calibration": cal.__dict__,
        "rows": rows,
        "cost_table": json.loads(table.to_json()),
        "summary": _summarize(rows),
    }


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
    rec: dict, engine: _EngineArgs, prompts: list[list[int]], n: int, refs: list[list[int]]
) -> None:
    """``engine_ar`` and the tree policies, all through the serving engine, into ``rec``."""
    res = engine.run(prompts, n)
    # Every method's decode phase is its time after engine_ar's prefill of the same prompt, so
    # what a tree policy adds to its own prefill (the store's warm-up rows) counts against it.
    prefill_s = res.prefill_s
    rec["methods"]["engine_ar"] = _record(res.outputs, res.total_s, refs, **_phase(res, prefill_s))
    for pol in TREE_POLICIES:
        res = engine.run(prompts, n, pol)
        rec["methods"][pol] = _record(
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


def _run_batched(engine, items, prompts, single_refs, n, bsz, log, dtype) -> list[dict]:
    """Batches of ``bsz`` prompts; "identical" compares with each prompt's batch-1 output
    (HF prompt lookup has no batched mode, so it is absent here)."""
    rows = []
    model, tok = engine.model, engine.tok
    for start in range(0, len(prompts) - bsz + 1, bsz):
        group = prompts[start : start + bsz]
        refs = single_refs[start : start + bsz]
        outs, secs = _hf(model, tok, group, n)
        rec = {
            "id": "+".join(i["id"] for i in items[start : start + bsz]),
            "category": "mixed",
            "batch": bsz,
            "methods": {"ar": _record(outs, secs, refs)},
        }
        _run_engine(rec, engine, group, n, refs)
        rows.append(rec)
        log(
            f"[{dtype}] batch {bsz} {rec['id']}: "
            + "  ".join(f"{k} {v['tok_s']:.1f}" for k, v in rec["methods"].items())
        )
    return rows


def _per_category(
    rows: list[dict], cats: list[str], methods: list[str], key: str, base: str
) -> dict[str, dict[str, float]]:
    """method -> category -> geomean over the category's rows of ``key`` against ``base``'s."""
    return {
        m: {
            c: _geomean([r["methods"][m][key] / r["methods"][base][key] for r in rows if r["category"] == c])
            for c in cats
        }
        for m in methods
    }


def _summarize(rows: list[dict]) -> dict:
    """Per batch size: geometric mean over categories of per-category mean speedups."""
    out: dict[str, Any] = {}
    for bsz in sorted({r["batch"] for r in rows}):
        sub = [r for r in rows if r["batch"] == bsz]
        methods = list(sub[0]["methods"])
        cats = sorted({r["category"] for r in sub})
        per_cat = _per_category(sub, cats, methods, "tok_s", "ar")
        vs_ar = {m: _geomean(list(per_cat[m].values())) for m in methods}
        phased = [m for m in methods if "decode_tok_s" in sub[0]["methods"][m]]
        if "engine_ar" not in phased:
            phased = []  # the phase is a ratio against engine_ar's
        phase_cat = _per_category(sub, cats, phased, "decode_tok_s", "engine_ar")
        pls = [m for m in ("pl3", "pl10") if m in vs_ar]
        best_pl = max(pls, key=lambda m: vs_ar[m]) if pls else None
        out[f"batch{bsz}"] = {
            "speedup_vs_ar": vs_ar,
            "per_category": per_cat,
            "best_prompt_lookup": best_pl,
            "speedup_vs_best_pl": {m: vs_ar[m] / vs_ar[best_pl] for m in methods} if best_pl else None,
            "speedup_vs_engine_ar": (
                {m: vs_ar[m] / vs_ar["engine_ar"] for m in methods} if "engine_ar" in vs_ar else None
            ),
            # speculation alone in the decode phase (prefill excluded on both sides)
            "decode_phase_vs_engine_ar": {m: _geomean(list(v.values())) for m, v in phase_cat.items()},
            "decode_phase_per_category": phase_cat,
            "identical_rate": {
                m: float(np.mean([r["methods"][m]["identical"] for r in sub])) for m in methods
            },
            "tau": {
                m: float(np.mean([r["methods"][m]["tau"] for r in sub]))
                for m in methods
                if "tau" in sub[0]["methods"][m]
            },
            "draft": {
                m: float(np.mean([r["methods"][m]["draft"] for r in sub]))
                for m in methods
                if "draft" in sub[0]["methods"][m]
            },
        }
    return out


def _plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for dtype, res in results["dtypes"].items():
        cal = res["calibration"]
        s1 = cal["s"][0]
        speed = [t * s1 / s for t, s in zip(cal["tau"], cal["s"])]
        (line,) = ax.plot(cal["gs"], speed, marker="o", label=f"{dtype}: τ(g)·s(1)/s(g)")
        gi = cal["gs"].index(cal["g_star"]) if cal["g_star"] in cal["gs"] else None
        ax.axvline(cal["g_star"], color=line.get_color(), ls="--", lw=1)
        if gi is not None:
            ax.plot([cal["g_star"]], [speed[gi]], marker="*", ms=14, color=line.get_color())
        b1 = res["summary"]["batch1"]
        # the curve is relative to a one-token forward of the same engine: so are the points
        rel = b1.get("speedup_vs_engine_ar") or b1["speedup_vs_ar"]
        for policy, marker in (("unispec", "s"), ("both", "D")):
            ax.plot(
                [b1["draft"][policy]],
                [rel[policy]],
                marker=marker,
                color=line.get_color(),
                ls="none",
                label=f"{dtype}: measured {policy} (bench)",
            )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("draft size g (tokens verified per step)")
    ax.set_ylabel("speedup vs one-token decoding, same forward")
    ax.set_title("SmolLM2-135M tree decoding (g* dashed)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


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
) -> dict:
    import torch

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
        "dtypes": {},
    }
    for dtype in dtypes:
        results["dtypes"][dtype] = _run_dtype(dtype, items, n, list(batches), log, refresh, gate)
        (out / "results.json").write_text(json.dumps(results, indent=1))
    _plot(results, out / "speedup_vs_draft.png")
    return results
