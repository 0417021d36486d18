"""DraftGate: drafting stops where plain steps deliver more tokens per second, and resumes."""

from __future__ import annotations

import pytest

from spectool_serving.tree.gate import DraftGate


def _run(gate: DraftGate, steps: int, drafted: tuple[int, float], plain: tuple[int, float]) -> list[bool]:
    """Feed ``steps`` steps whose outcome depends only on their kind; the decisions made."""
    seen = []
    for _ in range(steps):
        d = gate.should_draft()
        seen.append(d)
        gate.observe(d, *(drafted if d else plain))
    return seen


def test_drafting_that_pays_stays_on_with_rare_plain_probes():
    gate = DraftGate(probe_every=12)
    seen = _run(gate, 120, drafted=(3, 1.3), plain=(1, 1.0))
    assert gate.on
    plain = seen.count(False)
    assert 1 <= plain <= 120 // 48 + 1  # a clear win (2.3x): re-measured every 48 steps
    narrow = _run(DraftGate(probe_every=12), 120, drafted=(3, 2.5), plain=(1, 1.0))
    assert 120 // 12 - 1 <= narrow.count(False) <= 120 // 12 + 1  # 1.2x: every 12 steps


def test_drafting_that_does_not_pay_is_stopped_and_probed_with_growing_backoff():
    gate = DraftGate(first_backoff=4, max_backoff=32)
    seen = _run(gate, 200, drafted=(1, 1.3), plain=(1, 1.0))
    assert not gate.on
    assert seen[:3] == [True, True, False]  # the first plain probe comes early
    off = seen[4:]
    probes = [i for i, d in enumerate(off) if d]
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert gaps == sorted(gaps) and gaps[-1] == 33  # back-off doubles up to max_backoff
    assert seen.count(True) < 15


def test_drafting_resumes_when_it_pays_again():
    gate = DraftGate(first_backoff=2)
    _run(gate, 30, drafted=(1, 1.5), plain=(1, 1.0))
    assert not gate.on
    _run(gate, 40, drafted=(6, 1.3), plain=(1, 1.0))  # the text turned copy-heavy
    assert gate.on


def test_noise_within_the_margin_keeps_drafting_on():
    gate = DraftGate(margin=0.9)
    _run(gate, 60, drafted=(1, 1.05), plain=(1, 1.0))  # 5 % slower: within the margin
    assert gate.on


@pytest.mark.parametrize("kw", [{"alpha": 0.0}, {"probe_every": 1}, {"first_backoff": 0}, {"empty_limit": 0}])
def test_bad_settings_are_refused(kw):
    with pytest.raises(ValueError):
        DraftGate(**kw)


def test_a_gate_shut_early_probes_at_least_every_sixteen_steps_by_default():
    """Two unlucky early steps (a cold store) must not cost a whole answer's drafting: the
    default back-off stops doubling at 16 (the negative control: at 64 it goes on)."""
    for cap, widest in ((None, 17), (64, 65)):
        gate = DraftGate() if cap is None else DraftGate(max_backoff=cap)
        seen = _run(gate, 300, drafted=(1, 1.3), plain=(1, 1.0))
        probes = [i for i, d in enumerate(seen) if d and i > 4]
        assert max(b - a for a, b in zip(probes, probes[1:])) == widest


def _run_empty(gate: DraftGate, steps: int, empty: bool) -> list[bool]:
    """Steps whose drafts are empty (``empty``) or win by far; plain steps lose."""
    seen = []
    for _ in range(steps):
        d = gate.should_draft()
        seen.append(d)
        gate.observe(d, *((3, 1.0) if d else (1, 1.0)), empty=d and empty)
    return seen


def test_steps_that_find_nothing_to_draft_stop_drafting_and_probes_back_off():
    """Drafted steps whose every tree was its root ran plainly and paid the lookups: after
    ``empty_limit`` in a row drafting stops, and a probe that finds nothing is a lost probe
    (the back-off grows). Control: the same steps reported as drafted keep drafting on."""
    gate = DraftGate(first_backoff=4, max_backoff=16, empty_limit=3)
    seen = _run_empty(gate, 60, empty=True)
    assert seen[:4] == [True, True, True, False] and not gate.on
    probes = [i for i, d in enumerate(seen) if d][3:]
    assert [b - a for a, b in zip(probes, probes[1:])] == [9, 17, 17]  # back-off 8, 16, 16
    assert seen.count(True) == 3 + len(probes)
    control = DraftGate(first_backoff=4, max_backoff=16, empty_limit=3)
    assert _run_empty(control, 60, empty=False).count(True) > 50 and control.on


def test_an_empty_step_does_not_count_as_a_drafted_one():
    """Empty steps teach neither rate: drafting that wins stays on through a few of them."""
    gate = DraftGate(empty_limit=3)
    _run(gate, 20, drafted=(3, 1.0), plain=(1, 1.0))
    for _ in range(2):  # fewer than empty_limit in a row
        assert gate.should_draft()
        gate.observe(True, 1, 1.0, empty=True)
    _run(gate, 1, drafted=(3, 1.0), plain=(1, 1.0))
    gate.observe(True, 1, 1.0, empty=True)
    assert gate.on  # the run of empty steps was broken by a drafting one


def test_a_closed_gate_probes_with_a_few_best_nodes_only():
    """A probe asks whether drafting pays again: the policy verifies the best PROBE_NODES of
    its tree, not all of it. Control: while drafting is on, the same context drafts the full
    tree (TopG g=8)."""
    import torch

    from spectool_serving.tree.policy import PROBE_NODES, DecodingPolicy

    pol = DecodingPolicy("unispec", vocab=40, g=8)
    chain = list(range(3, 14))
    logits = torch.full((len(chain), 40), -10.0)
    for i, nxt in enumerate(chain[1:]):
        logits[i, nxt] = 10.0  # after 3 -> 4, after 4 -> 5, ...
    pol.observe(2, chain, logits, n_accepted=0)
    assert len(pol.draft_tree("r", [1, 2, 3])) == 8  # the gate is open: the full tree
    for _ in range(3):  # steps that drafted nothing close the gate (empty_limit)
        assert pol.should_draft()
        pol.end_step(1, 1.0, 0.5)
    assert not pol.should_draft()
    probe = pol.draft_tree("r", [1, 2, 3])
    assert PROBE_NODES < 8 and len(probe) == PROBE_NODES and probe.tokens == [3, 4, 5, 6]
