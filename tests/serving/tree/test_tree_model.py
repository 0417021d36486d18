"""Tree speculative decoding on the real SmolLM2-135M (fp32): exactness of the verifier."""

from __future__ import annotations

import pytest
import torch

from spectool_serving.tree import DraftTree, TreeVerifier, decode, greedy_tree_accept
from spectool_serving.tree.cast import CastShaper, CostTable

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


@pytest.mark.parametrize("policy", ["ar", "unispec", "cast", "both"])
def test_greedy_identical_to_autoregressive_fp32(lm, refs, policy):
    model, tok, prompts = lm
    table = CostTable([1, 2], [512], [1, 8, 32], {"1/512": [1.0, 1.1, 1.5], "2/512": [1.0, 1.3, 2.0]})
    n = 24
    for ids, ref in zip(prompts, refs):
        # gate off: the gate decides by wall time, so on a loaded machine it may stop drafting
        # and leave tau at 1 (its own losslessness is tested in test_tree_lossless.py)
        res = decode(model, [ids], n, policy, g=12, cast=CastShaper(table), eos=tok.eos_token_id, gate=False)
        assert res.outputs[0] == ref[: len(res.outputs[0])]
        assert len(res.outputs[0]) == n or res.outputs[0][-1] == tok.eos_token_id
    if policy != "ar":
        assert res.tau > 1.0


def test_batched_tree_decoding_matches_single(lm, refs):
    model, tok, prompts = lm
    table = CostTable([1, 2], [512], [1, 8, 32], {"1/512": [1.0, 1.1, 1.5], "2/512": [1.0, 1.3, 2.0]})
    res = decode(model, prompts, 16, "both", cast=CastShaper(table), eos=tok.eos_token_id)
    for ref, out in zip(refs, res.outputs):
        assert out == ref[: len(out)]
        assert len(out) == 16 or out[-1] == tok.eos_token_id  # a prefix only when it stopped at EOS


def test_verify_kernels_packed_gemms_match_stock_and_restore_the_model(lm, monkeypatch):
    """A 16-token tree scores the same on the packed kernels (the fused C layers on the panel
    kernel of :mod:`.kernels`, or MKL's packed weights without it) as on the stock ones, up to fp32
    summation order, and the model is left exactly as it was (a shared model's generate is
    untouched)."""
    from spectool_serving.backends import fastpath

    model, _, prompts = lm
    ids = prompts[1]
    chain = DraftTree.root(ids[-1])
    for tok in range(100, 115):
        chain.add(len(chain) - 1, tok, 0.5)
    assert len(chain) == 16

    def score() -> torch.Tensor:
        verifier = TreeVerifier(model)
        verifier.prefill([ids[:-1]])
        return verifier.forward([chain])

    from spectool_serving.backends import lean_for
    from spectool_serving.backends.fused import FusedLlama

    packed = score()
    # the fused C layers hold their own packed copy; otherwise each Linear module gets one
    assert isinstance(lean_for(model), FusedLlama) or fastpath._PACKED.get(model), (
        "fp32 on CPU: weights should be packed"
    )
    monkeypatch.setenv("SPECTOOL_PACKED_GEMM", "0")
    stock = score()
    # logits of magnitude ~30 after 30 layers: a different k order moves them by ~1e-4
    assert torch.allclose(packed, stock, atol=1e-3, rtol=0)
    assert packed.argmax(-1).tolist() == stock.argmax(-1).tolist()
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert all("forward" not in m.__dict__ for m in linears)
    assert model.config._attn_implementation == "sdpa"
