"""Tree decoding with suffix drafts and the draft gate is lossless: the same tokens as plain
decoding on the same forward — and a verifier that lies is caught by that very comparison.

A tiny random Llama (no weights here to download); random models fall into loops, so the
suffix index finds long matches and drafts are really accepted (checked: τ > 1)."""

from __future__ import annotations

import pytest
import torch

from spectool_serving.tree import TreeVerifier, decode
from tests.tree_fixtures import tiny_llama

PROMPT = [5, 6, 7, 8, 9, 10, 11] * 5 + [5, 6, 7]


@pytest.fixture(scope="module")
def model():
    return tiny_llama(4, 2, seed=3)


@pytest.fixture(scope="module")
def reference(model):
    return decode(model, [PROMPT], 60, "ar").outputs


@pytest.mark.parametrize("gate", [True, False])
def test_suffix_tree_decoding_equals_plain_decoding(model, reference, gate):
    res = decode(model, [PROMPT], 60, "unispec", g=12, gate=gate)
    assert res.outputs == reference
    # drafts were accepted, so the comparison is not vacuous; with the gate on, how many is a
    # matter of wall time (it may stop drafting on a loaded machine), so only that some were
    assert res.tau > (1.0 if gate else 1.5)
    assert (res.plain_steps > 0) == gate  # the gate probes plain steps; without it none


def test_batched_rows_equal_their_plain_decoding(model, reference):
    other = [3, 4] * 10
    ref_other = decode(model, [other], 40, "ar").outputs[0]
    res = decode(model, [PROMPT, other], 40, "unispec", g=8)
    assert res.outputs == [reference[0][:40], ref_other]


def test_a_corrupted_verifier_is_detected(model, reference, monkeypatch):
    """Negative control: a verifier that vouches for every drafted child (its logits pushed
    to the first child's token) makes outputs differ, and the comparison says so."""
    real = TreeVerifier.forward

    def lying(self, trees, width=1):
        logits = real(self, trees, width).clone()  # inference tensors are read-only
        for b, t in enumerate(trees):
            for i in range(1, len(t)):
                logits[b, t.parents[i], t.tokens[i]] = torch.finfo(logits.dtype).max
        return logits

    monkeypatch.setattr(TreeVerifier, "forward", lying)
    res = decode(model, [PROMPT], 60, "unispec", g=12, gate=False)
    assert res.outputs != reference


def test_calibration_sees_every_step_even_where_a_gate_would_stop_drafting(model, monkeypatch):
    """τ(g) is measured per step; a gate that turned drafting off would leave it no steps
    (or only the ones where drafting paid). Calibration drafts every step."""
    import importlib

    from spectool_serving.tree.calibrate import measure_tau
    from spectool_serving.tree.gate import DraftGate

    class Never(DraftGate):  # the gate's decision forced: drafting never pays
        def should_draft(self) -> bool:
            return False

    # the module, not the package's re-exported function of the same name
    monkeypatch.setattr(importlib.import_module("spectool_serving.tree.decode"), "DraftGate", Never)
    assert decode(model, [PROMPT], 12, "unispec", g=4).plain_steps == 12  # the patch bites
    tau = measure_tau(model, [PROMPT], [1, 4], 12)
    assert tau[0] == pytest.approx(1.0) and tau[1] > 1.0
