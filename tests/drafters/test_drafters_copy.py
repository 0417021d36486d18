"""The copy bias: which tokens it boosts, where, and that it steers a real decode."""

from __future__ import annotations

import json

import anyio
import pytest
import torch

from spectool import ConfigError, DraftRequest
from spectool.drafters import LocalDrafter, LocalDrafterOptions
from spectool.drafters.local._copy import CopyBias, TokenTable, _scan, open_string_value, source_text

from .conftest import add_tool, tiny_llama_fixture

tiny = tiny_llama_fixture(seed=7)

# A toy vocabulary: enough to tell word starts, continuations and closers apart.
VOCAB = ["Hy", "der", "abad", "H", "in", " in", "Fa", '"', '",', '"}', "x", " ", "Hyd", ' "', ' "Hy', '"x']
TEXTS = TokenTable.from_texts({t: [i] for i, t in enumerate(VOCAB)})


def _names(ids: list[int]) -> set[str]:
    return {VOCAB[i] for i in ids}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('[{"name": "get_w', "get_w"),  # a value (the tool name is one too)
        ('[{"na', None),  # a key
        ('[{"name": "f", "arguments": {"city": "Par', "Par"),
        ('[{"name": "f", "arguments": {"city": "Paris", "u', None),  # next key
        ('[{"name": "f", "arguments": {"city": "Paris"', None),  # closed
        ('[{"name": "f", "arguments": {"xs": ["a", "b', "b"),  # array items are values
        ('[{"name": "f", "arguments": {"q": "say \\"hi', 'say \\"hi'),  # an escaped quote stays inside
        ('[{"name": "f", "arguments": {"o": {"k": "v"}, "n": "w', "w"),
        ("[", None),
    ],
)
def test_open_string_value_finds_the_value_being_written(text, value):
    assert open_string_value(text) == value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[{"name": "f", "arguments": {"city":', True),
        ('[{"name": "f", "arguments": {"city": ', True),
        ('[{"name": "f", "arguments": {"xs": [', True),
        ('[{"name": "f", "arguments": {"xs": ["a",', True),  # the next array item
        ('[{"name": "f", "arguments": {"a": "b",', False),  # the next key
        ('[{"name": "f", "arguments": {"city": "Pa', False),  # inside the value already
        ('[{"name": "f", "arguments": {"o": {"k": 1}', False),
    ],
)
def test_expects_value_where_an_opening_quote_may_come(text, expected):
    assert _scan(text)[1] is expected


def test_opening_quote_tokens_merged_with_a_copy_are_boosted():
    bias = CopyBias("weather in Hyderabad", TEXTS, 2.0)
    assert _names(bias.opening_ids()) == {'"', ' "', ' "Hy'}  # not '"x': x is not in the source
    logits = torch.zeros(len(VOCAB))
    out = bias('[{"name": "f", "arguments": {"city":', logits)
    assert out[VOCAB.index(' "Hy')] == 2.0 and out[VOCAB.index('"x')] == 0


def test_token_ids_start_continue_and_close_a_copied_span():
    bias = CopyBias("weather in Hyderabad in Fahrenheit", TEXTS, 2.0)
    # a value's start: tokens that begin a word of the source ("in", "H", "Hy", "Hyd", "Fa")
    assert _names(bias.token_ids("")) == {"in", "H", "Hy", "Hyd", "Fa"}
    # inside a word: only its continuation; no closer (the word is not finished)
    assert _names(bias.token_ids("Hy")) == {"der"}
    # at a word's end: the copied text goes on, or the string closes — both boosted alike
    assert _names(bias.token_ids("Hyderabad")) == {" ", " in", '"', '",', '"}', '"x'}
    # a value the source does not hold gets nothing
    assert bias.token_ids("Hirat") == []


def test_bias_adds_beta_only_inside_a_string_value():
    bias = CopyBias("weather in Hyderabad", TEXTS, 2.5)
    logits = torch.zeros(len(VOCAB))
    inside = bias('[{"name": "f", "arguments": {"city": "Hy', logits)
    assert inside[VOCAB.index("der")] == 2.5 and float(inside.sum()) == 2.5
    assert torch.equal(logits, torch.zeros(len(VOCAB)))  # the caller's logits are not changed
    assert bias('[{"name": "f", "arguments": {"ci', logits) is logits  # a key: untouched
    assert CopyBias("", TEXTS, 2.5)('[{"a": "', logits) is logits


def test_source_text_is_user_and_tool_text_most_recent_kept():
    messages = [
        {"role": "system", "content": "never copied"},
        {"role": "user", "content": "weather in Riga"},
        {"role": "assistant", "content": "calling"},
        {"role": "tool", "content": "12 C"},
        {"role": "user", "content": [{"type": "text", "text": "parts are skipped"}]},
    ]
    assert source_text(messages) == "weather in Riga\n12 C"
    assert source_text([{"role": "user", "content": "x" * 10_000}]) == "x" * 6000


def _string_values(calls) -> list[str]:
    return [v for c in calls for v in c.arguments.values() if isinstance(v, str)]


def test_a_strong_copy_bias_makes_a_random_model_copy_the_user(tiny):
    # A random tiny model writes gibberish strings; with the bias far above its logits every
    # free string value it writes must be a verbatim piece of what the user said.
    source = "Please add Hyderabad and Quintana to the list"
    request = DraftRequest([{"role": "user", "content": source}], [add_tool("string")], samples=1)

    def draft(beta: float):
        drafter = LocalDrafter(tiny, LocalDrafterOptions(max_string_length=12, copy_bias=beta, temperature=0))
        return anyio.run(drafter.propose, request), drafter

    plain, _ = draft(0.0)
    copied, drafter = draft(1e4)
    assert plain and copied
    assert not all(v in source for v in _string_values(plain) if v)  # without it: not copies
    values = _string_values(copied)
    assert values and all(v and v in source for v in values), json.dumps(values)
    assert drafter.options.copy_bias == 1e4


def test_copy_bias_must_be_a_finite_non_negative_number(tiny):
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ConfigError):
            LocalDrafterOptions(copy_bias=bad)
