"""Speed rows of ``scripts/gpu_check.py``: the engine's decode step against the captured-step
floor, with CUDA graphs on and off, and a drafter served by the engine.

* ``floor``: one decode step of transformers' model of the same shape with a ``StaticCache``,
  captured once with ``torch.cuda.graph`` and replayed: the launch-free reference (ms/step).
* ``step``: the engine at 1/8/32 streams with ``graphs`` on and off: whole-run tok/s, and the
  decode phase alone (prefills timed apart): ms per step and rows x steps / s. Graphs are
  captured in a warm-up run first, so capture time is reported, not timed.
* ``drafter``: a model of Qwen2-0.5B's shape served by the engine (graphs on), asked as
  ``EndpointDrafter`` asks — one request, ``n`` = λ choices, ``tool_choice="required"``, a
  ~600-token prompt, 40 tokens — at λ 1 and 3: seconds per draft, prefills included.

On a CPU (``--dry-run``) the same code runs with tiny shapes, ``graphs="static"`` for "on"
(the captured step's code, uncaptured) and the floor's replay run eagerly.
"""

from __future__ import annotations

import time
from typing import Any

import torch

QWEN2_05B = dict(
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    rope_theta=1000000.0,
)
TINY_QWEN2 = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
)


def _cuda(device: str) -> bool:
    return device.startswith("cuda")


def _sync(device: str) -> None:
    if _cuda(device):
        torch.cuda.synchronize()


def floor_ms(model: Any, device: str, rows: int = 1, context: int = 64, reps: int = 50) -> float:
    """ms per replay of one captured decode step of ``model`` (rows x 1 token over a
    ``StaticCache`` holding ``context`` tokens); eager replays on a CPU."""
    from transformers import StaticCache

    from spectool.hf_compat import cache_keyword

    # every call, a replay too, advances the cache's own write position: room for all of them
    cache = StaticCache(config=model.config, max_cache_len=context + reps + 16)
    kw = cache_keyword(model)
    prompt = torch.randint(0, model.config.vocab_size, (rows, context), device=device)
    ids = torch.zeros(rows, 1, dtype=torch.long, device=device)
    position = torch.full((rows, 1), context, device=device)
    with torch.inference_mode():
        model(input_ids=prompt, **{kw: cache}, use_cache=True)

        def step() -> Any:
            return model(input_ids=ids, position_ids=position, **{kw: cache}, use_cache=True).logits

        if _cuda(device):
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    step()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step()
            run = graph.replay
        else:
            run = step
        run()
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(reps):
            run()
        _sync(device)
    return (time.perf_counter() - t0) / reps * 1e3


def engine(model: Any, tok: Any, fmt: Any, device: str, batch: int, graphs: str) -> Any:
    from spectool_serving.engine import Engine
    from spectool_serving.runner import Runner
    from spectool_serving.scheduler import Scheduler
    from spectool_serving.store import ToolOutputStore

    sched = Scheduler(max_batch=batch, max_slots=1 << 20, prefills_per_step=batch)
    return Engine(Runner(model, device, graphs=graphs), tok, fmt, store=ToolOutputStore(), scheduler=sched)


def _timed_run(eng: Any, seqs: list, device: str) -> dict:
    """Run ``seqs`` to idle: wall seconds, seconds in prefills (synced around each), steps."""
    prefill = eng.runner.prefill
    spent = [0.0]

    def timed_prefill(*args: Any, **kwargs: Any) -> Any:
        _sync(device)
        t = time.perf_counter()
        out = prefill(*args, **kwargs)
        _sync(device)
        spent[0] += time.perf_counter() - t
        return out

    eng.runner.prefill = timed_prefill
    before = eng.counters()
    starts = [len(s.tokens) for s in seqs]
    _sync(device)
    t0 = time.perf_counter()
    for s in seqs:
        eng.add(s)
    eng.run_until_idle()
    _sync(device)
    wall = time.perf_counter() - t0
    eng.runner.prefill = prefill
    after = eng.counters()
    errors = [e for s in seqs for e in getattr(s, "events", []) if getattr(e, "type", None) == "error"]
    if errors:
        raise RuntimeError(f"{len(errors)} sequence(s) failed: {errors[0]}")
    return dict(
        wall=wall,
        prefill=spent[0],
        steps=after["decode_steps"] - before["decode_steps"],
        rows=after["decode_rows"] - before["decode_rows"],
        tokens=sum(len(s.tokens) - n for s, n in zip(seqs, starts)),
    )


def check_step(
    shape: str, model: Any, tok: Any, fmt: Any, device: str, n: int, streams: list[int], make_seqs: Any
) -> list[dict]:
    """Engine decode speed with graphs on and off at each stream count."""
    rows = []
    on = "auto" if _cuda(device) else "static"
    for graphs in (on, "off"):
        for b in streams:
            eng = engine(model, tok, fmt, device, b, graphs)
            _timed_run(eng, make_seqs(eng, b, 4), device)  # warm-up: captures this bucket's graph
            r = _timed_run(eng, make_seqs(eng, b, n), device)
            decode = max(r["wall"] - r["prefill"], 1e-9)
            g = eng.runner.decode_graphs()
            stats = g.stats if g is not None else None
            rows.append(
                dict(
                    check="step",
                    shape=shape,
                    dtype=str(model.dtype).removeprefix("torch."),
                    graphs="on" if graphs != "off" else "off",
                    streams=b,
                    tok_s=round(r["tokens"] / r["wall"], 1),
                    decode_ms_per_step=round(decode / max(r["steps"], 1) * 1e3, 2),
                    decode_tok_s=round(r["rows"] / decode, 1),
                    prefill_s=round(r["prefill"], 3),
                    steps=r["steps"],
                    replayed=stats.replays if stats else 0,
                    eager_steps=stats.eager if stats else r["steps"],
                    captures=stats.captures if stats else 0,
                    capture_s=round(stats.capture_s, 2) if stats else 0.0,
                    graph_mb=round(stats.graph_bytes / 2**20, 1) if stats else 0.0,
                    fallback=stats.fallback if stats else None,
                    glue=g.step.ops.name if g is not None else None,
                )
            )
            eng.runner.close()
    return rows


def check_floor(shape: str, model: Any, device: str, streams: list[int]) -> list[dict]:
    out = []
    for b in streams:
        ms = floor_ms(model, device, rows=b)
        out.append(
            dict(
                check="floor", shape=shape, streams=b, ms_per_step=round(ms, 2), tok_s=round(b / ms * 1e3, 1)
            )
        )
    return out


def drafter_model(vocab: int, device: str, dry: bool) -> Any:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=vocab,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        **(TINY_QWEN2 if dry else QWEN2_05B),
    )
    cfg._attn_implementation = "sdpa"
    with torch.device(device):
        model = Qwen2ForCausalLM(cfg)
    return model.to(dtype=torch.float32 if dry else torch.bfloat16).eval()


def _draft_body(tool: dict, samples: int, prompt_words: int, max_tokens: int = 40) -> dict:
    """What ``EndpointDrafter`` sends: the conversation, the tools, ``n`` = λ, required call."""
    history = " ".join(f"order {i} shipped to Paris on day {i % 28 + 1};" for i in range(prompt_words // 19))
    return {
        "model": "drafter",
        "messages": [
            {"role": "system", "content": f"You help with orders. Records: {history}"},
            {"role": "user", "content": "What is the weather in Paris where my last order went?"},
        ],
        "tools": [tool],
        "tool_choice": "required",
        "n": samples,
        "temperature": 0.7,
        "max_tokens": max_tokens,
    }


def check_drafter(tok: Any, fmt: Any, device: str, tool: dict, dry: bool) -> list[dict]:
    """A 40-token schema-constrained draft from the engine-served drafter at λ 1 and 3."""
    from spectool_serving.requests import build_sequences

    model = drafter_model(len(tok), device, dry)
    graphs = "auto" if _cuda(device) else "static"
    eng = engine(model, tok, fmt, device, 4, graphs)
    rows = []
    for samples in (1, 3, 1, 3):  # the first pair warms up (captures buckets 1 and 4)
        body = _draft_body(tool, samples, 40, 8) if dry else _draft_body(tool, samples, 600)
        seqs = build_sequences(body, eng, f"chatcmpl-d{len(rows)}", "")
        events: list = []
        for s in seqs:
            s.emit = events.append
            s.events = events  # type: ignore[attr-defined]
        r = _timed_run(eng, seqs, device)
        rows.append(
            dict(
                check="drafter",
                shape="qwen2-0.5b" if not dry else "tiny-qwen2",
                dtype=str(model.dtype).removeprefix("torch."),
                samples=samples,
                prompt_tokens=len(seqs[0].tokens) - seqs[0].generated,
                tokens=r["tokens"],
                draft_s=round(r["wall"], 4),
                prefill_s=round(r["prefill"], 4),
                decode_ms_per_step=round((r["wall"] - r["prefill"]) / max(r["steps"], 1) * 1e3, 2),
                calls=sum(e.type == "finish" and e.tool_call is not None for e in events),
            )
        )
    g = eng.runner.decode_graphs()
    for row in rows:
        row["fallback"] = g.stats.fallback if g is not None else "no graphs"
    eng.runner.close()
    return rows[2:]
