"""Pure parts of tree speculative decoding: tree shape, acceptance, CAST, calibration.

No SmolLM2 here; the sliding-window test uses a tiny randomly initialised Gemma 3 (the real
Gemma 3 is a 33 s load and a 262k vocabulary; the mask logic is the same).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from spectool_bench.decode._calibrate import fit_g_star, truncated_path_len
from spectool_serving.tree import DraftTree, TreeVerifier, ancestor_matrix, greedy_tree_accept
from spectool_serving.tree.cast import CastShaper, CostTable, max_valid_index
from spectool_serving.tree.unispec import ContextIndex, NGramStore, TopG, TreeDrafter
from tests.tree_fixtures import tiny_model


def _tree() -> DraftTree:
    t = DraftTree.root(10)
    a = t.add(0, 11, 0.6)
    t.add(a, 12, 0.5)
    b = t.add(0, 21, 0.3)
    t.add(b, 22, 0.2)
    return t


def test_ancestor_mask_and_depths():
    t = _tree()
    anc = ancestor_matrix(t.parents)
    assert anc.tolist()[2] == [True, True, True, False, False]
    assert anc.tolist()[4] == [True, False, False, True, True]
    assert t.depths() == [0, 1, 2, 1, 2]
    with pytest.raises(ValueError):
        DraftTree([1, 2], [-1, 1]).depths()


def test_greedy_accept_follows_argmax_and_returns_bonus():
    t = _tree()
    # target[node] = verifier argmax after that node
    assert greedy_tree_accept(t.parents, t.tokens, [21, 0, 0, 22, 99]) == ([0, 3, 4], 99)
    assert greedy_tree_accept(t.parents, t.tokens, [5, 0, 0, 0, 0]) == ([0], 5)


def test_algorithm1_worked_example():
    # Built by hand from the algorithm's definition (the paper's own example could not be
    # found here): index 3 fails against index 0, yet index 4 is valid at C = 0.4.
    u = [0, 0.8, 1.1, 1.3, 2.0]
    c = [0, 1, 1.2, 3, 3.2]
    assert max_valid_index(u, c, 0.5) == 2  # j=4 fails against i=2: 0.9 / 2.0 < 0.5
    assert max_valid_index(u, c, 0.4) == 4
    assert max_valid_index(u, c, 10.0) == 0


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(0.001, 1.0), min_size=1, max_size=30),
    st.floats(0.01, 5.0),
    st.floats(0.0, 3.0),
    st.floats(0.0, 2.0),
)
def test_algorithm1_reduces_to_eagle_topk_for_linear_cost(gains, a, b, thr):
    # Theorem 4.1 setting: c_j = A j + b and confidences sorted descending -> top-K with
    # K = #{p >= A C}, the EAGLE-2 selection.
    p = np.sort(np.asarray(gains))[::-1]
    u = np.concatenate([[0.0], np.cumsum(p)])
    c = a * np.arange(len(u)) + b
    k = max_valid_index(u, c, thr)
    assert k == int((p >= a * thr - 1e-12).sum())
    if k < len(p):  # any budget K is reached by some threshold
        mid = (p[k - 1] + p[k]) / 2 / a if k else (p[0] * 1.5) / a
        assert max_valid_index(u, c, mid) == k


def test_cost_table_select_and_monotone_curve():
    table = CostTable(
        [1], [128, 512], [1, 2, 4, 8], {"1/128": [1.0, 1.5, 1.2, 2.0], "1/512": [2.0, 2.0, 2.0, 4.0]}
    )
    assert table.select(100) == 128 and table.select(300) == 512 and table.select(9999) == 512
    curve = table.curve(1, 100)
    assert curve[1] == pytest.approx(1.2) and np.all(np.diff(curve) >= 0)


def test_cast_shrinks_trees_when_cost_grows():
    cheap = CostTable([1, 4], [256], [1, 64], {"1/256": [1.0, 1.3], "4/256": [1.0, 40.0]})
    shaper = CastShaper(cheap, c1=0.2, c2=0.2)
    cum = np.array([1.0, 0.5, 0.4, 0.3, 0.2, 0.1, 0.1, 0.05])
    shaper.begin_step(1, 100)
    small_batch = shaper.final_size(cum)
    shaper.begin_step(4, 100)
    big_batch = shaper.final_size(cum)
    assert small_batch == len(cum) and big_batch < small_batch


def test_top_keeps_the_best_nodes_as_a_closed_tree():
    t = _tree()  # root; 11 (.6) -> 12 (.5); 21 (.3) -> 22 (.2)
    assert t.best_first() == [0, 1, 2, 3, 4]
    top = t.top(3)
    assert top.tokens == [10, 11, 12] and top.parents == [-1, 0, 1]
    assert t.top(1).tokens == [10] and t.top(99) is t
    # a child scored above its parent still waits for the parent
    odd = DraftTree.root(1)
    p = odd.add(0, 2, 0.2)
    odd.add(p, 3, 0.9)
    odd.add(0, 4, 0.5)
    assert odd.best_first() == [0, 3, 1, 2] and odd.top(2).tokens == [1, 4]
    assert odd.top(3).tokens == [1, 2, 4] and odd.top(3).parents == [-1, 0, 0]


def _chain(conf: list[float]) -> DraftTree:
    t = DraftTree.root(0)
    for i, c in enumerate(conf):
        t.add(i, 100 + i, c)
    return t


def test_batch_width_lets_no_single_row_widen_the_whole_batch():
    # four rows verified together: each extra token per row costs 40 % of a decoding step
    table = CostTable([4], [256], [1, 2, 8], {"4/256": [1.0, 1.4, 3.8]})
    shaper = CastShaper(table)
    shaper.begin_step(4, 100)
    hopeful = _chain([0.95] * 7)
    hopeless = _chain([0.05, 0.02, 0.01])
    assert shaper.batch_width([hopeful] * 4) == 8  # 7.65 tokens per row for 3.8 steps
    # alone, the hopeful row's whole chain pays (7.65 tokens for 3.8 steps beats 1 for 1);
    # in this batch, plain decoding's 4 tokens per step beats 4 + 1.1 tokens for 1.4 steps
    assert shaper.batch_width([hopeful, hopeless, hopeless, hopeless]) == 1
    assert shaper.batch_width([hopeless] * 4) == 1
    shaper.overhead = 5.0  # a fixed per-step cost makes fewer, wider steps worth more
    assert shaper.batch_width([hopeful, hopeless, hopeless, hopeless]) == 8


def test_a_refilling_batch_counts_tokens_not_the_slowest_row():
    table = CostTable([2], [256], [1, 2, 8], {"2/256": [1.0, 1.2, 2.4]})
    shaper = CastShaper(table)
    shaper.begin_step(2, 100)
    hopeful, hopeless = _chain([0.95] * 7), _chain([0.05, 0.02, 0.01])
    assert shaper.batch_width([hopeful, hopeless]) == 8  # wide drafts pay for the batch
    assert shaper.batch_width([hopeless, hopeless]) == 1  # and do not where nothing is likely


def test_context_index_finds_latest_continuations():
    idx = ContextIndex([1, 2, 3, 4, 9, 2, 3, 5, 6, 2, 3])
    conts = idx.continuations(depth=2, branches=3)
    assert conts[0] == (2, [5, 6]) and (2, [4, 9]) in conts


def test_drafter_builds_closed_tree_from_store_and_context():
    store = NGramStore(vocab=50, k=3)
    store.update(np.array([3]), np.array([-1]), np.array([[4, 7, 8]]), np.array([[0.6, 0.2, 0.1]]))
    store.update(np.array([4]), np.array([-1]), np.array([[5, 6, 9]]), np.array([[0.9, 0.05, 0.01]]))
    drafter = TreeDrafter(store, TopG(g=5, k=3, r=0.05), depth=3)
    tree = drafter.draft(ContextIndex([1, 3, 20, 21, 3]))
    assert len(tree) == 5 and tree.tokens[0] == 3
    kids = {tree.tokens[i] for i in range(1, len(tree)) if tree.parents[i] == 0}
    assert {4, 20} <= kids  # store candidate and context continuation side by side
    assert all(tree.parents[i] < i for i in range(1, len(tree)))


def test_truncated_path_len():
    t = _tree()
    assert truncated_path_len(t, [0, 1, 2], 5) == 3
    assert truncated_path_len(t, [0, 3, 4], 2) == 1  # only root and node 1 are in the top-2


@pytest.mark.parametrize("quad", [0.0002, 0.0006, 0.002])
def test_calibration_recovers_synthetic_optimum(quad):
    # s: a convex quadratic cost (a degree-2 spline represents it), tau: a saturating cubic.
    gs = [1, 2, 4, 6, 8, 12, 16, 20, 24, 32, 40, 48, 64]
    s_true = lambda g: 1.0 + 0.01 * g + quad * g**2  # noqa: E731
    tau_true = lambda g: 1.0 + 0.12 * g - 0.0022 * g**2 + 0.000014 * g**3  # noqa: E731
    g = np.asarray(gs, dtype=float)
    got, method = fit_g_star(gs, s_true(g).tolist(), tau_true(g).tolist())
    dense = np.arange(1, 65)
    want = int(dense[np.argmax(tau_true(dense) / s_true(dense))])
    assert method == "fit" and abs(got - want) <= 1


def test_pooled_tau_counts_each_prompt_alike():
    from spectool_bench.decode._calibrate import pooled_tau

    copy_heavy, fresh = [1.0, 2.0, 4.0], [1.0, 1.0, 1.0]
    assert pooled_tau([copy_heavy, fresh]) == pytest.approx([1.0, 2**0.5, 2.0])
    # a per-step mean would let the fresh prompt's many short steps (here 4x as many) win
    steps = (np.asarray(copy_heavy) * 1 + np.asarray(fresh) * 4) / 5
    assert pooled_tau([copy_heavy, fresh])[2] > steps[2]


def test_calibration_falls_back_to_grid_when_degenerate():
    assert fit_g_star([1, 4, 8], [1.0, 1.1, 1.3], [1.0, 1.8, 1.9]) == (4, "grid")


def test_sliding_window_tree_matches_full_forward():
    sizes = dict(vocab_size=64, hidden_size=32, intermediate_size=64, head_dim=16)
    layers = ["sliding_attention", "full_attention"]
    model = tiny_model("gemma3", 2, 1, attn=None, sliding_window=4, layer_types=layers, **sizes)
    prompt = torch.randint(0, 64, (14,)).tolist()  # longer than the window
    verifier = TreeVerifier(model)  # sliding layers: a mask per layer type
    _, roots = verifier.prefill([prompt])
    t = DraftTree.root(roots[0])
    a = t.add(0, 5, 0.5)
    b = t.add(a, 7, 0.5)
    c = t.add(0, 9, 0.4)
    d = t.add(c, 11, 0.3)
    e = t.add(b, 13, 0.2)
    logits = verifier.forward([t])
    for path in ([0, a, b, e], [0, c, d]):
        seq = prompt + [t.tokens[i] for i in path[1:]]
        with torch.no_grad():
            full = model(torch.tensor([seq])).logits[0, -len(path) :]
        assert torch.allclose(full, logits[0, path], atol=1e-4)
    verifier.commit([[0, c, d]])
    after = verifier.forward([DraftTree.root(3)])
    with torch.no_grad():
        full = model(torch.tensor([prompt + [9, 11, 3]])).logits[0, -1]
    assert torch.allclose(full, after[0, 0], atol=1e-4)


def test_shipped_prompt_set_covers_categories_and_languages():
    from spectool_bench.decode._tree import load_prompts

    items = load_prompts()
    cats = {i["category"] for i in items}
    assert cats == {"chat", "translation", "summarization", "qa", "math", "rag", "code", "agentic"}
    assert [i["category"] for i in load_prompts(quick=True)] == sorted(
        cats, key=[i["category"] for i in items].index
    )
    assert any(len(i["messages"]) > 1 for i in items)  # multi-turn
    text = " ".join(m["content"] for i in items for m in i["messages"])
    assert "资料" in text and "fährt" in text and "¿" in text  # multilingual items
    for item in (i for i in items if i["category"] == "agentic"):  # real tool-calling transcripts
        calls = [m for m in item["messages"] if m["role"] == "assistant"]
        outputs = [json.loads(m["content"]) for m in item["messages"] if m["role"] == "tool"]
        assert len(calls) >= 2 and len(outputs) == len(calls)
        assert all(m["content"].startswith("<tool_call>") for m in calls)


def test_calibration_prompts_cover_every_category_and_are_held_out():
    from spectool_bench.decode._tree import load_calibration_prompts, load_prompts

    cal, items = load_calibration_prompts(), load_prompts()
    assert {i["category"] for i in cal} == {i["category"] for i in items}
    bench_texts = {m["content"] for i in items for m in i["messages"]}
    assert not any(m["content"] in bench_texts for i in cal for m in i["messages"])
    assert not {i["id"] for i in cal} & {i["id"] for i in items}


def test_bench_summary_geometric_mean_over_categories():
    from spectool_bench.decode._summary import summarize as _summarize

    def row(cat, ar, pl3, pl10, us):
        mk = lambda t: {"tok_s": t, "identical": True}  # noqa: E731
        return {
            "category": cat,
            "batch": 1,
            "methods": {
                "ar": mk(ar),
                "pl3": mk(pl3),
                "pl10": mk(pl10),
                "unispec": {**mk(us), "tau": 2.0, "draft": 8.0},
            },
        }

    s = _summarize([row("a", 10, 20, 10, 40), row("b", 10, 10, 10, 10)])["batch1"]
    assert s["speedup_vs_ar"]["unispec"] == pytest.approx(2.0)  # sqrt(4 * 1)
    assert s["best_prompt_lookup"] == "pl3"
    assert s["speedup_vs_best_pl"]["unispec"] == pytest.approx(2.0 / 2**0.5)


def test_decode_phase_ratio_leaves_the_prefill_out():
    """A long prompt and a short answer: the whole-request ratio is held down by the prefill
    both arms pay; the decode-phase ratio is the speculation alone."""
    from spectool_bench.decode._summary import summarize as _summarize

    def row(cat, ar_total, tree_total, prefill, tokens=40):
        def mk(total):
            decode_s = total - prefill
            return {"tok_s": tokens / total, "decode_tok_s": tokens / decode_s, "identical": True}

        return {
            "category": cat,
            "batch": 1,
            "methods": {"ar": mk(ar_total), "engine_ar": mk(ar_total), "both": mk(tree_total)},
        }

    # 0.8 s of prefill; decoding 0.8 s plain against 0.2 s with trees
    s = _summarize([row("agentic", 1.6, 1.0, 0.8)])["batch1"]
    assert s["speedup_vs_engine_ar"]["both"] == pytest.approx(1.6)
    assert s["decode_phase_vs_engine_ar"]["both"] == pytest.approx(4.0)
    assert s["decode_phase_per_category"]["both"] == {"agentic": pytest.approx(4.0)}
    # rows measured without the phase (older results) summarise as before, without it
    old = _summarize([{"category": "a", "batch": 1, "methods": {"ar": {"tok_s": 1.0, "identical": True}}}])
    assert old["batch1"]["decode_phase_vs_engine_ar"] == {}


def test_decoding_policy_drafts_chains_and_learns_from_logits():
    from spectool_serving.tree.policy import DecodingPolicy, best_chain

    t = _tree()
    assert best_chain(t) == [11, 12]
    pol = DecodingPolicy("unispec", vocab=40, g=8)
    assert pol.draft("r", [1, 2, 3]) == []  # empty store, no context match
    logits = torch.full((3, 40), -10.0)
    logits[0, 4] = logits[1, 5] = logits[2, 6] = 10.0  # after 3 -> 4, after 4 -> 5, 5 -> 6
    pol.observe(2, [3, 4, 5], logits, n_accepted=2)
    assert pol.draft("r", [1, 2, 3]) == [4, 5, 6]
    assert pol.stats.tau == 3.0
    assert DecodingPolicy("off", vocab=40).draft("r", [1, 2, 3]) == []
    with pytest.raises(ValueError):
        DecodingPolicy("fast", vocab=40)


def test_engine_policy_fits_a_step_of_trees_to_one_width():
    from spectool_serving.tree.policy import DecodingPolicy

    table = CostTable([3], [256], [1, 2, 8], {"3/256": [1.0, 1.4, 3.8]})
    pol = DecodingPolicy("cast", vocab=40, table=table)
    pol.draft_tree("a", [1, 2, 3], batch=3)  # begin_step: three rows share the forward
    hopeful, hopeless = _chain([0.95] * 7), _chain([0.05, 0.02, 0.01])
    assert [len(t) for t in pol.fit_batch([hopeful, hopeless, hopeless])] == [1, 1, 1]
    assert [len(t) for t in pol.fit_batch([hopeful] * 3)] == [8, 8, 8]
    assert pol.fit_batch([hopeless]) == [hopeless]  # one row: its own C3 already decided
    assert DecodingPolicy("unispec", vocab=40).fit_batch([hopeful, hopeless]) == [hopeful, hopeless]


def test_calibration_fit_survives_sparse_large_g_grid():
    # measured on this CPU under load: uniform knots left empty intervals and a negative s fit
    gs = [1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64]
    s = [5.88, 8.39, 8.39, 8.39, 8.39, 8.82, 9.25, 9.85, 10.46, 17.45, 24.44]
    tau = [1.0, 1.22, 1.57, 1.7, 1.83, 2.04, 2.13, 2.22, 2.22, 2.22, 2.22]
    g, method = fit_g_star(gs, s, tau, tolerance=0.0)  # the fit itself, not the data check
    assert method == "fit" and 8 <= g <= 32


def test_grouped_attention_equals_repeated_kv_attention_and_expands_the_mask_once():
    """Folding each KV group's query heads into the query axis is the same attention as
    repeating K/V per head; the grouped mask is built once per forward, not per layer."""
    import torch.nn.functional as F

    from spectool_serving.backends import fastpath

    torch.manual_seed(0)
    q, k, v = torch.randn(2, 6, 5, 8), torch.randn(2, 2, 9, 8), torch.randn(2, 2, 9, 8)
    mask = torch.zeros(2, 1, 5, 9).masked_fill(torch.rand(2, 1, 5, 9) < 0.3, -1e9)
    mask[..., -5:] = 0  # every query sees at least the new tokens
    out, _ = fastpath.grouped_attention(torch.nn.Module(), q, k, v, mask)  # [B, Q, H, D]
    ref = F.scaled_dot_product_attention(
        q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1), attn_mask=mask
    )
    assert torch.allclose(out, ref.transpose(1, 2), atol=1e-5)
    assert fastpath._grouped_mask(mask, 3, 9) is fastpath._grouped_mask(mask, 3, 9)


def test_pack_widths_take_the_most_valuable_widths_that_fit_the_memory_cap(monkeypatch):
    """Each packed width is a full copy of the linear weights: the cap decides how many."""
    from spectool_serving.backends import fastpath

    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.Linear(512, 512))
    copy_gb = 2 * 512 * 512 * 4 / 2**30
    monkeypatch.setenv("SPECTOOL_PACK_MAX_GB", str(copy_gb * 2.5))
    assert fastpath.pack_widths(model) == fastpath.PACK_WIDTHS[:2]
    monkeypatch.setenv("SPECTOOL_PACK_MAX_GB", "0")
    assert fastpath.pack_widths(model) == ()
    monkeypatch.setenv("SPECTOOL_PACK_MAX_GB", "lots")
    with pytest.raises(ValueError, match="SPECTOOL_PACK_MAX_GB"):
        fastpath.pack_widths(model)


def test_reserve_slots_names_an_uninitialized_layer_and_grows_an_initialized_one():
    """A layer without keys gets a clear error (it was an AttributeError on None); once
    initialized, the buffers hold ``need`` slots and the layer's keys are their prefix."""
    from transformers.cache_utils import DynamicLayer

    from spectool_serving.backends.fastpath import reserve_slots

    like = torch.empty(1, 2, 0, 4)
    layer = DynamicLayer()
    with pytest.raises(ValueError, match="lazy_initialization"):
        reserve_slots(layer, like, 3)
    layer.lazy_initialization(like, like)
    kbuf, vbuf = reserve_slots(layer, like, 3)
    assert kbuf.shape[-2] >= 3 and vbuf.shape == kbuf.shape
    kbuf[:, :, :2] = 1.0
    layer.keys, layer.values = kbuf[:, :, :2], vbuf[:, :, :2]  # as GrowableLayer.update leaves them
    assert reserve_slots(layer, like, 3)[0] is kbuf  # still the layer's: kept, not reallocated
    grown, _ = reserve_slots(layer, like, kbuf.shape[-2] + 1)
    assert grown is not kbuf and bool((grown[:, :, :2] == 1.0).all())  # the cached slots came along


def test_calibration_keeps_the_grid_when_the_cubic_bulges_past_a_saturated_tau():
    # fp32 calibration measured here: τ flat from g = 12, so the cubic peaks near g = 19,
    # where the measurements give ~10 % less than at g = 8
    gs = [1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64]
    s = [41.1, 42.7, 51.7, 56.5, 58.1, 67.9, 68.1, 76.4, 88.7, 115.5, 138.6]
    tau = [1.0, 1.2, 1.44, 1.68, 1.88, 2.08, 2.08, 2.08, 2.08, 2.08, 2.08]
    assert fit_g_star(gs, s, tau) == (8, "grid")


def test_repeats_keep_the_median_run_and_the_spread_of_paired_ratios():
    """--repeat N: a row keeps the run of median time (one real run: its tok/s and τ go
    together), every run's seconds, "identical" only if every run was; the per-category ratio
    against engine_ar is the median runs', and its spread the repetition-paired ratios'."""
    from spectool_bench.decode._summary import category_table, merge_repeats, summarize

    def rep(ar_s, both_s, tau, identical=True):
        mk = lambda s, **k: {"seconds": s, "tok_s": 48 / s, "identical": True, **k}  # noqa: E731
        return {"ar": mk(3.0), "engine_ar": mk(ar_s), "both": {**mk(both_s, tau=tau), "identical": identical}}

    # three runs; the second is slowed down for both methods alike (a burst of load)
    reps = [rep(2.0, 1.0, 3.0), rep(4.0, 3.0, 2.5), rep(2.2, 1.2, 3.1)]
    m = merge_repeats(reps)
    assert m["both"]["seconds"] == 1.2 and m["both"]["tau"] == 3.1  # the median: run 3's fields
    assert m["engine_ar"]["seconds"] == 2.2 and m["both"]["seconds_runs"] == [1.0, 3.0, 1.2]
    assert m["both"]["vs_engine_ar_runs"] == pytest.approx([2.0, 4 / 3, 2.2 / 1.2])
    assert m["both"]["identical"]
    # an even count keeps the lower median, a real run rather than an average of two
    assert merge_repeats(reps[:2])["both"]["seconds"] == 1.0
    # negative control: one run of three not identical makes the row not identical
    assert not merge_repeats([*reps[:2], rep(2.2, 1.2, 3.1, identical=False)])["both"]["identical"]
    rows = [{"category": "qa", "batch": 1, "methods": m}]
    s = summarize(rows)["batch1"]
    assert s["per_category_vs_engine_ar"]["both"]["qa"] == pytest.approx(2.2 / 1.2)
    assert s["per_category_vs_engine_ar_spread"]["both"]["qa"] == pytest.approx([4 / 3, 2.0])
    assert s["worst_category_vs_engine_ar"]["both"] == ("qa", pytest.approx(2.2 / 1.2))
    assert "| both | 1.83 (1.33–2.00) |" in category_table({"batch1": s})
