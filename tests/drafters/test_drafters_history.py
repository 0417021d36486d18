"""HistoryDrafter: next tool from n-grams over the session, arguments from the conversation."""

import anyio
import pytest

from spectool import ConfigError, Drafter, DraftRequest, ToolCall
from spectool.drafters import HistoryDrafter

from .conftest import assistant_call as assistant
from .conftest import fn_tool
from .conftest import tool_output as tool_msg


def fn(name, props, required=None, desc=""):
    return fn_tool(name, props, required, desc)


TOOLS = [
    fn("get_stock_info", {"symbol": {"type": "string"}}, desc="Price of a stock"),
    fn(
        "place_order",
        {
            "order_type": {"type": "string", "enum": ["Buy", "Sell"]},
            "symbol": {"type": "string"},
            "price": {"type": "number"},
            "amount": {"type": "integer"},
        },
        desc="Place an order",
    ),
    fn(
        "get_weather",
        {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        required=["city"],
        desc="Weather in a city",
    ),
    fn("cd", {"folder": {"type": "string"}}, desc="Change directory"),
    fn("ls", {}, desc="List files"),
]


def predict(drafter, messages, samples=3):
    return drafter.predict(DraftRequest(messages, TOOLS, samples=samples))


def test_first_call_from_the_request_words_and_literals():
    calls = predict(
        HistoryDrafter(), [{"role": "user", "content": "What's the weather in Paris, in celsius?"}]
    )
    assert calls[0] == ToolCall("get_weather", {"city": "Paris", "unit": "celsius"})


def test_learned_sequence_predicts_next_tool_with_arguments_from_output_and_user():
    drafter = HistoryDrafter(corpus=[["get_stock_info", "place_order"]])
    messages = [
        {"role": "user", "content": "Check NVDA and buy 100 shares of it."},
        assistant("get_stock_info", {"symbol": "NVDA"}, "c1"),
        tool_msg("c1", {"symbol": "NVDA", "price": 227.16, "volume": 3}),
    ]
    calls = predict(drafter, messages)
    # symbol from the earlier call/output, price from the output, amount from the user's text,
    # order_type from an enum value the user wrote.
    assert calls[0] == ToolCall(
        "place_order", {"order_type": "Buy", "symbol": "NVDA", "price": 227.16, "amount": 100}
    )


def test_in_session_ngrams_repeat_a_pattern():
    messages = [{"role": "user", "content": "Walk the folders."}]
    for i, (name, args) in enumerate([("cd", {"folder": "a"}), ("ls", {}), ("cd", {"folder": "b"})]):
        messages += [assistant(name, args, f"c{i}"), tool_msg(f"c{i}", {"ok": True})]
    assert predict(HistoryDrafter(), messages, samples=1) == [ToolCall("ls", {})]


def test_explicit_name_value_phrase_beats_bare_literals():
    messages = [{"role": "user", "content": "Use Oslo as fallback but city: Bergen please"}]
    calls = predict(HistoryDrafter(), messages, samples=2)
    assert calls[0] == ToolCall("get_weather", {"city": "Bergen"})
    assert ToolCall("get_weather", {"city": "Oslo"}) in calls  # the alternative filling


def test_two_number_parameters_take_distinct_literals():
    tools = [fn("add", {"a": {"type": "number"}, "b": {"type": "number"}}, desc="Add two numbers")]
    req = DraftRequest([{"role": "user", "content": "add 17 and 25"}], tools, samples=1)
    assert HistoryDrafter().predict(req) == [ToolCall("add", {"a": 17, "b": 25})]


def test_required_parameter_without_evidence_means_no_proposal():
    tools = [fn("add", {"a": {"type": "number"}, "b": {"type": "number"}}, desc="Add two numbers")]
    req = DraftRequest([{"role": "user", "content": "add some numbers"}], tools, samples=3)
    assert HistoryDrafter().predict(req) == []


def test_remembers_sessions_and_is_deterministic():
    session_a = [
        {"role": "user", "content": "Session A"},
        assistant("cd", {"folder": "x"}, "1"),
        tool_msg("1", {}),
        assistant("ls", {}, "2"),
        tool_msg("2", {}),
    ]
    drafter = HistoryDrafter()
    predict(drafter, session_a)  # seen once: remembered under its first user message
    session_b = [
        {"role": "user", "content": "Session B"},
        assistant("cd", {"folder": "y"}, "1"),
        tool_msg("1", {}),
    ]
    first = predict(drafter, session_b, samples=1)
    assert first == [ToolCall("ls", {})]
    assert predict(drafter, session_b, samples=1) == first
    # without memory: session A teaches nothing about B, and a session's own repeats still
    # predict (cd → ls → cd: ls next), the same from any fresh drafter
    forgetful = HistoryDrafter(remember=False)
    predict(forgetful, session_a)
    assert ToolCall("ls", {}) not in predict(forgetful, session_b, samples=2)
    repeats = [*session_a, assistant("cd", {"folder": "y"}, "3"), tool_msg("3", {})]
    runs = [predict(HistoryDrafter(remember=False), repeats, samples=2) for _ in range(3)]
    assert runs[0][0] == ToolCall("ls", {}) and runs[1] == runs[0] and runs[2] == runs[0]


def test_respects_lambda_and_offered_tools_and_garbage_history():
    messages = [
        {"role": "user", "content": "weather in Rome and price of ACME"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "x", "type": "function", "function": {"name": "gone", "arguments": "{bad"}},
                {
                    "id": "y",
                    "type": "function",
                    "function": {"name": "get_stock_info", "arguments": '{"symbol": "ACME"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "y", "content": "not json"},
    ]
    calls = predict(HistoryDrafter(), messages, samples=2)
    assert 1 <= len(calls) <= 2 and all(
        c.name in {"get_weather", "get_stock_info", "place_order"} for c in calls
    )
    assert predict(HistoryDrafter(), messages, samples=1)[0].name in {"get_weather", "get_stock_info"}
    assert HistoryDrafter().predict(DraftRequest(messages, [], samples=3)) == []


def test_protocol_async_and_options():
    drafter = HistoryDrafter()
    assert isinstance(drafter, Drafter)
    req = DraftRequest([{"role": "user", "content": "weather in Rome"}], TOOLS, samples=1)
    assert anyio.run(drafter.propose, req) == [ToolCall("get_weather", {"city": "Rome"})]
    with pytest.raises(ConfigError):
        HistoryDrafter(order=0)
