"""The fused C decoder layers (``spectool_serving.backends.fused``) score what the torch path scores.

Tiny randomly initialised Llama models (no weights needed) cover head sizes that are and are
not multiples of the 16-float vector, grouped and multi-query attention, batches with left
padding and holes, and caches shared with the wide (torch) path. The real SmolLM2 runs through
the fused path in test_tree_model.py's greedy identity tests.
"""

from __future__ import annotations

import pytest
import torch
from tree_fixtures import needs_kernel, tiny_llama

from spectool_serving.backends import lean_for
from spectool_serving.backends.fused import FusedLlama, fusable
from spectool_serving.backends.lean import LeanLlama
from spectool_serving.tree import DraftTree, TreeVerifier


def _tiny_llama(heads: int, kv_heads: int, hidden: int = 48, bias: bool = False):
    return tiny_llama(heads, kv_heads, seed=heads * 100 + kv_heads * 10 + hidden, hidden=hidden, bias=bias)


def _run_batch(model, prompts, monkeypatch, fused: bool):
    """Prefill two rows, verify a different tree per row, keep different paths, step again."""
    monkeypatch.setenv("SPECTOOL_PACKED_GEMM", "1" if fused else "0")
    expected = FusedLlama if fused else LeanLlama
    assert isinstance(lean_for(model), expected)
    verifier = TreeVerifier(model)  # the engine's runner over its batched KV
    warm, roots = verifier.prefill(prompts, keep=64)
    trees = []
    for b, root in enumerate(roots):
        t = DraftTree.root(root)
        a = t.add(0, 5 + b, 0.5)
        t.add(a, 6, 0.4)
        t.add(0, 7, 0.3)
        if b:
            t.add(a, 8, 0.2)
        trees.append(t)
    first = verifier.forward(trees)
    verifier.commit([[0, 1, 2], [0, 3]])  # a hole in row 1's slots
    second = verifier.forward([DraftTree.root(9), DraftTree.root(11)])
    return torch.cat(warm), first, second


@needs_kernel
@pytest.mark.parametrize("heads,kv_heads,hidden", [(4, 2, 48), (3, 1, 96), (2, 2, 64)])
def test_fused_layers_score_batched_trees_like_the_torch_path(heads, kv_heads, hidden, monkeypatch):
    model = _tiny_llama(heads, kv_heads, hidden)
    g = torch.Generator().manual_seed(hidden)
    prompts = [torch.randint(1, 97, (n,), generator=g).tolist() for n in (9, 17)]
    ref = _run_batch(model, prompts, monkeypatch, fused=False)
    got = _run_batch(model, prompts, monkeypatch, fused=True)  # 32-row prefill: fused too
    for r, x in zip(ref, got):
        assert r.shape == x.shape
        torch.testing.assert_close(x, r, atol=2e-5, rtol=1e-5)
    # and against a plain forward of each row's accepted sequence: slots and holes are right
    with torch.no_grad():
        plain = model(torch.tensor([prompts[1] + [7, 11]])).logits[0, -1]
    torch.testing.assert_close(got[2][1, 0], plain, atol=2e-5, rtol=1e-5)


@needs_kernel
def test_fused_steps_continue_a_plain_cache_filled_by_the_wide_path():
    from transformers import DynamicCache

    model = _tiny_llama(4, 2)
    fused = lean_for(model)
    assert isinstance(fused, FusedLlama)
    seq = torch.randint(1, 97, (60,)).tolist()  # more rows than the panel kernel takes
    cache = DynamicCache()  # the engine's runner: plain layers that grow by torch.cat
    n = len(seq)
    causal = torch.zeros(n, n).masked_fill(
        ~torch.ones(n, n, dtype=torch.bool).tril(), torch.finfo(torch.float32).min
    )
    with torch.no_grad():
        fused(torch.tensor([seq]), torch.arange(n)[None], causal[None, None], cache, 1)
        for tok in (3, 4, 5):  # one-token steps: the C layers write into the same cache
            mask = torch.zeros(1, 1, 1, len(seq) + 1)
            step = fused(torch.tensor([[tok]]), torch.tensor([[len(seq)]]), mask, cache)
            seq.append(tok)
            assert cache.layers[0].keys.shape[2] == len(seq)
            plain = model(torch.tensor([seq])).logits[0, -1]
            torch.testing.assert_close(step[0, 0], plain, atol=2e-5, rtol=1e-5)


@needs_kernel
def test_a_mask_that_disagrees_with_the_cache_is_refused_before_anything_is_written():
    model = _tiny_llama(4, 2)
    fused = lean_for(model)
    verifier = TreeVerifier(model)
    verifier.prefill([[1, 2, 3, 4, 5]])
    cache = verifier.kv.cache
    before = [layer.keys.clone() for layer in cache.layers]
    with pytest.raises(ValueError, match="cached slots"), torch.no_grad():
        fused(torch.tensor([[7]]), torch.tensor([[4]]), torch.zeros(1, 1, 1, 9), cache)
    for layer, keys in zip(cache.layers, before):
        assert torch.equal(layer.keys, keys)


def test_models_with_projection_biases_keep_the_torch_path():
    assert not fusable(_tiny_llama(4, 2, bias=True))
    assert isinstance(lean_for(_tiny_llama(4, 2, bias=True)), LeanLlama)
