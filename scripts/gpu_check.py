"""The engine on a GPU, with randomly initialised models (no weights travel): run by
``scripts/gpu-check.sh``.

Checks, each printed as one JSON line and gathered in ``--out``:

1. ``greedy``: the engine's greedy outputs (batched, every prompt at once) equal HF
   ``generate``'s (one prompt at a time), fp32 and bf16. Random weights give flat logits, so
   a divergence where the reference's top-2 margin is under ``TIE`` (in bf16: or under two
   units in the last place of the top logit) is reported as a tie, not counted as a
   mismatch; where they part and the margin there are printed either way.
2. ``throughput``: batched decode tok/s of the engine at 1/8/32 streams against HF
   ``generate`` on the same batch (left-padded), both warmed up first. ``--profile`` adds
   torch's profiler tables of the engine at one stream and ``sdpa``: one decode attention call's cost
   with the engine's additive mask and without one.
3. ``tree``: tree decoding (speculation alone) through the engine: outputs with a
   ``unispec`` decoding policy equal the same engine's plain decoding, with τ and the speedup.
4. ``o2o3``: a forced call written under the grammar; the same request again with that call
   cached: O2 drafts accepted, O3 hit, and the transcript equal to the client-run loop's.
5. ``floor``: one decode step of transformers' model of the same shape over a ``StaticCache``,
   captured once as a CUDA graph and replayed (ms/step at 1/8/32 rows): the reference.
6. ``step``: the engine's decode phase with CUDA graphs on and off at 1/8/32 streams: ms per
   step (prefills timed apart), tok/s, graphs captured and replayed, any fallback's reason.
7. ``drafter``: a model of Qwen2-0.5B's shape served by the engine, asked as
   ``EndpointDrafter`` asks (``n`` = λ choices, a required call, ~600 prompt tokens): seconds
   for a 40-token draft at λ 1 and 3. (:mod:`gpu_speed` holds 5-7.)

Every engine here runs with CUDA graphs on (``Runner(graphs="auto")``; on the CPU of a dry run
``"static"``, the captured step's code uncaptured), so checks 1-4 hold with graphs on; their
rows say how many steps replayed a graph (``graphs``).

Needs torch and transformers; the engine also imports spectool's core (pydantic, anyio) and
the call grammar needs xgrammar: ``gpu-check.sh --bundle`` gathers their wheels and the
tokenizer here so they travel. ``--dry-run``: the same code on the CPU with tiny shapes.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

TIE = 0.02  # logit margin under which a greedy step of a random model is a coin flip
_SHAPE_KEYS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "rope_theta",
)
SHAPES = {
    name: dict(zip(_SHAPE_KEYS, values))
    for name, values in {
        "smollm2-135m": (576, 1536, 30, 9, 3, 100000.0),  # SmolLM2-135M's shape
        # Llama 3.2 1B's shape (its vocabulary replaced by the bundled tokenizer's)
        "llama-1b": (2048, 8192, 16, 32, 8, 500000.0),
        "tiny": (64, 128, 2, 4, 2, 10000.0),  # --dry-run
    }.items()
}
PROMPTS = [
    "Summarize: the council approved a new library with three floors and a cafe.",
    "Translate to French: the weather is nice today.",
    "Write a haiku about the sea.",
    "List three prime numbers.",
]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def _model(shape: str, vocab: int, dtype: torch.dtype, device: str, seed: int = 0) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab, max_position_embeddings=4096, tie_word_embeddings=True, **SHAPES[shape]
    )
    cfg._attn_implementation = "sdpa"
    with torch.device(device):  # initialised where it runs: a 1B model's init is slow on a CPU
        model = LlamaForCausalLM(cfg)
    return model.to(dtype=dtype).eval()


def _tokenizer(folder: Path) -> tuple[Any, Any]:
    from transformers import AutoTokenizer

    from spectool_serving.toolcalls import detect_format

    tok = AutoTokenizer.from_pretrained(str(folder))
    return tok, detect_format(getattr(tok, "chat_template", None), "")


def _engine(
    model: Any,
    tok: Any,
    fmt: Any,
    device: str,
    batch: int = 32,
    decoding: Any = None,
    widths: tuple[int, ...] = (1,),
) -> Any:
    from spectool_serving.engine import Engine
    from spectool_serving.runner import Runner
    from spectool_serving.scheduler import Scheduler
    from spectool_serving.store import ToolOutputStore

    sched = Scheduler(max_batch=batch, max_slots=1 << 20, prefills_per_step=batch)
    graphs = "auto" if device.startswith("cuda") else "static"  # the captured step's code either way
    return Engine(
        Runner(model, device, graphs=graphs, graph_widths=widths),
        tok,
        fmt,
        store=ToolOutputStore(),
        scheduler=sched,
        decoding=decoding,
    )


def _graphs(*engines: Any) -> dict:
    """How the engines' decode steps ran: replayed from static buffers, or eagerly (prefills
    are not steps), and why capture was switched off, if it was."""
    stats = [e.runner.decode_graphs().stats for e in engines if e.runner.decode_graphs() is not None]
    return dict(
        graphs=dict(
            replayed=sum(s.replays for s in stats),
            eager=sum(s.eager for s in stats),
            fallback=next((s.fallback for s in stats if s.fallback), None) if stats else "no graphs",
        )
    )


def _sequence(
    engine: Any, messages: list, max_tokens: int, *, tools: list | None = None, rid: str = ""
) -> Any:
    """What ``requests.build_sequences`` builds (that module validates with pydantic)."""
    from spectool_serving.prompts import encode, encode_prompt
    from spectool_serving.sampling import SamplingParams
    from spectool_serving.sequence import Sequence

    fmt, choice = engine.fmt, ("required" if tools else None)
    forced = fmt.call_start if tools else ""
    ids = encode_prompt(engine.tokenizer, fmt, messages, tools or [], forced_prefix=forced, memo=engine.memo)
    events: list = []  # the engine's typed events (spectool_serving.sequence)
    seq = Sequence(
        rid or f"chatcmpl-{time.monotonic_ns()}",
        "",
        list(ids),
        SamplingParams(0.0, 1.0, max_tokens),
        fmt,
        tools or [],
        choice,
        encode(engine.tokenizer, forced),
        emit=events.append,
    )
    seq.events = events  # type: ignore[attr-defined]
    return seq


def _run(engine: Any, seqs: list) -> list[list[int]]:
    """Run sequences together; returns each one's generated token ids."""
    starts = [len(s.tokens) for s in seqs]
    for s in seqs:
        engine.add(s)
    engine.run_until_idle()
    failures = [e.message for s in seqs for e in getattr(s, "events", []) if e.type == "error"]
    if failures:  # an engine failure ends a sequence early: say so, not "mismatch"
        raise RuntimeError(f"{len(failures)} sequence(s) failed: {failures[0]}")
    return [s.tokens[n:] for s, n in zip(seqs, starts)]


def _hf_greedy(model: Any, ids: list[int], n: int, eos: int) -> tuple[list[int], list[float], list[float]]:
    """HF generate, greedy, one prompt; returns tokens, each step's top-2 logit margin, and
    each step's tie threshold: ``TIE``, or in a 16-bit dtype up to two units in the last place of
    the top logit, whichever is larger — a batched GEMM sums in another order than a
    one-row one, so in bf16 two logits one or two ULPs apart are a coin flip between them."""
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids], device=model.device),
            max_new_tokens=n,
            do_sample=False,
            eos_token_id=eos,
            pad_token_id=eos,
            output_scores=True,
            return_dict_in_generate=True,
        )
    dtype = next(model.parameters()).dtype
    margins, ties = [], []
    for s in out.scores:
        top = s[0].float().topk(2).values
        margins.append(float(top.diff().abs()))
        ties.append(max(TIE, 2 * ulp(float(top[0]), dtype)))
    return out.sequences[0, len(ids) :].tolist(), margins, ties


def ulp(x: float, dtype: torch.dtype) -> float:
    """The spacing of ``dtype``'s values at ``x`` (0 for fp32 and wider: below any margin)."""
    if dtype not in (torch.bfloat16, torch.float16):
        return 0.0
    mantissa = 7 if dtype == torch.bfloat16 else 10
    return 2.0 ** (math.floor(math.log2(max(abs(x), 1e-30))) - mantissa)


def _parting(out: list[int], ref: list[int]) -> int | None:
    """The first step where the outputs differ (the shorter one's length if one stops
    early), or None when they are equal."""
    k = next((i for i, (a, b) in enumerate(zip(out, ref)) if a != b), None)
    return k if k is not None or len(out) == len(ref) else min(len(out), len(ref))


def compare(out: list[int], ref: list[int], margins: list[float], ties: list[float] | None = None) -> str:
    """ "same", "tie" (they part where the reference's top two logits are within that step's
    tie threshold, ``TIE`` unless ``ties`` says), or "mismatch"."""
    k = _parting(out, ref)
    if k is None:
        return "same"
    if k >= min(len(out), len(ref)):  # one stopped early: no near-tie explains that
        return "mismatch"
    return "tie" if margins[k] <= (ties[k] if ties else TIE) else "mismatch"


def check_greedy(shape: str, tok: Any, fmt: Any, device: str, n: int) -> list[dict]:
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        model = _model(shape, len(tok), dtype, device)
        engine = _engine(model, tok, fmt, device)
        seqs = [_sequence(engine, [{"role": "user", "content": p}], n) for p in PROMPTS]
        prompts = [list(s.tokens) for s in seqs]
        got = _run(engine, seqs)
        refs = [_hf_greedy(model, ids, n, engine.eos_id) for ids in prompts]
        verdicts = [compare(out, *ref) for out, ref in zip(got, refs)]
        same, ties = verdicts.count("same"), verdicts.count("tie")
        parted = [_parting(out, ref[0]) for out, ref in zip(got, refs)]
        rows.append(
            dict(
                check="greedy",
                shape=shape,
                dtype=str(dtype)[6:],
                prompts=len(prompts),
                identical=same,
                tie_divergences=ties,
                mismatches=len(prompts) - same - ties,
                # per prompt: the step where the outputs part (None: never), and the
                # reference's top-2 margin there (what makes it a tie or a mismatch)
                parted_at=parted,
                margins=[
                    None if k is None or k >= len(r[1]) else round(r[1][k], 4) for k, r in zip(parted, refs)
                ],
                **_graphs(engine),
            )
        )
        del model, engine
    return rows


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _timed(device: str, work: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """(what ``work(*args, **kwargs)`` returns, its seconds), the device drained before and after."""
    _sync(device)
    t0 = time.perf_counter()
    result = work(*args, **kwargs)
    _sync(device)
    return result, time.perf_counter() - t0


def _profiled(device: str, work: Callable[..., Any], *args: Any) -> tuple[Any, float, list[str]]:
    """``_timed`` under torch's profiler (timed with its overhead in): the operators that
    take the host's time and, on cuda, the device's. Returns the tables' lines."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with profile(activities=acts) as prof:
        result, seconds = _timed(device, work, *args)
    avg = prof.key_averages()
    lines = avg.table(sort_by="self_cpu_time_total", row_limit=12).splitlines()
    if device.startswith("cuda"):
        for key in ("self_device_time_total", "self_cuda_time_total"):
            try:
                lines += avg.table(sort_by=key, row_limit=10).splitlines()
                break
            except (AttributeError, KeyError, ValueError):
                continue
    return result, seconds, [ln.rstrip() for ln in lines if ln.strip() and not set(ln) <= {"-", " "}]


def probe_sdpa(shape: str, device: str, dtype: torch.dtype, length: int = 301, reps: int = 200) -> dict:
    """µs per decode-step attention call ([1, Hk, rep, D] queries over a pool view of
    ``length`` slots) with no mask, with the engine's additive mask, and with that mask's
    key axis padded to a multiple of 8 (the memory-efficient kernel's alignment)."""
    import torch.nn.functional as F

    cfg = SHAPES[shape]
    hk, dim = cfg["num_key_value_heads"], cfg["hidden_size"] // cfg["num_attention_heads"]
    rep = cfg["num_attention_heads"] // hk
    q = torch.randn(1, hk, rep, dim, device=device, dtype=dtype)
    pool = torch.randn(1, hk, 512, dim, device=device, dtype=dtype)
    keys = pool[:, :, :length]
    padded = -(-length // 8) * 8
    variants = {
        "none": (keys, None),
        "mask": (keys, torch.zeros(1, 1, rep, length, device=device, dtype=dtype)),
        "mask_aligned": (pool[:, :, :padded], torch.zeros(1, 1, rep, padded, device=device, dtype=dtype)),
    }
    row: dict[str, Any] = dict(check="sdpa", shape=shape, dtype=str(dtype)[6:], slots=length)
    for name, (k, m) in variants.items():
        for _ in range(10):
            F.scaled_dot_product_attention(q, k, k, attn_mask=m)
        _, t = _timed(
            device,
            lambda k=k, m=m: [F.scaled_dot_product_attention(q, k, k, attn_mask=m) for _ in range(reps)],
        )
        row[f"{name}_us"] = round(t / reps * 1e6, 1)
    return row


def check_throughput(
    shape: str, tok: Any, fmt: Any, device: str, n: int, streams: list[int], profile: bool = False
) -> list[dict]:
    rows = []
    model = _model(shape, len(tok), torch.bfloat16 if device.startswith("cuda") else torch.float32, device)
    warm = _engine(model, tok, fmt, device, batch=1)  # CUDA context, cuBLAS handles, allocator
    _run(warm, [_sequence(warm, [{"role": "user", "content": PROMPTS[0]}], 4)])
    with torch.no_grad():
        model.generate(torch.tensor([[1, 2, 3]], device=device), max_new_tokens=4, do_sample=False)
    for b in streams:
        engine = _engine(model, tok, fmt, device, batch=b)
        seqs = [
            _sequence(engine, [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}], n) for i in range(b)
        ]
        prompts = [list(s.tokens) for s in seqs]
        if profile and b == streams[0]:
            outs, t_engine, top = _profiled(device, _run, engine, seqs)
            rows.append(dict(check="profile", shape=shape, streams=b, table=top))
            rows.append(probe_sdpa(shape, device, model.dtype))
        else:
            outs, t_engine = _timed(device, _run, engine, seqs)
        made = sum(len(o) for o in outs)
        width = max(len(p) for p in prompts)
        ids = torch.full((b, width), engine.eos_id, dtype=torch.long)
        mask = torch.zeros(b, width, dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :], mask[i, width - len(p) :] = torch.tensor(p), 1
        with torch.no_grad():
            out, t_hf = _timed(
                device,
                model.generate,
                ids.to(device),
                attention_mask=mask.to(device),
                max_new_tokens=n,
                min_new_tokens=n,
                do_sample=False,
                pad_token_id=engine.eos_id,
            )
        hf_made = b * (out.shape[1] - width)
        rows.append(
            dict(
                check="throughput",
                shape=shape,
                dtype="bf16" if device.startswith("cuda") else "fp32",
                streams=b,
                engine_tok_s=round(made / t_engine, 1),
                hf_tok_s=round(hf_made / t_hf, 1),
                ratio=round((made / t_engine) / (hf_made / t_hf), 3),
                **_graphs(engine),
            )
        )
    return rows


def check_tree(shape: str, tok: Any, fmt: Any, device: str, n: int) -> list[dict]:
    from spectool_serving.tree.policy import DecodingPolicy

    model = _model(shape, len(tok), torch.float32, device)
    rows = []
    for p in PROMPTS[:2]:
        messages = [{"role": "user", "content": p}]
        base = _engine(model, tok, fmt, device, batch=1)
        out, t_base = _timed(device, _run, base, [_sequence(base, messages, n)])
        # tree steps eager (the default), then captured per width too: whether capture pays
        for tree_widths in ((1,), tuple(range(1, 18))):
            # every step drafted: the gate decides by wall time, which a check must not depend on
            policy = DecodingPolicy("unispec", len(tok), g=16, gate=False)
            spec = _engine(model, tok, fmt, device, batch=1, decoding=policy, widths=tree_widths)
            got, t_spec = _timed(device, _run, spec, [_sequence(spec, messages, n)])
            rows.append(
                dict(
                    check="tree",
                    shape=shape,
                    tree_steps="captured" if len(tree_widths) > 1 else "eager",
                    identical=got == out,
                    tau=round(policy.stats.tau, 2),
                    speedup=round(t_base / t_spec, 2),
                    tokens=len(got[0]),
                    **_graphs(spec),
                )
            )
    return rows


def check_o2o3(shape: str, tok: Any, fmt: Any, device: str) -> list[dict]:
    """A forced call, then the same request with that call cached (O2 + O3), against the
    client-run loop: request, tool result appended, request again."""
    model = _model(shape, len(tok), torch.float32, device, seed=1)
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    ref = _engine(model, tok, fmt, device)
    first = _sequence(ref, messages, 96, tools=[WEATHER])
    _run(ref, [first])
    fin = [e for e in first.events if e.type == "finish"][0]
    call = fin.tool_call
    if call is None:
        return [dict(check="o2o3", shape=shape, ok=False, why=f"no call written: {fin.reason}")]
    args = json.loads(call["function"]["arguments"])
    output = json.dumps({"temp_c": 21})
    follow = [
        *messages,
        {"role": "assistant", "content": fin.content or None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": output},
    ]
    second = _sequence(ref, follow, 96, tools=[WEATHER])
    _run(ref, [second])
    want = [e for e in second.events if e.type == "finish"][0]

    eng = _engine(model, tok, fmt, device)
    rid = "chatcmpl-o2o3"
    seq = _sequence(eng, messages, 96, tools=[WEATHER], rid=rid)
    eng.store.open(rid, "", [WEATHER])
    eng.store.post(rid, "", [{"name": call["function"]["name"], "params": args, "output": output}])
    _run(eng, [seq])
    got = [e for e in seq.events if e.type == "finish"][0]
    c = eng.counters()
    resolved = got.resolved[0]["tool_call"]["function"] if got.resolved else None
    same = (got.content, _call(got)) == (want.content, _call(want))
    # drafts re-encode the cached text: a random model's own tokenization may part from it, so
    # acceptance is partial here; what must hold is that drafts ran and nothing changed
    ok = c["o3_hits"] == 1 and resolved == call["function"] and c["o2_accepted"] > 0 and same
    return [
        dict(
            check="o2o3",
            shape=shape,
            ok=ok,
            same_transcript=same,
            o2_drafted=c["o2_drafted"],
            o2_accepted=c["o2_accepted"],
            o3_hits=c["o3_hits"],
            call=call["function"],
            **_graphs(ref, eng),
        )
    ]


def _speed_model(shape: str, tok: Any, device: str) -> Any:
    return _model(shape, len(tok), torch.bfloat16 if device.startswith("cuda") else torch.float32, device)


def check_floor(shape: str, tok: Any, fmt: Any, device: str, streams: list[int]) -> list[dict]:
    import gpu_speed

    return gpu_speed.check_floor(shape, _speed_model(shape, tok, device), device, streams)


def check_step(shape: str, tok: Any, fmt: Any, device: str, n: int, streams: list[int]) -> list[dict]:
    import gpu_speed

    def sequences(engine: Any, b: int, tokens: int) -> list:
        return [
            _sequence(engine, [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}], tokens)
            for i in range(b)
        ]

    return gpu_speed.check_step(
        shape, _speed_model(shape, tok, device), tok, fmt, device, n, streams, sequences
    )


def check_drafter(shape: str, tok: Any, fmt: Any, device: str, dry: bool) -> list[dict]:
    import gpu_speed

    return gpu_speed.check_drafter(tok, fmt, device, WEATHER, dry)


def _call(finish: Any) -> Any:
    return finish.tool_call["function"] if finish.tool_call else None


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes, few tokens (CI)")
    ap.add_argument("--device", default=None, help="default: cuda (cpu with --dry-run)")
    ap.add_argument("--tokenizer", type=Path, default=None, help="an HF tokenizer folder (default: embedded)")
    ap.add_argument("--profile", action="store_true", help="cProfile the engine's first throughput run")
    ap.add_argument("--out", type=Path, default=None, help="write every result line here (JSON list)")
    a = ap.parse_args(argv)
    device = a.device or ("cpu" if a.dry_run else "cuda")
    if device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device visible to torch", file=sys.stderr)
        return 2
    folder = a.tokenizer
    if folder is None:
        from spectool.embedded import embedded_hf_folder

        folder = embedded_hf_folder()
    tok, fmt = _tokenizer(folder)
    shapes = ["tiny"] if a.dry_run else ["smollm2-135m", "llama-1b"]
    n, streams = (6, [1, 2]) if a.dry_run else (48, [1, 8, 32])
    results: list[dict] = []
    failed = False

    def emit(rows: list[dict]) -> None:
        nonlocal failed
        for row in rows:
            print(json.dumps(row), flush=True)
            results.append(row)
            failed |= (
                row.get("mismatches", 0) > 0
                or row.get("identical") is False
                or row.get("ok") is False
                or "error" in row
            )
        if a.out is not None:  # after every check: a run cut off by its time limit keeps what it did
            a.out.write_text(json.dumps(results, indent=1))

    def attempt(name: str, shape: str, check: Callable[..., list[dict]], *args: Any) -> None:
        """One check; its failure is a row (the GPU time is spent either way, so the other
        checks still run and the report says what broke where)."""
        t0 = time.perf_counter()
        try:
            rows = check(shape, tok, fmt, device, *args)
        except Exception as e:  # noqa: BLE001 - reported, counted as a failure, never hidden
            rows = [dict(check=name, shape=shape, error=repr(e), where=traceback.format_exc(limit=-4))]
        for row in rows:
            row["seconds"] = round(time.perf_counter() - t0, 1)
        emit(rows)

    print(
        json.dumps(
            {
                "device": torch.cuda.get_device_name(0) if device.startswith("cuda") else device,
                "torch": torch.__version__,
                "transformers": _version("transformers"),
                "cuda": torch.version.cuda,
            }
        ),
        flush=True,
    )
    for i, shape in enumerate(shapes):
        attempt("greedy", shape, check_greedy, n)
        attempt("throughput", shape, check_throughput, n, streams, a.profile)
        attempt("step", shape, check_step, n, streams)
        if i == 0:
            attempt("tree", shape, check_tree, n)
            attempt("o2o3", shape, check_o2o3)
        # last: it captures transformers' own forward, which the engine does not depend on
        attempt("floor", shape, check_floor, streams)
    attempt("drafter", "qwen2-0.5b", check_drafter, a.dry_run)
    print("FAILED" if failed else "OK", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
