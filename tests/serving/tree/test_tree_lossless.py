"""Tree decoding in the engine, with suffix drafts and the draft gate, is lossless: the same
tokens as the same engine's plain decoding — and a verifier that lies is caught by that very
comparison.

A tiny random Llama over the embedded tokenizer that writes from a small alphabet (no weights
to download): it soon repeats itself, so drafts are really accepted (checked: τ > 1)."""

from __future__ import annotations

import pytest
import torch

from spectool_bench.decode._loop import bench_engine, run_engine
from spectool_serving.tree.gate import DraftGate
from spectool_serving.tree.policy import DecodingPolicy
from tests.tree_fixtures import embedded_tokenizer, lie_in_verification, looping_llama

PROMPT = list(range(1000, 1040))


@pytest.fixture(scope="module")
def engine():
    tok, fmt = embedded_tokenizer()
    return bench_engine(looping_llama(tok, seed=3), tok, fmt)


@pytest.fixture(scope="module")
def reference(engine):
    return run_engine(engine, [PROMPT], 60).outputs


def _policy(engine, gate: bool = False, mode: str = "unispec") -> DecodingPolicy:
    return DecodingPolicy(mode, engine.runner.model.config.vocab_size, g=12, gate=gate)


@pytest.mark.parametrize("gate", [True, False])
def test_tree_decoding_in_the_engine_equals_plain_decoding(engine, reference, gate):
    res = run_engine(engine, [PROMPT], 60, _policy(engine, gate))
    assert res.outputs == reference
    # drafts were accepted, so the comparison is not vacuous; with the gate on, how many is a
    # matter of wall time (it may stop drafting on a loaded machine), so only that some were
    assert res.tau > (1.0 if gate else 1.5)
    assert (res.stats.plain_steps > 0) == gate  # the gate probes plain steps; without it none


def test_batched_rows_equal_their_plain_decoding(engine, reference):
    other = PROMPT[5:30]
    ref_other = run_engine(engine, [other], 40).outputs[0]
    res = run_engine(engine, [PROMPT, other], 40, _policy(engine))
    assert res.outputs == [reference[0][:40], ref_other]
    assert res.tau > 1.0


def test_a_corrupted_verifier_is_detected(engine, reference, monkeypatch):
    """Negative control: a verifier that vouches for every drafted child (its logits pushed
    to the child's token at its parent) makes outputs differ, and the comparison says so."""
    lie_in_verification(monkeypatch)
    assert run_engine(engine, [PROMPT], 60, _policy(engine)).outputs != reference


def test_a_gate_that_never_drafts_decodes_plainly(engine, reference, monkeypatch):
    """The gate inside the policy decides per step: forced shut, no step drafts, the
    output is the same, and the policy counts every step as plain."""
    monkeypatch.setattr(DraftGate, "should_draft", lambda self: False)
    res = run_engine(engine, [PROMPT], 12, _policy(engine, gate=True))
    assert res.outputs == [reference[0][:12]]
    assert res.stats.drafted == 0 and res.stats.plain_steps == res.steps == 11  # + the prefill's token
    assert res.tau == 1.0


def test_the_prompt_warms_the_store():
    """The prefill's last positions seed the n-gram store: after warming on a prompt whose
    logits say 4 follows 3, the policy drafts 4 after 3 before any step was verified."""
    pol = DecodingPolicy("unispec", vocab=40, g=8, gate=False)
    logits = torch.full((3, 40), -10.0)
    logits[0, 4] = logits[1, 5] = logits[2, 6] = 10.0  # after 3 -> 4, after 4 -> 5, 5 -> 6
    assert pol.warm_rows > 1 and DecodingPolicy("off", vocab=40).warm_rows == 1
    assert pol.draft("r", [9, 8, 3]) == []  # cold store
    pol.warm([1, 2, 3, 4, 5], logits)
    assert pol.draft("r", [9, 8, 3])[:3] == [4, 5, 6]
