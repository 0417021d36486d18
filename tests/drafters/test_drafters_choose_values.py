"""The model as chooser (issue 34, item 4): ``choose_values`` makes a copied parameter's
schema an enum of value selection's candidates, so the model picks a value instead of writing one.

The grammar function and the candidates are pure and checked on their own; the drafter on a
tiny random Llama over SmolLM2's real tokenizer (its guesses are nonsense, but which values the
grammar lets it write does not depend on sense), with a control that drafts with the option off.
"""

from __future__ import annotations

import json

import anyio
import pytest

from spectool import DraftRequest
from spectool.drafters import LearningDrafter, LocalDrafter, LocalDrafterOptions
from spectool.drafters.history._choices import copied, value_choices
from spectool.drafters.local._grammar import calls_schema, with_choices
from spectool.errors import ConfigError

from .conftest import STRING, assistant_call, fn_tool, tiny_llama_fixture, tool_output

GET_USER = fn_tool("get_user", {"user_id": STRING}, description="A user's details")
GET_ORDER = fn_tool("get_order", {"order_id": STRING, "note": STRING}, ["order_id"], "An order's details")
TOOLS = [GET_USER, GET_ORDER]


def _conversation(user: str, orders: list[str], note: str = "") -> list[dict]:
    """The user names their id; get_user lists their orders; get_order takes one of them
    (its ``note`` a fresh text each time: written, never copied)."""
    convo = [{"role": "user", "content": f"Hi, I am {user}, where is my order?"}]
    convo += [assistant_call("get_user", {"user_id": user}, "1"), tool_output("1", {"orders": orders})]
    if note:
        convo += [assistant_call("get_order", {"order_id": orders[0], "note": note}, "2")]
        convo += [tool_output("2", {"status": "delivered"})]
    return convo


TRACES = [
    _conversation(f"user_{i}", [f"#W{i}110001", f"#W{i}110002"], note=f"asked on day {i} about it")
    for i in range(1, 5)
]
# the request: get_user's output is in, get_order comes next
REQUEST = _conversation("mia_7", ["#W7770001", "#W7770002", "#W7770003"])


def _learner() -> LearningDrafter:
    return LearningDrafter(TRACES)


# -- the grammar function -----------------------------------------------------------------------


def test_with_choices_makes_a_chosen_parameter_an_enum_and_leaves_the_rest():
    out = with_choices(TOOLS, {"get_order": {"order_id": ["#W1", "#W2", "#W1"], "missing": ["x"]}})
    order = out[1]["function"]["parameters"]["properties"]
    assert order["order_id"] == {"enum": ["#W1", "#W2"]}  # repeats listed once
    assert order["note"] == STRING  # control: a parameter without choices keeps its schema
    assert "missing" not in order  # a parameter the tool has not is not added
    assert out[0] == GET_USER  # control: a tool without choices is unchanged
    assert TOOLS[1]["function"]["parameters"]["properties"]["order_id"] == STRING  # input untouched
    # no values: the free schema stays
    assert with_choices(TOOLS, {"get_order": {"order_id": []}}) == TOOLS


def test_the_call_grammar_admits_only_the_chosen_values():
    xgr = pytest.importorskip("xgrammar")
    from transformers import AutoTokenizer

    from spectool.embedded import embedded_hf_folder

    tok = AutoTokenizer.from_pretrained(str(embedded_hf_folder()))
    info = xgr.TokenizerInfo.from_huggingface(tok)
    compiler = xgr.GrammarCompiler(info, cache_enabled=False)

    def admits(tools, value):
        text = json.dumps(calls_schema(tools, max_string_length=None))
        matcher = xgr.GrammarMatcher(compiler.compile_json_schema(text, any_whitespace=False))
        call = [{"name": "get_order", "arguments": {"order_id": value}}]
        return matcher.accept_string(json.dumps(call))  # the grammar writes ", " and ": "

    chosen = with_choices([GET_ORDER], {"get_order": {"order_id": ["#W1", "#W2"]}})
    assert admits(chosen, "#W2")
    assert not admits(chosen, "#W3")
    assert admits([GET_ORDER], "#W3")  # control: the free schema admits it


# -- the candidates -----------------------------------------------------------------------------


def test_choices_come_for_copied_parameters_only():
    patterns = _learner().patterns
    assert copied(patterns, "get_order", "order_id")
    assert not copied(patterns, "get_order", "note")  # written afresh each time
    assert not copied(patterns, "get_order", "unseen")
    tools = {t["function"]["name"]: t["function"] for t in TOOLS}
    found = value_choices(REQUEST, tools, patterns)
    assert found["get_order"]["order_id"][:3] == ["#W7770001", "#W7770002", "#W7770003"]
    assert "note" not in found["get_order"]
    # control: with nothing mined, nothing is known to be copied
    assert value_choices(REQUEST, tools, LearningDrafter().patterns) == {}


# -- the option ---------------------------------------------------------------------------------


def test_the_option_is_a_flag_read_from_a_command_line_word():
    assert LocalDrafterOptions.from_strings({"choose_values": "1"}).choose_values is True
    assert LocalDrafterOptions.from_strings({"choose_values": "0"}).choose_values is False
    assert LocalDrafterOptions().choose_values is False
    with pytest.raises(ConfigError, match="choose_values must be a bool"):
        LocalDrafterOptions.from_strings({"choose_values": "2"})
    with pytest.raises(ConfigError, match="choose_values narrows the grammar"):
        LocalDrafterOptions(choose_values=True, constrained=False)


def test_the_eval_specs_reach_the_option():
    from spectool_bench.drafters._specs import parse_specs

    specs = parse_specs(["tuned", "tuned", "choose_values=1", "tuned+learning", "choose_values=1"])
    assert [s.label for s in specs] == ["tuned", "tuned,choose_values=1", "tuned+learning,choose_values=1"]
    assert specs[1].local_options().choose_values is True
    assert specs[0].local_options() is None


tiny = tiny_llama_fixture(seed=5)


def _drafted(tiny, choose):
    options = LocalDrafterOptions(
        choose_values=choose,
        diversity="sample",
        temperature=1.5,
        top_p=1.0,
        greedy_first=False,
        max_new_tokens=32,
        max_calls=1,
    )
    drafter = LocalDrafter(tiny, options, values=_learner())
    ids = set()
    for _ in range(3):
        calls = anyio.run(drafter.propose, DraftRequest(REQUEST, [GET_ORDER], 6))
        ids |= {c.arguments.get("order_id") for c in calls if c.name == "get_order"}
    return ids - {None}, drafter.last_choices


def test_a_choosing_draft_writes_only_candidate_values(tiny):
    pytest.importorskip("xgrammar")
    ids, choices = _drafted(tiny, choose=True)
    offered = set(choices["get_order"]["order_id"])
    assert {"#W7770001", "#W7770002"} <= offered
    assert ids and ids <= offered
    # control: the same drafter writing freely puts down values that are no candidate
    free, none = _drafted(tiny, choose=False)
    assert none == {}
    assert free - offered
