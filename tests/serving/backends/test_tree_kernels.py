"""spectool's CPU kernels (``spectool_serving.backends.kernels``): the small-row GEMM's results,
batch invariance and fallbacks, that it runs on torch's own OpenMP threads, row_stats, and
where the library comes from (installed, else the cache build)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from tree_fixtures import needs_compiler, needs_kernel

from spectool_serving.backends import kernels


@needs_kernel
def test_kernel_builds_and_loads_where_the_cpu_supports_it():
    assert kernels.available()


@needs_kernel
@pytest.mark.parametrize(
    "n,k,bias", [(576, 576, False), (192, 576, True), (100, 37, True), (1536, 1536, False), (3, 16, False)]
)
def test_packed_linear_matches_f_linear(n, k, bias):
    g = torch.Generator().manual_seed(n * 7 + k)
    w = torch.randn(n, k, generator=g) * 0.05
    b = torch.randn(n, generator=g) if bias else None
    lin = kernels.PackedLinear(w, b)
    for rows in (1, 2, 5, 6, 7, 13, kernels.MAX_ROWS):
        x = torch.randn(rows, k, generator=g)
        ref = F.linear(x, w, b)
        out = lin(x)
        assert out.shape == ref.shape
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


@needs_kernel
def test_a_rows_result_does_not_depend_on_the_other_rows():
    g = torch.Generator().manual_seed(1)
    w = torch.randn(300, 576, generator=g)
    lin = kernels.PackedLinear(w)
    x = torch.randn(11, 576, generator=g)
    alone = torch.cat([lin(x[i : i + 1]) for i in range(11)])
    together = lin(x)
    assert torch.equal(alone, together)  # bit for bit: one k-ordered chain per output


@needs_kernel
def test_shapes_strides_and_wide_inputs():
    g = torch.Generator().manual_seed(2)
    w = torch.randn(64, 32, generator=g)
    lin = kernels.PackedLinear(w)
    x3 = torch.randn(2, 3, 32, generator=g)  # [B, Q, K] -> [B, Q, N]
    torch.testing.assert_close(lin(x3), F.linear(x3, w), rtol=1e-5, atol=1e-5)
    strided = torch.randn(4, 64, generator=g)[:, ::2]  # last dim not contiguous
    torch.testing.assert_close(lin(strided), F.linear(strided, w), rtol=1e-5, atol=1e-5)
    wide = torch.randn(kernels.MAX_ROWS + 1, 32, generator=g)  # prefill widths: torch's kernel
    assert torch.equal(lin(wide), F.linear(wide, w))
    with pytest.raises(RuntimeError):
        lin(torch.randn(2, 31))  # wrong K: F.linear's own shape error, not a wrong read


@needs_kernel
def test_refuses_weights_it_cannot_pack():
    with pytest.raises(ValueError):
        kernels.PackedLinear(torch.randn(4, 4, dtype=torch.bfloat16))
    with pytest.raises(ValueError):
        kernels.PackedLinear(torch.randn(4))


@needs_kernel
def test_shares_torchs_openmp_runtime():
    """A second OpenMP runtime would bring its own spinning threads to fight torch's for the
    two cores; the kernel must bind to the libgomp torch loaded."""
    import os

    assert kernels.available()
    # the kernel asks for soname libgomp.so.1; vendored copies under hashed names (scikit-learn's)
    # are other libraries' business
    with open("/proc/self/maps") as maps:
        gomps = {line.split()[-1] for line in maps if "/libgomp.so" in line}
    assert gomps == {os.path.join(os.path.dirname(torch.__file__), "lib", "libgomp.so.1")}, gomps


@needs_compiler
def test_switch_off_and_build_cache(monkeypatch, tmp_path):
    monkeypatch.setattr(kernels, "_tried", False)
    monkeypatch.setattr(kernels, "_lib", None)
    monkeypatch.setenv("SPECTOOL_CPU_KERNELS", "0")
    assert not kernels.available()
    with pytest.raises(RuntimeError, match="not available"):
        kernels.PackedLinear(torch.randn(4, 4))
    monkeypatch.setenv("SPECTOOL_KERNEL_CACHE", str(tmp_path))
    compiler = shutil.which("cc") or shutil.which("gcc")
    first = kernels._build(compiler)
    stamp = first.stat().st_mtime_ns
    assert first.parent == tmp_path and kernels._build(compiler) == first
    assert first.stat().st_mtime_ns == stamp  # reused, not rebuilt
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no temporary left behind


def _reload(monkeypatch) -> None:
    monkeypatch.setattr(kernels, "_tried", False)
    monkeypatch.setattr(kernels, "_lib", None)


@needs_kernel
def test_loads_the_library_installed_in_the_package(monkeypatch):
    installed = kernels._installed()
    if installed is None:
        pytest.skip("no install-time library for these sources (a pure install, or C edited since install)")
    assert installed.parent == Path(kernels.__file__).parent
    _reload(monkeypatch)
    monkeypatch.setattr(kernels, "_build", lambda compiler: pytest.fail("built although installed"))
    assert Path(kernels.library()._name) == installed


@needs_compiler
def test_without_the_installed_library_the_cache_build_loads(monkeypatch, tmp_path):
    """A pure wheel, a failed optional build, or C sources edited since ``pip install -e .``
    (the digest in the installed name no longer matches): built into the cache on first use."""
    _reload(monkeypatch)
    monkeypatch.setattr(kernels, "installed_name", lambda here: "libspectool_kernels-stale.so")
    monkeypatch.setenv("SPECTOOL_KERNEL_CACHE", str(tmp_path))
    assert kernels._installed() is None
    lib = kernels.library()
    assert lib is not None and Path(lib._name).parent == tmp_path
    w, x = torch.randn(70, 33), torch.randn(5, 33)
    torch.testing.assert_close(kernels.PackedLinear(w)(x), F.linear(x, w), rtol=1e-5, atol=1e-5)


@needs_kernel
def test_row_stats_match_torch_and_break_ties_like_argmax():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(9, 5000, generator=g) * 4
    logits[2, 700] = logits[2, 1200] = logits[2].max() + 1  # an exact tie for the maximum
    logits[5, 10:20] = 50.0  # ten tied top values
    argmax, ids, probs = kernels.row_stats(logits, 10)
    assert torch.equal(argmax, logits.argmax(-1))
    assert argmax[2] == 700 and ids[2, :2].tolist() == [700, 1200]
    assert ids[5].tolist() == list(range(10, 20))  # ties keep index order
    ref_p, ref_i = logits.softmax(-1).topk(10, dim=-1)
    untied = [r for r in range(9) if r not in (2, 5)]
    assert torch.equal(ids[untied], ref_i[untied])
    torch.testing.assert_close(probs, ref_p, rtol=1e-5, atol=1e-7)
    _, ids4, probs4 = kernels.row_stats(logits[:, :4], 10)  # k above the vocabulary: all of it
    assert ids4.shape == (9, 4) and torch.allclose(probs4.sum(-1), torch.ones(9))


@needs_kernel
def test_row_stats_without_the_kernel_is_torchs(monkeypatch):
    logits = torch.randn(3, 800, generator=torch.Generator().manual_seed(4))
    fast = kernels.row_stats(logits, 5)
    monkeypatch.setattr(kernels, "_lib", None)
    monkeypatch.setattr(kernels, "_tried", True)
    slow = kernels.row_stats(logits, 5)
    assert torch.equal(fast[0], slow[0]) and torch.equal(fast[1], slow[1])
    torch.testing.assert_close(fast[2], slow[2])
