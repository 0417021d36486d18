"""Why a draft missed: the miss kinds, their sum, and the table that prints them."""

import pytest

from spectool import ToolCall
from spectool_bench.drafters._metrics import score_step, summarize
from spectool_bench.drafters._misses import MISS_KINDS, SUB_KINDS, classify_misses, told_text
from spectool_bench.drafters._report import miss_table
from tests.bench.test_drafters_eval import SCHEMAS, SPEC

# the scoring tests' tools: ls, add, weather speculable; rm mutating
SOURCE = "What is the weather in Hyderabad? Use the folder reports/2024."


def kinds(proposals, calls, source=SOURCE):
    out = classify_misses(proposals, calls, SPEC, SCHEMAS, source)
    return {k: n for k, n in out.items() if n}


@pytest.mark.parametrize(
    ("proposals", "calls", "expected"),
    [
        ([], [ToolCall("ls", {"path": "a"})], {"no_call": 1}),
        # a tool nobody offered is not an offered proposal: still no call
        ([ToolCall("cat", {"path": "a"})], [ToolCall("ls", {"path": "a"})], {"no_call": 1}),
        ([ToolCall("add", {"a": 1, "b": 2})], [ToolCall("ls", {"path": "a"})], {"wrong_tool": 1}),
        ([ToolCall("add", {"a": 1})], [ToolCall("add", {"a": 1, "b": 2})], {"wrong_args": 1}),
        ([ToolCall("add", {"a": 1, "b": 3})], [ToolCall("add", {"a": 1, "b": 2})], {"wrong_value": 1}),
        (
            [ToolCall("weather", {"city": "Hirat"})],
            [ToolCall("weather", {"city": "Hyderabad"})],
            {"wrong_value": 1, "wrong_value_copyable": 1},
        ),
        # the schema's default fills the unit: naming it is not a different argument set
        (
            [ToolCall("weather", {"city": "Pune", "unit": "c"})],
            [ToolCall("weather", {"city": "Hyderabad"})],
            {"wrong_value": 1, "wrong_value_copyable": 1},
        ),
        # "transit" is nowhere in the source: copying could not have fixed it
        ([ToolCall("ls", {"path": "reports"})], [ToolCall("ls", {"path": "transit"})], {"wrong_value": 1}),
        # the same call due twice, proposed once
        ([ToolCall("ls", {"path": "a"})], [ToolCall("ls", {"path": "a"})] * 2, {"repeat": 1}),
        # hits and mutating calls are not misses
        ([ToolCall("ls", {"path": "a"})], [ToolCall("ls", {"path": "a"}), ToolCall("rm", {"path": "b"})], {}),
    ],
)
def test_each_missed_speculable_call_gets_one_kind(proposals, calls, expected):
    assert kinds(proposals, calls) == expected


def test_the_closest_proposal_of_the_tool_decides_the_kind():
    proposals = [ToolCall("add", {"a": 5}), ToolCall("add", {"a": 1, "b": 9})]
    # one proposal has the right argument names: the miss is a value, not the argument set
    assert kinds(proposals, [ToolCall("add", {"a": 1, "b": 2})]) == {"wrong_value": 1}


def test_the_kinds_add_up_to_the_missed_speculable_calls():
    steps = [
        ([ToolCall("ls", {"path": "x"}), ToolCall("add", {"a": 1})], [ToolCall("ls", {"path": "a"})]),
        ([], [ToolCall("weather", {"city": "Hyderabad"}), ToolCall("ls", {"path": "b"})]),
        (
            [ToolCall("add", {"a": 1, "b": 2})],
            [ToolCall("add", {"a": 1, "b": 2}), ToolCall("ls", {"path": "c"})],
        ),
    ]
    scores = []
    for proposals, calls in steps:
        s = score_step(proposals, calls, SPEC, SCHEMAS, 0.1)
        m = classify_misses(proposals, calls, SPEC, SCHEMAS, SOURCE)
        exclusive = sum(n for k, n in m.items() if k not in SUB_KINDS)
        assert exclusive == s.speculable - s.hits
        scores.append(s.__class__(**{**s.__dict__, "misses": tuple(m.items())}))
    row = summarize(scores)
    assert row["misses"]["no_call"] == 2
    assert row["misses"]["wrong_tool"] == 1
    assert row["misses"]["wrong_value"] == 1
    assert (
        sum(row["misses"][k] for k in MISS_KINDS if k not in SUB_KINDS) == row["n_speculable"] - row["hits"]
    )


def test_a_guess_bfcl_would_accept_is_still_a_miss_but_counted_as_such():
    truth = [ToolCall("weather", {"city": "San Francisco, CA"})]
    allowed = (("weather", {"city": ["San Francisco, CA", "San Francisco"], "unit": ["c", ""]}),)
    guess = [ToolCall("weather", {"city": "San Francisco"})]
    m = classify_misses(guess, truth, SPEC, SCHEMAS, SOURCE, allowed)
    assert m["wrong_value"] == 1 and m["bfcl_accepted"] == 1
    # an explicit unit BFCL lists is accepted too; one it does not list is not
    named = [ToolCall("weather", {"city": "San Francisco", "unit": "c"})]
    assert classify_misses(named, truth, SPEC, SCHEMAS, SOURCE, allowed)["bfcl_accepted"] == 1
    wrong_unit = [ToolCall("weather", {"city": "San Francisco", "unit": "f"})]
    assert classify_misses(wrong_unit, truth, SPEC, SCHEMAS, SOURCE, allowed)["bfcl_accepted"] == 0
    # control: a value BFCL does not list, and no options at all
    other = [ToolCall("weather", {"city": "Boston"})]
    assert classify_misses(other, truth, SPEC, SCHEMAS, SOURCE, allowed)["bfcl_accepted"] == 0
    assert classify_misses(guess, truth, SPEC, SCHEMAS, SOURCE)["bfcl_accepted"] == 0
    # numbers compare by the schema: 3 and 3.0 are one value for a number argument
    add_allowed = (("add", {"a": [1], "b": [3.0, 4]}),)
    add_truth = [ToolCall("add", {"a": 1, "b": 3.0})]
    took = classify_misses(
        [ToolCall("add", {"a": 1, "b": 4.0})], add_truth, SPEC, SCHEMAS, SOURCE, add_allowed
    )
    assert took["bfcl_accepted"] == 1


def test_told_text_keeps_user_and_tool_messages_only():
    messages = [
        {"role": "system", "content": "secret-system"},
        {"role": "user", "content": "go to Paris"},
        {"role": "assistant", "content": "calling Lyon"},
        {"role": "tool", "content": "Nice"},
    ]
    text = told_text(messages)
    assert "Paris" in text and "Nice" in text
    assert "Lyon" not in text and "secret" not in text
    # a value the assistant said but the user did not is not copyable
    assert kinds([ToolCall("weather", {"city": "Rome"})], [ToolCall("weather", {"city": "Lyon"})], text) == {
        "wrong_value": 1
    }


def test_the_miss_table_prints_counts_and_shares():
    row = {
        "drafter": "history",
        "category": "multiple",
        "samples": 1,
        "n_speculable": 10,
        "hits": 6,
        "misses": {"no_call": 1, "wrong_tool": 2, "wrong_value": 1, "wrong_value_copyable": 1},
    }
    text = miss_table([row])
    lines = text.splitlines()
    assert lines[0].split()[:4] == ["drafter", "category", "λ", "missed"]
    assert "2 (50%)" in lines[2] and "1 (25%)" in lines[2]
    assert lines[2].split()[3] == "4"


def test_the_eval_command_prints_and_writes_the_miss_kinds(tmp_path, capsys):
    import json

    from spectool.cli import main

    argv = ["drafters", "eval", "--categories", "simple_python,parallel", "--split", "test", "--drafters"]
    argv += ["history", "--samples", "1", "--limit", "4", "--out", str(tmp_path)]
    argv += ["--no-progress", "--no-plot"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Why speculable calls were missed" in out and "wrong value" in out
    for row in json.loads((tmp_path / "results.json").read_text())["rows"]:
        missed = row["n_speculable"] - row["hits"]
        assert missed > 0  # history knows nothing yet on the first tasks: a real check
        assert sum(n for k, n in row["misses"].items() if k not in SUB_KINDS) == missed
