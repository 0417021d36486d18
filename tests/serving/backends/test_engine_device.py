"""The engine's forward and KV paths create no tensor on the wrong device.

No GPU runs here, so the model, its cache and every input live on PyTorch's ``meta`` device:
tensors with shapes and dtypes but no storage. An operator that mixes a meta tensor with a
CPU tensor (a table built with ``torch.arange`` on the CPU, a mask created without
``device=``) raises, and so does anything that reads values back to the host
(``int(t.max())``, ``.item()``): both are what breaks, or stalls, a CUDA forward. This is the
check a ``cuda`` device would make, minus the arithmetic.
"""

from __future__ import annotations

import pytest
import torch

from spectool_serving.backends import lean_for
from spectool_serving.backends.lean import LeanLlama
from spectool_serving.kv import BatchKV
from spectool_serving.runner import Runner
from tests.tree_fixtures import tiny_llama

META = torch.device("meta")


@pytest.fixture
def meta_llama():
    return tiny_llama(4, 2, seed=3).to(META)


def test_lean_forward_runs_on_the_models_device(meta_llama):
    from transformers import DynamicCache

    lean = LeanLlama(meta_llama, lambda m: m)  # eager linear layers: the device-generic path
    cache = DynamicCache()
    ids = torch.zeros(2, 5, dtype=torch.long, device=META)
    pos = torch.arange(5, device=META).repeat(2, 1)
    mask = torch.zeros(2, 1, 5, 5, device=META)
    logits = lean(ids, pos, mask, cache)
    assert logits.device == META and logits.shape == (2, 5, 97)
    assert cache.layers[0].keys.device == META


def test_chooser_never_picks_the_c_kernels_off_the_cpu(meta_llama):
    chosen = Runner(meta_llama, "meta")._lean()
    assert type(chosen) is LeanLlama  # not the fused C path, whatever this CPU supports
    assert lean_for(meta_llama, packed=True) is not None


def test_runner_and_kv_keep_everything_on_the_device(meta_llama):
    """prefill two sequences, join them into one batched cache, run a tree step and a chain
    step, commit, compact and drop a row: the full engine path below sampling."""
    runner = Runner(meta_llama, "meta")
    kv = BatchKV()
    for seq_id, n in ((0, 7), (1, 4)):
        logits, cache = runner.prefill(list(range(n)))
        assert logits.device == META and logits.shape == (97,)  # not copied to the host
        kv.join(seq_id, cache)
    assert kv.cache.layers[0].keys.device == META
    counts, parents = [3, 1], [[-1, 0, 0], None]
    positions, mask = kv.step_inputs(counts, runner.dtype, parents)
    ids = torch.zeros(2, 3, dtype=torch.long)
    logits = runner.forward(ids, positions, mask, kv.cache)
    assert logits.device == META and logits.shape == (2, 3, 97)
    kv.commit([[0, 2], [0]], 3)
    kv.compact(slack=0.0, floor=0)  # force the gather path
    kv.leave({0})
    assert kv.rows == [None, 1] and kv.cache.layers[0].keys.device == META  # row 0 is free now


def test_tree_verifier_keeps_everything_on_the_device(meta_llama):
    """The tree decoder's verifier is the engine's runner over its KV: same device rules."""
    from spectool_serving.tree import DraftTree, TreeVerifier

    verifier = TreeVerifier(meta_llama)
    warm, roots = verifier.prefill([[1, 2, 3, 4], [5, 6, 7]], keep=2)
    assert all(w.device == META and w.shape == (2, 97) for w in warm)
    tree = DraftTree.root(roots[0])
    tree.add(0, 9, 0.5)
    logits = verifier.forward([tree, DraftTree.root(roots[1])], width=4)  # padded to 4
    assert logits.device == META and logits.shape == (2, 4, 97)
    verifier.commit([[0, 1], [0]])
    assert verifier.kv.cache.layers[0].keys.device == META and verifier.length == 3 + 4


def _cuda_layout_sdpa(monkeypatch):
    """SDPA as cuda's memory-efficient kernel returns it: [B, H, Q, D] values over
    [B, Q, H, D] storage (found by scripts/gpu-check.sh on an H200; the CPU kernel returns
    contiguous output, so nothing here saw it)."""
    import torch.nn.functional as F

    stock = F.scaled_dot_product_attention

    def strided(*args, **kwargs):
        return stock(*args, **kwargs).transpose(1, 2).contiguous().transpose(1, 2)

    monkeypatch.setattr(F, "scaled_dot_product_attention", strided)
    return stock


@pytest.mark.parametrize("q_len", [1, 5])
def test_lean_forward_takes_attention_output_in_any_layout(q_len, monkeypatch):
    from transformers import DynamicCache

    model = tiny_llama(4, 2, seed=3)  # grouped queries: the folded layout the output unfolds
    lean = LeanLlama(model, lambda m: lambda x, w=m.weight, b=m.bias: torch.nn.functional.linear(x, w, b))
    ids = torch.randint(1, 97, (2, q_len))
    pos = torch.arange(q_len)[None].repeat(2, 1)
    mask = torch.zeros(2, 1, q_len, q_len).masked_fill(
        ~torch.ones(q_len, q_len, dtype=torch.bool).tril(), -1e9
    )
    want = lean(ids, pos, mask, DynamicCache())
    stock = _cuda_layout_sdpa(monkeypatch)
    # the patch reproduces the layout: the unfold as a plain view cannot take it (negative control)
    q = torch.randn(2, 2, 2 * q_len, 8)
    out = torch.nn.functional.scaled_dot_product_attention(q, q, q)
    assert torch.equal(out, stock(q, q, q))
    if q_len > 1:
        with pytest.raises(RuntimeError, match="view size"):
            out.view(2, 4, q_len, 8)
    got = lean(ids, pos, mask, DynamicCache())
    torch.testing.assert_close(got, want)


def test_grouped_attention_takes_attention_output_in_any_layout(monkeypatch):
    from spectool_serving.backends.fastpath import grouped_attention

    module = torch.nn.Module().eval()
    q, k = torch.randn(1, 4, 3, 8), torch.randn(1, 2, 3, 8)
    want, _ = grouped_attention(module, q, k, k, None, is_causal=True)
    _cuda_layout_sdpa(monkeypatch)
    got, _ = grouped_attention(module, q, k, k, None, is_causal=True)
    torch.testing.assert_close(got, want)


def test_attention_leaves_out_cudnn_on_cuda_only():
    """cuDNN's SDPA plans each new shape on the host (1.5-3 ms a call on an H200, by
    scripts/gpu-check.sh --profile), and decoding makes a new key length every step."""
    from spectool_serving.backends.fastpath import attention_backends

    flags = torch.backends.cuda
    assert flags.cudnn_sdp_enabled()
    with attention_backends(torch.device("cpu")):
        assert flags.cudnn_sdp_enabled()  # nothing changes off cuda (the negative control)
    with attention_backends(torch.device("cuda", 0)):  # only sets flags: no GPU needed
        assert not flags.cudnn_sdp_enabled()
        assert flags.flash_sdp_enabled() and flags.mem_efficient_sdp_enabled() and flags.math_sdp_enabled()
    assert flags.cudnn_sdp_enabled()  # restored


def test_lean_forward_runs_its_layers_under_the_devices_attention_backends(monkeypatch):
    from contextlib import contextmanager

    from spectool_serving.backends import lean as lean_module

    seen = []

    @contextmanager
    def spy(device):
        seen.append(device)
        yield

    monkeypatch.setattr(lean_module, "attention_backends", spy)
    model = tiny_llama(4, 2, seed=3)
    lean = LeanLlama(model, lambda m: lambda x, w=m.weight, b=m.bias: torch.nn.functional.linear(x, w, b))
    from transformers import DynamicCache

    lean(torch.tensor([[1, 2]]), torch.tensor([[0, 1]]), torch.zeros(1, 1, 2, 2), DynamicCache())
    assert seen == [torch.device("cpu")]
