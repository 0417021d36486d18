"""The lean Llama forward computes what transformers' modules compute.

Tiny randomly initialised Llama models (no weights needed) cover the head layouts the lean
path folds differently — one KV head per query head, grouped queries, multi-query — plus
attention biases; the real SmolLM2 is covered in test_tree_model.py.
"""

from __future__ import annotations

import pytest
import torch
from tree_fixtures import tiny_llama, tiny_model

from spectool_serving.backends import lean_for
from spectool_serving.backends.lean import LeanLlama, supports
from spectool_serving.tree import DraftTree, TreeVerifier


def _tiny_llama(heads: int, kv_heads: int, bias: bool = False, **extra):
    return tiny_llama(heads, kv_heads, seed=heads * 10 + kv_heads, bias=bias, **extra)


def _score_tree(model, prompt, monkeypatch, lean: bool):
    monkeypatch.setenv("SPECTOOL_LEAN_FORWARD", "1" if lean else "0")
    verifier = TreeVerifier(model)
    warm, roots = verifier.prefill([prompt], 3)
    tree = DraftTree.root(roots[0])
    a = tree.add(0, 5, 0.5)
    tree.add(a, 6, 0.4)
    tree.add(0, 7, 0.3)
    first = verifier.forward([tree])
    verifier.commit([[0, a]])  # keeps the path's KV, drops the rest
    second = verifier.forward([DraftTree.root(9)])
    return warm[0], first, second


@pytest.mark.parametrize("heads,kv_heads,bias", [(4, 4, False), (4, 2, True), (6, 1, False)])
def test_lean_forward_scores_trees_exactly_like_transformers(heads, kv_heads, bias, monkeypatch):
    model = _tiny_llama(heads, kv_heads, bias)
    assert supports(model)
    prompt = [int(t) for t in torch.randint(1, 97, (23,))]
    ref = _score_tree(model, prompt, monkeypatch, lean=False)
    got = _score_tree(model, prompt, monkeypatch, lean=True)
    for r, g in zip(ref, got):
        assert r.shape == g.shape
        torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-5)
    # and against a plain causal forward of the accepted sequence: slot bookkeeping is right
    with torch.no_grad():
        plain = model(torch.tensor([prompt + [5, 9]])).logits[0, -1]
    torch.testing.assert_close(got[2][0, 0], plain, atol=1e-5, rtol=1e-5)


def test_lean_forward_is_used_and_cached_per_model_and_kernel_choice(monkeypatch):
    from spectool_serving.backends import kernels
    from spectool_serving.backends.fused import FusedLlama

    model = _tiny_llama(4, 2)
    first = lean_for(model)
    # the one-call C layers where the panel kernel builds (test_tree_fused.py), torch elsewhere
    assert isinstance(first, FusedLlama if kernels.available() else LeanLlama)
    assert lean_for(model) is first
    unpacked = lean_for(model, packed=False)  # the engine's runner: no weight copies
    assert unpacked is not first and lean_for(model, packed=False) is unpacked
    monkeypatch.setenv("SPECTOOL_PACKED_GEMM", "0")
    stock = lean_for(model)
    assert stock is unpacked  # packing switched off: the same kernels as packed=False
    monkeypatch.setenv("SPECTOOL_LEAN_FORWARD", "0")
    assert lean_for(model) is None


def test_models_the_lean_path_cannot_reproduce_keep_transformers_forward():
    dynamic = _tiny_llama(
        4, 2, rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}
    )
    assert not supports(dynamic)
    gelu = _tiny_llama(4, 2, hidden_act="gelu")
    assert not supports(gelu)
    training = _tiny_llama(4, 2).train()
    assert not supports(training)
    gemma = tiny_model("gemma3", 4, 2, head_dim=12, sliding_window=8, attn=None)
    assert not supports(gemma) and lean_for(gemma) is None
