"""Tree speculative decoding on the real SmolLM2-135M (fp32): exactness of the verifier."""

from __future__ import annotations

import pytest
import torch

from spectool_bench.decode._loop import bench_engine, run_engine
from spectool_serving.tree import DecodingPolicy, DraftTree, TreeVerifier, greedy_tree_accept
from spectool_serving.tree.cast import CostTable

pytestmark = pytest.mark.model

PROMPTS = [
    "Summarize: The council approved a new library with three floors, a cafe and a "
    "makerspace. Construction starts in March and ends within eighteen months.",
    "Translate to French: The weather is nice today and we will go to the beach.",
]


@pytest.fixture(scope="module")
def lm():
    from spectool.embedded import load_causal_lm

    model, tok = load_causal_lm(dtype="float32")
    ids = [
        tok.apply_chat_template(
            [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True, return_dict=True
        )["input_ids"]
        for p in PROMPTS
    ]
    return model, tok, [list(i) for i in ids]


@pytest.fixture(scope="module")
def refs(lm):
    model, _, prompts = lm
    return [_greedy(model, ids, 24) for ids in prompts]


def _greedy(model, ids, n):
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False)
    return out[0, len(ids) :].tolist()


def test_tree_logits_equal_path_by_path_and_gather_matches_plain(lm):
    model, _, prompts = lm
    ids = prompts[0]
    ref = _greedy(model, ids, 6)
    verifier = TreeVerifier(model)
    _, roots = verifier.prefill([ids])
    t = DraftTree.root(roots[0])
    a = t.add(0, ref[0], 0.5)
    b = t.add(a, ref[1], 0.4)
    c = t.add(0, 17, 0.1)
    t.add(c, 18, 0.1)
    t.add(b, 999, 0.1)
    d = t.add(b, ref[2], 0.1)
    logits = verifier.forward([t])
    for path in ([0, a, b, d], [0, c, 4], [0, a, b, 5]):
        seq = ids + [t.tokens[i] for i in path[1:]]
        with torch.no_grad():
            plain = model(torch.tensor([seq])).logits[0, -len(path) :]
        assert (plain - logits[0, path]).abs().max() < 2e-4
    path, bonus = greedy_tree_accept(t.parents, t.tokens, logits[0].argmax(-1).tolist())
    assert path == [0, a, b, d] and bonus == ref[3]
    verifier.commit([path])
    nxt = DraftTree.root(bonus)
    nxt.add(0, ref[4], 1.0)
    after = verifier.forward([nxt])
    with torch.no_grad():
        plain = model(torch.tensor([ids + ref[:5]])).logits[0, -2:]
    assert (plain - after[0]).abs().max() < 2e-4
    assert after[0].argmax(-1).tolist() == ref[4:6]


TABLE = CostTable([1, 2], [512], [1, 8, 32], {"1/512": [1.0, 1.1, 1.5], "2/512": [1.0, 1.3, 2.0]})


@pytest.fixture(scope="module")
def engine(lm):
    from spectool_serving.toolcalls import detect_format

    model, tok, _ = lm
    return bench_engine(model, tok, detect_format(tok.chat_template, ""))


def _policy(engine, mode):
    # gate off: the gate decides by wall time, so on a loaded machine it may stop drafting
    # and leave tau at 1 (its own losslessness is tested in test_tree_lossless.py)
    vocab = engine.runner.model.config.vocab_size
    return None if mode == "off" else DecodingPolicy(mode, vocab, g=12, table=TABLE, gate=False)


@pytest.mark.parametrize("mode", ["off", "unispec", "cast", "both"])
def test_greedy_identical_to_autoregressive_fp32(lm, refs, engine, mode):
    _, tok, prompts = lm
    n = 24
    for ids, ref in zip(prompts, refs):
        res = run_engine(engine, [ids], n, _policy(engine, mode))
        assert res.outputs[0] == ref[: len(res.outputs[0])]
        assert len(res.outputs[0]) == n or res.outputs[0][-1] in (tok.eos_token_id, engine.eos_id)
    if mode != "off":
        assert res.tau > 1.0


def test_batched_tree_decoding_matches_single(lm, refs, engine):
    _, tok, prompts = lm
    res = run_engine(engine, prompts, 16, _policy(engine, "both"))
    for ref, out in zip(refs, res.outputs):
        assert out == ref[: len(out)]
        assert len(out) == 16 or out[-1] in (tok.eos_token_id, engine.eos_id)  # a prefix only at EOS
