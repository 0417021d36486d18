"""The captured decode step's code path (:mod:`spectool_serving.graphs`), run without capture
on the CPU (``Runner(graphs="static")``): static buffers padded to a bucket, the slot mapping,
the mask over the whole pool. It must give the eager forward's logits and the engine's outputs,
and a wrong slot mapping must not."""

from __future__ import annotations

import pytest
import torch

from spectool_serving.engine import Engine
from spectool_serving.graphs import DecodeGraphs
from spectool_serving.kv import BatchKV
from spectool_serving.runner import Runner
from spectool_serving.scheduler import Scheduler
from tests.tree_fixtures import tiny_llama, tiny_llama_for, tiny_model


def _drive(runner: Runner, steps: int = 5, width: int = 1) -> list[torch.Tensor]:
    """Three rows of unequal lengths, the middle one then freed; ``steps`` decode steps of
    ``width`` tokens per live row."""
    kv = BatchKV()
    for seq_id, n in ((0, 7), (1, 4), (2, 9)):
        _, cache = runner.prefill(list(range(1, n + 1)))
        kv.join(seq_id, cache)
    kv.leave({1})  # a free row inside the span: fed one padding token
    out = []
    for step in range(steps):
        counts = [0 if s is None else width for s in kv.rows]
        positions, mask = kv.step_inputs(counts, runner.dtype)
        ids = torch.arange(len(kv.rows) * width).view(-1, width) + 5 + step
        out.append(runner.forward(ids, positions, mask, kv.cache))
        kv.commit([[] if s is None else list(range(width)) for s in kv.rows], width)
    return out


@pytest.fixture(scope="module")
def model():
    return tiny_llama(4, 2, seed=3)


def test_static_step_gives_the_eager_forwards_logits(model):
    eager = _drive(Runner(model, "cpu", graphs="off"))
    runner = Runner(model, "cpu", graphs="static")
    static = _drive(runner)
    stats = runner.decode_graphs().stats
    assert stats.replays == 5 and stats.eager == 0  # every step ran from the static buffers
    for a, b in zip(eager, static):
        assert a.shape == b.shape == (3, 1, 97)
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_a_wrong_slot_mapping_changes_the_logits(model, monkeypatch):
    """Negative control: new keys written one slot off (a column the mask hides) must show."""
    fill = DecodeGraphs._fill

    def off_by_one(self, buf, ids, positions, mask, rows, width):
        fill(self, buf, ids, positions, mask, rows, width)
        buf.slots.add_(1)

    eager = _drive(Runner(model, "cpu", graphs="off"))
    monkeypatch.setattr(DecodeGraphs, "_fill", off_by_one)
    broken = _drive(Runner(model, "cpu", graphs="static"))
    assert not all(torch.allclose(a, b, atol=1e-5) for a, b in zip(eager, broken))


def test_wider_steps_run_eagerly_and_rejoin(model):
    """Width-2 steps (drafts) are not in the captured widths: eager, on the same pool."""
    runner = Runner(model, "cpu", graphs="static")
    eager = _drive(Runner(model, "cpu", graphs="off"), width=2)
    got = _drive(runner, width=2)
    assert runner.decode_graphs().stats.eager == 5 and runner.decode_graphs().stats.replays == 0
    for a, b in zip(eager, got):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_auto_keeps_the_cpu_unchanged(model):
    assert Runner(model, "cpu").decode_graphs() is None  # auto: graphs on CUDA only
    assert Runner(model, "cpu", graphs="off").decode_graphs() is None
    with pytest.raises(Exception, match="graphs must be one of"):
        Runner(model, "cpu", graphs="yes")


def test_buckets_pad_within_the_pool():
    graphs = DecodeGraphs.__new__(DecodeGraphs)
    graphs.buckets = (1, 2, 4, 8)
    assert [graphs._bucket(r, 8) for r in (1, 2, 3, 5, 8)] == [1, 2, 4, 8, 8]
    assert graphs._bucket(5, 6) == 6  # the next bucket would overrun the pool: its own rows
    assert graphs._bucket(9, 16) is None  # past the largest bucket: eager


def _engine(runner, tok):
    from spectool_serving.toolcalls import detect_format

    fmt = detect_format(getattr(tok, "chat_template", None), "")
    return Engine(runner, tok, fmt, scheduler=Scheduler(max_batch=4, max_slots=1 << 16, prefills_per_step=4))


def _generate(engine, prompts, lengths):
    """Every request queued at once, then run to idle; each one's generated token ids."""
    from spectool_serving.requests import build_sequences

    seqs = []
    for i, (text, n) in enumerate(zip(prompts, lengths)):
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": text}],
            "max_tokens": n,
            "temperature": 0,
        }
        seq = build_sequences(body, engine, f"chatcmpl-{i}", "")[0]
        seq.emit = lambda event: None
        seqs.append((seq, len(seq.tokens)))
    for seq, _ in seqs:
        engine.add(seq)
    engine.run_until_idle()
    return [seq.tokens[n:] for seq, n in seqs]


def test_engine_outputs_equal_with_the_static_step(smol):
    """Greedy, three requests of unequal prompts and lengths at once (rows leave mid-run, so
    buckets pad over free rows): the same tokens with and without the static step."""
    tok = smol.tokenizer
    model = tiny_llama_for(tok, seed=5)
    prompts = ["hello there", "a much longer prompt about the sea and the sky and the wind", "x"]
    lengths = [12, 5, 9]
    want = _generate(_engine(Runner(model, "cpu", graphs="off"), tok), prompts, lengths)
    runner = Runner(model, "cpu", graphs="static")
    got = _generate(_engine(runner, tok), prompts, lengths)
    assert got == want and [len(g) for g in got] == lengths
    assert runner.decode_graphs().stats.replays > 5


def _tiny_qwen2(seed: int = 4):
    model = tiny_model("qwen2", 4, 2, seed=seed, tie_word_embeddings=True)
    with torch.no_grad():  # random biases: zero-initialised ones would hide a dropped bias
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_()
    return model


def test_qwen2_runs_the_lean_and_static_step_off_the_cpu_only():
    """A Qwen2 drafter's decode step: the lean maths (biases included) equal Qwen2's forward,
    and the static step equals both; on a CPU the chooser keeps transformers' forward."""
    from transformers import DynamicCache

    from spectool_serving.backends.fastpath import linear_kernels
    from spectool_serving.backends.lean import LeanLlama, supports
    from spectool_serving.backends.static_step import StaticStep

    model = _tiny_qwen2()
    assert not supports(model) and supports(_tiny_qwen2().to("meta"))
    lean = LeanLlama(model, linear_kernels(model, packed=False))
    ids = torch.tensor([[3, 14, 15, 92, 65, 35]])
    with torch.inference_mode():
        want = model(input_ids=ids).logits
        n = ids.shape[1]
        mask = torch.zeros(n, n).masked_fill(
            ~torch.ones(n, n, dtype=torch.bool).tril(), torch.finfo(torch.float32).min
        )
        got = lean(ids, torch.arange(n)[None], mask[None, None], DynamicCache())
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        # the last token as a static step over a pool holding the first n-1 tokens' KV
        cache = DynamicCache()
        lean(ids[:, :-1], torch.arange(n - 1)[None], mask[None, None, :-1, :-1], cache)
        pools = []
        for layer in cache.layers:
            k, v = (torch.zeros(1, 2, 16, 12) for _ in range(2))
            k[:, :, : n - 1], v[:, :, : n - 1] = layer.keys, layer.values
            pools.append((k, v))
        step_mask = torch.full((1, 1, 1, 16), torch.finfo(torch.float32).min)
        step_mask[..., :n] = 0
        last = StaticStep(lean)(
            ids[:, -1:], torch.tensor([[n - 1]]), torch.tensor([[n - 1]]), step_mask, pools
        )
        torch.testing.assert_close(last[:, 0], want[:, -1], rtol=1e-5, atol=1e-5)
        # negative control: the same maths without the biases is another model
        for layer in model.model.layers:
            layer.self_attn.q_proj.bias.zero_()
        assert not torch.allclose(
            lean(ids, torch.arange(n)[None], mask[None, None], DynamicCache()), want, atol=1e-3
        )


def test_serve_passes_cuda_graphs_to_the_runner(monkeypatch):
    """``spectool serve --cuda-graphs off`` reaches the engine's runner; auto is the default."""
    import socket

    import spectool_serving.server as server
    from spectool.cli import main as cli_main

    seen: list = []

    class Started(Exception):
        pass

    def build_server(model, **kwargs):
        seen.append(kwargs["cuda_graphs"])
        raise Started

    monkeypatch.setattr(server, "build_server", build_server)
    for argv in (["--cuda-graphs", "off"], []):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = str(s.getsockname()[1])
        with pytest.raises(Started):
            cli_main(["serve", "--port", port, *argv])
    assert seen == ["off", "auto"]
    with pytest.raises(SystemExit):  # control: only auto and off
        cli_main(["serve", "--cuda-graphs", "static"])
    engine = server.build_engine(loaded=_loaded(), cuda_graphs="off")
    assert engine.runner.graphs == "off"


def _loaded():
    from transformers import AutoTokenizer

    from spectool.embedded import embedded_hf_folder
    from spectool_serving.models import LoadedModel
    from spectool_serving.toolcalls import detect_format

    tok = AutoTokenizer.from_pretrained(str(embedded_hf_folder()))
    fmt = detect_format(getattr(tok, "chat_template", None), "")
    return LoadedModel(tiny_llama_for(tok, seed=1), tok, fmt, "tiny", "cpu")


def test_the_same_prompt_prefilled_twice_runs_the_model_once(model):
    """The n choices of one request share one prefill; their caches are independent (one
    growing leaves the other as it was), and another prompt, or a forward between, recomputes."""
    runner = Runner(model, "cpu", graphs="off")
    calls = []
    lean = runner._lean()
    runner._lean = lambda: lambda *a, **k: calls.append(1) or lean(*a, **k)  # count forwards
    a_logits, a = runner.prefill([1, 2, 3, 4])
    b_logits, b = runner.prefill([1, 2, 3, 4])
    assert len(calls) == 1 and torch.equal(a_logits, b_logits)
    assert a is not b and a.layers[0] is not b.layers[0]
    a.layers[0].keys = torch.cat([a.layers[0].keys, a.layers[0].keys[:, :, :1]], dim=2)  # a grows
    assert b.layers[0].keys.shape[2] == 4  # b does not
    runner.prefill([1, 2, 3, 5])  # control: another prompt is computed
    runner.forward(
        torch.tensor([[7]]), torch.tensor([[4]]), torch.zeros(1, 1, 1, 5), b
    )  # a forward ends the sharing
    runner.prefill([1, 2, 3, 5])
    assert len(calls) == 4


def test_stopping_the_engine_frees_its_graphs(model, monkeypatch):
    """Shutdown releases the graphs (Runner.close); a restarted engine builds them afresh."""
    engine = server_engine(model)
    graphs = engine.runner.decode_graphs()
    closed = []
    monkeypatch.setattr(graphs, "close", lambda: closed.append(1))
    engine.stop()
    assert closed == [1] and engine.runner._graphs is None
    assert engine.runner.decode_graphs() is not graphs  # rebuilt on next use


def server_engine(model):
    from spectool_serving.server import build_engine

    loaded = _loaded()
    loaded.model = tiny_llama_for(loaded.tokenizer, seed=1)
    return build_engine(loaded=loaded, cuda_graphs="static")
