"""The backend chooser (``spectool_serving.backends``): the C path only where it can run,
the portable torch path everywhere else, and the same scores either way."""

from __future__ import annotations

import pytest
import torch
from tree_fixtures import needs_kernel, tiny_llama

from spectool_serving.backends import kernels, lean_for, runs_fused
from spectool_serving.backends.fused import FusedLlama
from spectool_serving.backends.lean import LeanLlama
from spectool_serving.runner import Runner
from spectool_serving.tree import DraftTree, TreeVerifier


def _scores(model):
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(1, 97, (n,), generator=g).tolist() for n in (9, 14)]
    verifier = TreeVerifier(model)
    warm, roots = verifier.prefill(prompts, keep=64)
    trees = []
    for root in roots:
        t = DraftTree.root(root)
        a = t.add(0, 5, 0.5)
        t.add(a, 6, 0.4)
        t.add(0, 7, 0.3)
        trees.append(t)
    return torch.cat(warm), verifier.forward(trees)


def _greedy(model, prompt: list[int], steps: int) -> list[int]:
    """Greedy tokens through the engine's forward (:class:`Runner`), one token per step."""
    runner = Runner(model, "cpu")
    logits, cache = runner.prefill(prompt)
    tokens = [int(logits.argmax())]
    for pos in range(len(prompt), len(prompt) + steps - 1):
        step = torch.tensor([[tokens[-1]]])
        logits = runner.forward(step, torch.tensor([[pos]]), torch.zeros(1, 1, 1, pos + 1), cache)
        tokens.append(int(logits[0, -1].argmax()))
    return tokens


def _without_avx512(monkeypatch) -> None:
    """What a machine without AVX-512 (or an ARM one) sees: the library never loads."""
    monkeypatch.setattr(kernels, "_cpu_has", lambda flag: False)


def _without_any_library(monkeypatch) -> None:
    """An AVX-512 machine with a pure install (or a failed optional build) and no C compiler."""
    monkeypatch.setattr(kernels, "_installed", lambda: None)
    monkeypatch.setattr(kernels, "_compiler", lambda: None)


@needs_kernel
@pytest.mark.parametrize("lose_c", [_without_avx512, _without_any_library], ids=["no-avx512", "no-library"])
def test_without_the_c_path_the_torch_path_scores_what_the_c_path_scores(monkeypatch, lose_c):
    fast = tiny_llama(4, 2, seed=11)
    assert isinstance(lean_for(fast), FusedLlama) and runs_fused(fast)
    expected, tokens = _scores(fast), _greedy(fast, [3, 14, 15, 92, 65], 12)
    lose_c(monkeypatch)
    monkeypatch.setattr(kernels, "_lib", None)
    monkeypatch.setattr(kernels, "_tried", False)
    assert not kernels.available()
    portable = tiny_llama(4, 2, seed=11)  # same weights, a model the chooser has not seen
    chosen = lean_for(portable)
    assert type(chosen) is LeanLlama and not runs_fused(portable)
    assert type(Runner(portable, "cpu")._lean()) is LeanLlama
    for want, got in zip(expected, _scores(portable)):
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-5)
        assert torch.equal(got.argmax(-1), want.argmax(-1))
    assert _greedy(portable, [3, 14, 15, 92, 65], 12) == tokens


def test_the_c_path_is_never_chosen_outside_fp32(monkeypatch):
    model = tiny_llama(4, 2, seed=12).to(torch.bfloat16)
    assert type(lean_for(model)) is LeanLlama
