"""The CPU proxy for CUDA-graph capture: the captured decode step
(:class:`spectool_serving.backends.static_step.StaticStep`) traces with
``torch.compile(fullgraph=True, dynamic=False)`` without a graph break, one graph per batch
bucket, and the traced step gives the eager step's logits and pool writes exactly.

A step that breaks the graph (a host sync, data-dependent Python) could not be captured on a
GPU either; the negative control plants one and must fail. ``aot_eager`` traces through
dynamo and AOTAutograd's functionalization (where in-place pool writes are checked) without a
C++ compile: each bucket takes a few seconds on 2 cores, where inductor took 45-113 s.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from spectool_serving.backends import layer_ops, lean_for
from spectool_serving.backends.layer_glue import compiled_ops, eager_ops
from spectool_serving.backends.static_step import StaticStep
from tests.tree_fixtures import tiny_llama

CAPACITY = 64  # pool slots: fixed, as in a captured step


@pytest.fixture(scope="module")
def lean():
    return lean_for(tiny_llama(4, 2, seed=3), packed=False)


def _inputs(rows: int, lengths: list[int]) -> tuple:
    """A step's static inputs for ``rows`` rows whose valid slots are 0..length-1 (padding
    rows: length 0, seeing only their new slot)."""
    gen = torch.Generator().manual_seed(rows)
    pools = [
        (torch.randn(rows, 2, CAPACITY, 12, generator=gen), torch.randn(rows, 2, CAPACITY, 12, generator=gen))
        for _ in range(3)
    ]
    ids = torch.randint(0, 97, (rows, 1), generator=gen)
    width = max(lengths)
    positions = torch.tensor(lengths)[:, None]
    slots = torch.full((rows, 1), width)
    mask = torch.full((rows, 1, 1, CAPACITY), torch.finfo(torch.float32).min)
    for b, n in enumerate(lengths):
        mask[b, 0, 0, :n] = 0
        mask[b, 0, 0, width] = 0
    return ids, positions, slots, mask, pools


def _clone(inputs: tuple) -> tuple:
    *head, pools = inputs
    return (*[t.clone() for t in head], [(k.clone(), v.clone()) for k, v in pools])


@pytest.mark.parametrize("rows", [1, 2, 4])
def test_the_decode_step_compiles_whole_and_equals_eager(lean, rows):
    torch._dynamo.reset()
    step = StaticStep(lean)
    inputs = _inputs(rows, [5 + 3 * b for b in range(rows - 1)] + [0])  # the last: a padding row
    eager_in, compiled_in = _clone(inputs), _clone(inputs)
    compiled = torch.compile(step, fullgraph=True, dynamic=False, backend="aot_eager")
    with torch.inference_mode():
        want = step(*eager_in)
        got = compiled(*compiled_in)
    assert torch.equal(got, want) and got.shape == (rows, 1, 97)
    for (k1, v1), (k2, v2) in zip(eager_in[-1], compiled_in[-1]):  # the pool written in place
        assert torch.equal(k1, k2) and torch.equal(v1, v2)
    assert not torch.equal(eager_in[-1][0][0], inputs[-1][0][0])  # ... and written at all


def test_a_graph_break_in_the_step_fails_to_compile(lean):
    """Negative control: one host-side break in the layer glue fails ``fullgraph``."""
    torch._dynamo.reset()
    glue = eager_ops()

    def swiglu(gate, up):
        torch._dynamo.graph_break()
        return glue.swiglu(gate, up)

    step = StaticStep(lean, dataclasses.replace(glue, swiglu=swiglu))
    compiled = torch.compile(step, fullgraph=True, dynamic=False, backend="aot_eager")
    with torch.inference_mode(), pytest.raises(torch._dynamo.exc.Unsupported):
        compiled(*_inputs(1, [4]))


def test_compiled_layer_glue_equals_eager():
    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(0)
    x, r, w = (torch.randn(3, 2, 48, generator=gen) for _ in range(3))
    eager, fused = eager_ops(), compiled_ops("aot_eager")
    for a, b in zip(eager.add_rms(x, r, w[0, 0], 1e-5), fused.add_rms(x, r, w[0, 0], 1e-5)):
        assert torch.equal(a, b)
    assert torch.equal(eager.rms(x, w[0, 0], 1e-5), fused.rms(x, w[0, 0], 1e-5))
    assert torch.equal(eager.rotary(x, r, w), fused.rotary(x, r, w))
    assert torch.equal(eager.swiglu(x, r), fused.swiglu(x, r))
    assert not torch.equal(eager.rotary(x, r, w), eager.rotary(x, w, r))  # the check can fail


def test_the_chooser_keeps_eager_glue_on_a_cpu():
    assert layer_ops("cpu").name == "eager"
    with pytest.raises(ValueError, match="CUDA device with Triton"):
        layer_ops("cpu", "compiled")


def test_a_glue_op_whose_compile_fails_runs_eagerly():
    """No Triton toolchain, say: the step must go on, on the eager twin, and say why."""
    from spectool_serving.backends.layer_glue import _Guarded, swiglu

    torch._dynamo.reset()

    def broken(gm, example_inputs):
        raise RuntimeError("no toolchain")

    op = _Guarded(swiglu, broken)
    x, y = torch.randn(2, 8), torch.randn(2, 8)
    assert torch.equal(op(x, y), swiglu(x, y))
    assert op.failed is not None and "no toolchain" in op.failed
    working = _Guarded(swiglu, "aot_eager")
    assert torch.equal(working(x, y), swiglu(x, y)) and working.failed is None  # control
