"""Narrowing the tool names a draft may use to the top k by retrieval score (issue 25, item 4).

The ranking is pure and checked on its own; the drafter is checked on a tiny random Llama over
SmolLM2's real tokenizer (its guesses are nonsense, but which tool names the grammar lets it
write does not depend on sense), with a control that drafts without narrowing.
"""

from __future__ import annotations

import anyio
import pytest

from spectool import DraftRequest
from spectool.drafters import LocalDrafter, LocalDrafterOptions
from spectool.drafters.local._compact import narrowed, tool_scores
from spectool.errors import ConfigError

from .conftest import STRING, WILD_ROWS, fn_tool, tiny_llama_fixture


def _fn(name, description):
    return fn_tool(name, {"x": STRING}, description=description)


TOOLS = [
    _fn("add", "Add two numbers"),
    _fn("get_weather", "Current weather of a city"),
    _fn("book_flight", "Book a flight between two airports"),
    _fn("get_forecast", "Weather forecast of a city for the coming days"),
]


def _request(text, samples=1):
    return DraftRequest([{"role": "user", "content": text}], TOOLS, samples)


def _names(bodies):
    return [b["name"] for b in bodies]


BODIES = [t["function"] for t in TOOLS]


def test_scores_count_the_words_shared_with_the_last_user_message():
    request = DraftRequest(
        [
            {"role": "user", "content": "book a flight"},
            {"role": "assistant", "content": "done"},
            {"role": "user", "content": "what is the weather in Paris"},
        ],
        TOOLS,
        1,
    )
    # only the last user message counts: its "weather" and "the", not the first turn's "flight"
    assert tool_scores(request, BODIES) == [0, 1, 0, 2]


def test_narrowing_keeps_the_top_k_in_the_offered_order_and_ties_at_the_cut():
    flight = _request("Book me a flight to Rome")  # scores 0, 1, 3, 1
    assert _names(narrowed(flight, BODIES, 1)) == ["book_flight"]
    # the 2nd best score is shared by two tools: both stay
    assert _names(narrowed(flight, BODIES, 2)) == ["get_weather", "book_flight", "get_forecast"]
    assert _names(narrowed(flight, BODIES, 0)) == _names(BODIES)  # off
    assert _names(narrowed(flight, BODIES, 9)) == _names(BODIES)  # k past the list
    # a query sharing no word with any tool cannot tell them apart: nothing is cut
    assert _names(narrowed(_request("hello there"), BODIES, 1)) == _names(BODIES)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"narrow_tools": -1}, "narrow_tools must be an integer ≥ 0"),
        ({"narrow_tools": True}, "narrow_tools must be an integer ≥ 0"),
        ({"narrow_tools": 2, "constrained": False}, "narrow_tools narrows the grammar"),
    ],
)
def test_bad_narrowing_options_are_config_errors(options, message):
    with pytest.raises(ConfigError, match=message):
        LocalDrafterOptions(**options)


def test_narrowing_reads_from_a_command_line_word():
    assert LocalDrafterOptions.from_strings({"narrow_tools": "2"}).narrow_tools == 2


tiny = tiny_llama_fixture(seed=5)


def _drafted_names(tiny, narrow):
    options = LocalDrafterOptions(narrow_tools=narrow, max_new_tokens=24, **WILD_ROWS)
    drafter = LocalDrafter(tiny, options)
    names = set()
    for attempt in range(4):
        calls = anyio.run(drafter.propose, _request(f"Book me a flight to Rome {attempt}", samples=6))
        names |= {c.name for c in calls}
    return names


def test_a_narrowed_draft_names_only_the_top_tools(tiny):
    pytest.importorskip("xgrammar")
    assert _drafted_names(tiny, narrow=1) == {"book_flight"}
    # control: the same drafter unnarrowed writes other tools' names too
    assert _drafted_names(tiny, narrow=0) - {"book_flight"}
