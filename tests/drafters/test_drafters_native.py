"""Drafting in the model's own tool-call format (``LocalDrafterOptions(prompt="native")``).

The Qwen2.5-Coder bases write ``<tool_call>\\n{json}\\n</tool_call>`` after a system prompt
their chat template builds from ``tools=``. Here a tiny randomly initialized **Qwen2** model
(no download: the real bases are 0.5–1.5 B) runs over SmolLM2's tokenizer given Qwen2.5's two
tool-call tokens and Qwen2.5's own chat template (``qwen2_5_chat_template.jinja``, copied from
the Qwen2.5-Coder-0.5B-Instruct GGUF). It writes nonsense, but the grammar makes every row a
tagged call to an offered tool, and the prompt is the template's, tools and all.
"""

from __future__ import annotations

import json

import anyio
import pytest

from spectool import ConfigError, DraftRequest
from spectool.drafters import LocalDrafter, LocalDrafterOptions
from spectool.drafters._common import tool_schemas
from spectool.drafters.local._native import native_messages
from spectool_bench.drafters._prompt_eval import valid

from .conftest import STRING, fn_tool, qwen_style_tokenizer, weather_tool
from .conftest import tiny_qwen as build_tiny_qwen

pytest.importorskip("xgrammar")

TOOLS = [weather_tool(), fn_tool("add", {"a": STRING}, description="Add two numbers")]
CONVO = [
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "add", "arguments": '{"a": "2"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "1", "content": "2"},
]


@pytest.fixture(scope="module")
def tiny_qwen():
    tok = qwen_style_tokenizer()
    return build_tiny_qwen(tok, seed=5).double(), tok


def test_native_messages_give_templates_objects_and_text():
    msgs = native_messages([{"role": "developer", "content": [{"type": "text", "text": "hi"}]}, *CONVO])
    assert msgs[0] == {"role": "system", "content": "hi"}
    assert msgs[2]["tool_calls"][0]["function"]["arguments"] == {"a": "2"}  # an object, not a string
    assert msgs[2]["content"] == "" and msgs[3]["role"] == "tool"


def test_the_native_prompt_is_the_models_template_with_the_tools(tiny_qwen):
    _, tok = tiny_qwen
    drafter = LocalDrafter(tiny_qwen, LocalDrafterOptions(prompt="native"))
    ids = drafter.token_ids(drafter._loaded, DraftRequest(CONVO, TOOLS, 1))
    text = tok.decode(ids)
    assert "<tools>" in text and json.dumps(TOOLS[0], ensure_ascii=False) in text
    assert '<tool_call>\n{"name": "add", "arguments": {"a": "2"}}\n</tool_call>' in text  # its own format
    assert "<tool_response>\n2\n</tool_response>" in text and text.endswith("<|im_start|>assistant\n")
    # a long conversation loses its oldest turns, never the tools or the last message
    short = LocalDrafter(tiny_qwen, LocalDrafterOptions(prompt="native", max_prompt_tokens=len(ids) - 1))
    cut = tok.decode(short.token_ids(short._loaded, DraftRequest(CONVO, TOOLS, 1)))
    assert "Weather in Paris?" not in cut and "<tools>" in cut and "<tool_response>" in cut


@pytest.mark.parametrize("diversity", ["branch", "beam"])
def test_native_drafts_are_tagged_calls_to_offered_tools(tiny_qwen, diversity):
    options = LocalDrafterOptions(
        prompt="native", diversity=diversity, max_string_length=12, max_new_tokens=60
    )
    drafter = LocalDrafter(tiny_qwen, options)
    calls = anyio.run(drafter.propose, DraftRequest(CONVO, TOOLS, 2))
    schemas = tool_schemas(TOOLS)
    assert calls and all(valid(c, schemas) for c in calls)
    for text in drafter.last_texts:
        assert text.startswith('<tool_call>\n{"name": "') and text.endswith("}\n</tool_call>"), text


def test_several_native_calls_are_newline_separated_tags(tiny_qwen):
    pytest.importorskip("xgrammar")
    import xgrammar as xgr

    from spectool.drafters.local._grammar import GrammarConstraint

    _, tok = tiny_qwen
    grammar = GrammarConstraint(tok, len(tok), max_string_length=None, max_calls=2)
    two = (
        '<tool_call>\n{"name": "add", "arguments": {"a": "1"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome", "unit": "c"}}\n</tool_call>'
    )
    for text, ok in ((two, True), (two.replace("</tool_call>\n<", "</tool_call><"), False)):
        matcher = xgr.GrammarMatcher(grammar.compiled(TOOLS, native=True))
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert all(matcher.accept_token(i) for i in ids) is ok and (not ok or matcher.is_completed())
    # the JSON-array grammar of the compact prompt is another one: it refuses the tags
    matcher = xgr.GrammarMatcher(grammar.compiled(TOOLS))
    assert not matcher.accept_token(tok("<tool_call>", add_special_tokens=False)["input_ids"][0])


def test_native_prompt_on_a_model_whose_template_ignores_tools_is_a_config_error():
    from transformers import AutoTokenizer

    from spectool.embedded import embedded_hf_folder
    from tests.tree_fixtures import tiny_llama_for

    tok = AutoTokenizer.from_pretrained(str(embedded_hf_folder()))  # SmolLM2: no tools in its template
    drafter = LocalDrafter((tiny_llama_for(tok, seed=1), tok), LocalDrafterOptions(prompt="native"))
    with pytest.raises(ConfigError, match="native"):
        anyio.run(drafter.propose, DraftRequest(CONVO, TOOLS, 1))


def test_native_messages_and_assistant_calls_read_tool_calls_each_their_way():
    """One reader of ``tool_calls`` serves both: the template gets every named call (arguments it
    cannot parse as ``{}``), the drafters' evidence only calls with object arguments."""
    from spectool.drafters._common import assistant_calls

    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "a", "function": {"name": "add", "arguments": '{"a": 1}'}},
            {"id": "b", "function": {"name": "add", "arguments": "{not json"}},
            {"id": "c", "function": {"name": "add", "arguments": ""}},
            {"id": "d", "function": {"name": "add", "arguments": "[1, 2]"}},
            {"id": "e", "function": {"arguments": "{}"}},  # no name: skipped by both
            "not a call",
        ],
    }
    (native,) = native_messages([message])
    assert [c["function"]["arguments"] for c in native["tool_calls"]] == [{"a": 1}, {}, {}, [1, 2]]
    calls = assistant_calls(message)
    assert [(c.id, dict(c.arguments)) for c in calls] == [("a", {"a": 1}), ("c", {})]
