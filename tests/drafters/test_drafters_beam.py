"""λ spent on distinct guesses: grammar-constrained beam search and the confidence gate.

On a tiny random Llama (float64) over SmolLM2's real tokenizer: what it writes is nonsense, but
the search is checked on what does not depend on sense — distinct canonical answers, ranked by
sequence log-probability, the greedy row's answer among them with its own score when the beam
covers every answer, and a gate that drops an unlikely draft (with a control that keeps it).
"""

from __future__ import annotations

import math
import threading

import pytest

from spectool import DraftRequest
from spectool.drafters import LocalDrafter, LocalDrafterOptions
from spectool.drafters._common import call_key, tool_schemas
from spectool.drafters.local._beam import beam_rows
from spectool.drafters.local._decode import DecodeInputs, DecodeStats, PrefixCache, decode_rows
from spectool.drafters.local._grammar import GrammarConstraint
from spectool.drafters.local._local import _answer_key
from spectool_bench.drafters._prompt_eval import valid

from .conftest import fn_tool, tiny_llama_fixture

pytest.importorskip("xgrammar")


def _fn(name, props):
    return fn_tool(name, props, description=name.replace("_", " "))


#: Three complete answers in all (an enum of three): a beam of width 3 covers every one.
UNIT = [_fn("set_unit", {"unit": {"type": "string", "enum": ["celsius", "fahrenheit", "kelvin"]}})]
#: Free strings: many answers, none likely under a random model.
FREE = [_fn("get_weather", {"city": {"type": "string"}}), _fn("add", {"a": {"type": "string"}})]
ASK = [{"role": "user", "content": "Weather in Paris in celsius please, and add 2"}]


tiny = tiny_llama_fixture(seed=11)


def _search(tiny, tools, width, key=None):
    import torch

    model, tok = tiny
    grammar = GrammarConstraint(tok, model.get_output_embeddings().weight.shape[0], max_calls=1)
    drafter = LocalDrafter(tiny)
    ids = drafter.token_ids(drafter._loaded, DraftRequest(ASK, tools, 1))
    stats = DecodeStats()
    inputs = DecodeInputs(
        *(model, tok, grammar.compiled(tools), grammar.xgr, ids, PrefixCache(), threading.Event()),
        max_new_tokens=40,
        stop_ids=grammar.stop_token_ids,
        vocab=grammar.vocab_size,
        stats=stats,
        max_string_length=12,
    )
    with torch.inference_mode():
        if width == 0:  # the greedy row, for comparison
            rows = decode_rows(inputs, rows=1)
        else:
            rows = beam_rows(inputs, width=width, key=key)
    return [tok.decode(r) for r in rows], stats.row_logps


def test_beam_returns_distinct_calls_ranked_by_log_probability(tiny):
    schemas = tool_schemas(FREE)
    texts, logps = _search(tiny, FREE, 4, key=lambda t: _answer_key(t, schemas))
    assert len(texts) == len(logps) == 4
    assert logps == sorted(logps, reverse=True) and all(lp <= 0 for lp in logps)
    calls = [_answer_key(t, schemas) for t in texts]
    assert None not in calls and len(set(calls)) == 4  # four different canonical guesses
    assert sum(math.exp(lp) for lp in logps) <= 1 + 1e-9  # disjoint answers of one distribution


def test_beam_dedupe_is_by_the_key_it_is_given(tiny):
    # control for the distinctness above: a key that names every answer alike leaves one row
    texts, logps = _search(tiny, FREE, 4, key=lambda t: "same")
    assert len(texts) == 1 and len(logps) == 1


def test_a_beam_that_covers_every_answer_holds_the_greedy_one_with_its_score(tiny):
    texts, logps = _search(tiny, UNIT, 3)
    greedy, greedy_logp = _search(tiny, UNIT, 0)
    assert sorted(t.split('"unit": ')[1] for t in texts) == sorted(
        f'"{u}"}}}}]' for u in ("celsius", "fahrenheit", "kelvin")
    )  # all three answers, once each
    # (their probabilities need not sum to 1: an answer's mass is spread over its tokenizations,
    # and the beam keeps one)
    assert greedy[0] in texts
    assert logps[texts.index(greedy[0])] == pytest.approx(greedy_logp[0], abs=1e-6)
    assert logps[0] >= greedy_logp[0] - 1e-9  # the best guess is at least the greedy one


@pytest.mark.anyio
async def test_local_drafter_beam_proposes_lambda_valid_distinct_calls(tiny):
    drafter = LocalDrafter(
        tiny, LocalDrafterOptions(diversity="beam", max_string_length=12, max_new_tokens=40)
    )
    schemas = tool_schemas(FREE)
    calls = await drafter.propose(DraftRequest(ASK, FREE, samples=3))
    assert len(calls) == 3 and all(valid(c, schemas) for c in calls)
    assert len({call_key(c, schemas) for c in calls}) == 3
    logps = drafter.last_stats.row_logps
    assert logps == sorted(logps, reverse=True) and drafter.last_confidence == pytest.approx(
        math.exp(logps[0])
    )


@pytest.mark.anyio
@pytest.mark.parametrize("diversity", ["branch", "beam"])
async def test_the_gate_drops_an_unlikely_draft_and_keeps_a_likely_enough_one(tiny, diversity):
    def drafter(threshold):
        options = LocalDrafterOptions(
            diversity=diversity, min_confidence=threshold, max_string_length=12, max_new_tokens=40
        )
        return LocalDrafter(tiny, options)

    request = DraftRequest(ASK, FREE, samples=2)
    open_gate = drafter(0.0)
    kept = await open_gate.propose(request)
    confidence = open_gate.last_confidence
    assert kept and confidence is not None and 0 < confidence < 0.5  # a random model is unsure
    strict = drafter(min(1.0, confidence * 2))
    assert await strict.propose(request) == []  # below the threshold: nothing is drafted
    assert strict.last_confidence == pytest.approx(confidence)
    lenient = drafter(confidence / 2)
    assert await lenient.propose(request) == kept  # control: above it, the same draft


def test_after_a_beam_the_shared_cache_gives_what_a_fresh_one_gives(tiny):
    """The beam crops and re-feeds the one prefix cache; the next draft must be able to trust it."""
    import torch

    model, tok = tiny
    grammar = GrammarConstraint(tok, model.get_output_embeddings().weight.shape[0], max_calls=1)
    drafter = LocalDrafter(tiny)
    ids = drafter.token_ids(drafter._loaded, DraftRequest(ASK, FREE, 1))
    opts = {"max_new_tokens": 40, "stop_ids": grammar.stop_token_ids, "vocab": grammar.vocab_size}
    shared = PrefixCache()
    with torch.inference_mode():
        compiled = grammar.compiled(FREE)

        def inputs(prefix, stop=None):
            stop = stop or threading.Event()
            return DecodeInputs(model, tok, compiled, grammar.xgr, ids, prefix, stop, **opts)

        beam_rows(inputs(shared), width=3)
        assert shared.ids == list(ids) and shared.cache.get_seq_length() == len(ids)  # back to the prompt
        again = decode_rows(inputs(shared), rows=1)
        fresh = decode_rows(inputs(PrefixCache()), rows=1)
        stop = threading.Event()
        stop.set()
        stopped = beam_rows(inputs(PrefixCache(), stop), width=3)
    assert again == fresh
    assert stopped == []  # a set stop flag ends the search before its next forward
