"""Tool calls written as text: xLAM arrays, hermes tags, bare objects, garbage."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spectool import ModelOutputError, ToolCall
from spectool.toolcall_text import format_tool_calls, parse_tool_calls, salvage_tool_calls


def test_xlam_array_with_two_calls():
    text = '[{"name": "add", "arguments": {"a": 1, "b": 2}}, {"name": "ls", "arguments": {}}]'
    assert parse_tool_calls(text) == [ToolCall("add", {"a": 1, "b": 2}), ToolCall("ls", {})]


def test_hermes_tags_and_fences_and_aliases():
    text = (
        '<tool_call>\n{"name": "cat", "parameters": {"path": "a.txt"}}\n</tool_call>\n'
        '<tool_call>```json\n{"name": "wc", "arguments": "{\\"path\\": \\"a.txt\\"}"}\n```</tool_call>'
    )
    assert parse_tool_calls(text) == [ToolCall("cat", {"path": "a.txt"}), ToolCall("wc", {"path": "a.txt"})]


def test_bare_object_and_openai_shape_and_fenced_array():
    assert parse_tool_calls('{"name": "ls"}') == [ToolCall("ls", {})]
    item = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    assert parse_tool_calls(json.dumps([item])) == [ToolCall("ls", {}, "c1")]
    assert parse_tool_calls('```json\n[{"name": "ls", "arguments": {}}]\n```') == [ToolCall("ls", {})]


def test_plain_answer_is_no_call():
    assert parse_tool_calls("The answer is 42.") == []
    assert parse_tool_calls("") == []
    assert salvage_tool_calls("The answer is 42.") == []


@pytest.mark.parametrize(
    "text",
    [
        '[{"name": "add", "arguments": {"a": 1',  # truncated
        "[1, 2, 3]",  # not objects
        '[{"arguments": {}}]',  # no name
        '[{"name": "f", "arguments": [1]}]',  # arguments not an object
        '[{"name": "f", "arguments": "{oops"}]',  # arguments string not JSON
        '[{"name": "f"}] trailing words',  # junk after the JSON
        "<tool_call>not json</tool_call>",
    ],
)
def test_malformed_calls_raise_model_output_error(text):
    with pytest.raises(ModelOutputError):
        parse_tool_calls(text)


def test_non_text_raises():
    with pytest.raises(ModelOutputError):
        parse_tool_calls(None)  # type: ignore[arg-type]


def test_salvage_keeps_complete_items_of_a_truncated_array():
    text = (
        '[{"name": "a", "arguments": {"x": 1}}, {"name": 7}, {"name": "b", "arguments": {}}, '
        '{"name": "c", "argu'
    )
    assert salvage_tool_calls(text) == [ToolCall("a", {"x": 1}), ToolCall("b", {})]


def test_salvage_finds_calls_after_prose_and_skips_garbage():
    assert salvage_tool_calls('Sure! {oops} [{"name": "ls", "arguments": {}}] done') == [ToolCall("ls", {})]
    assert salvage_tool_calls("[[[[{{{{") == []
    assert salvage_tool_calls(None) == []  # type: ignore[arg-type]
    assert salvage_tool_calls('<tool_call>{"name": "ls"}') == [ToolCall("ls", {})]  # unclosed tag


_json_scalars = st.one_of(st.integers(-(10**6), 10**6), st.text(max_size=12), st.booleans(), st.none())
_calls = st.lists(
    st.builds(
        ToolCall,
        st.text(st.characters(categories=["L", "N"]), min_size=1, max_size=10),
        st.dictionaries(st.text(max_size=8), _json_scalars, max_size=4),
    ),
    max_size=4,
)


@given(_calls)
def test_format_then_parse_round_trips(calls):
    assert parse_tool_calls(format_tool_calls(calls)) == calls


@given(st.text(max_size=200))
def test_salvage_never_raises_on_any_text(text):
    assert isinstance(salvage_tool_calls(text), list)
