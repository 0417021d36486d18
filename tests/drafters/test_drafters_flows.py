"""Mined data flow / control flow (HistoryDrafter.from_traces) and confidence-ranked merging."""

import anyio

from spectool import DraftRequest, ToolCall
from spectool.drafters import CombinedDrafter, HistoryDrafter
from spectool.drafters.history._flows import mine_flows

from .conftest import assistant_call as call
from .conftest import fn_tool as fn
from .conftest import tool_output as out

TOOLS = [
    fn("get_user_id", {"user": {"type": "string"}}),
    fn("send_message", {"receiver_id": {"type": "string"}, "message": {"type": "string"}}, ["receiver_id"]),
    fn("view_messages_sent", {}),
]


def session(user, uid, text):
    return [
        {"role": "user", "content": f"Message {user}: '{text}'"},
        call("get_user_id", {"user": user}, "a"),
        out("a", {"user_id": uid}),
        call("send_message", {"receiver_id": uid, "message": text}, "b"),
        out("b", {"sent": True}),
        call("view_messages_sent", {}, "c"),
        out("c", {"messages": []}),
    ]


def test_data_flow_links_an_argument_to_a_differently_named_output_field():
    flows = mine_flows([session("Alice", "USR1", "hi"), session("Bob", "USR2", "yo")])
    assert flows.sequences == [["get_user_id", "send_message", "view_messages_sent"]] * 2
    sources = dict(flows.sources("send_message", "receiver_id"))
    assert sources[("out", "get_user_id", "user_id")] == 1.0
    assert dict(flows.sources("get_user_id", "user")) == {("user",): 1.0}
    assert flows.sources("send_message", "nothing") == []


def test_mined_drafter_fills_the_argument_from_the_mined_source():
    live = [
        {"role": "user", "content": "Tell Carol the news"},
        call("get_user_id", {"user": "Carol"}, "x"),
        out("x", {"user_id": "USR9", "team_id": "T1"}),
    ]
    request = DraftRequest(live, TOOLS, samples=1)
    plain = HistoryDrafter().predict(request)
    mined = HistoryDrafter.from_traces([session("Alice", "USR1", "hi"), session("Bob", "USR2", "yo")])
    guess = mined.predict(request)
    # without mining, receiver_id has no same-name evidence: send_message cannot be proposed
    assert all(c.name != "send_message" for c in plain)
    assert guess[0].name == "send_message" and guess[0].arguments["receiver_id"] == "USR9"


class Fixed:
    """A member that always proposes the same calls (a scripted stand-in, for ranking only)."""

    def __init__(self, *calls):
        self.calls = list(calls)

    async def propose(self, request):
        return list(self.calls)


def test_confidence_ranking_puts_the_member_that_was_right_first():
    tools = [fn("ls", {"path": {"type": "string"}})]
    wrong, right = ToolCall("ls", {"path": "/wrong"}), ToolCall("ls", {"path": "/right"})
    drafter = CombinedDrafter([Fixed(wrong), Fixed(right)], rank="confidence")
    messages = [{"role": "user", "content": "list it"}]
    first = anyio.run(drafter.propose, DraftRequest(list(messages), tools, 1))
    assert first == [wrong, right]  # no evidence yet: member order
    for i in range(3):  # the main model keeps calling what member 1 proposed
        messages += [call("ls", {"path": "/right"}, f"c{i}"), out(f"c{i}", {"files": []})]
        ranked = anyio.run(drafter.propose, DraftRequest(list(messages), tools, 1))
    assert ranked == [right, wrong]
    assert drafter.confidence(1, "ls") > 0.7
    assert drafter.confidence(0, "ls") < 0.3
    # plain order ranking ignores the record
    plain = CombinedDrafter([Fixed(wrong), Fixed(right)])
    assert anyio.run(plain.propose, DraftRequest(list(messages), tools, 1)) == [wrong, right]


def test_calibration_ignores_a_different_session():
    tools = [fn("ls", {"path": {"type": "string"}})]
    wrong = ToolCall("ls", {"path": "/wrong"})
    drafter = CombinedDrafter([Fixed(wrong)], rank="confidence")
    anyio.run(drafter.propose, DraftRequest([{"role": "user", "content": "A"}], tools, 1))
    other = [{"role": "user", "content": "B"}, call("ls", {"path": "/x"}, "c"), out("c", {})]
    anyio.run(drafter.propose, DraftRequest(other, tools, 1))
    assert drafter.calibration == {}


def test_fan_out_spreads_the_users_literals_over_parallel_calls():
    tools = [fn("calculate_bmi", {"height": {"type": "number"}, "weight": {"type": "number"}})]
    text = "BMI for 6 feet and 80 kg, also for 5.6 feet and 60 kg."
    request = DraftRequest([{"role": "user", "content": text}], tools, samples=1)
    calls = HistoryDrafter().predict(request)
    assert calls[:2] == [
        ToolCall("calculate_bmi", {"height": 6, "weight": 80}),
        ToolCall("calculate_bmi", {"height": 5.6, "weight": 60}),
    ]
    assert HistoryDrafter(fan_out=0).predict(request) == calls[:1]
    # nothing left to spread: one call
    single = DraftRequest([{"role": "user", "content": "BMI for 6 feet and 80 kg"}], tools, samples=1)
    assert len(HistoryDrafter().predict(single)) == 1


def test_two_parameters_take_two_values_and_a_just_made_call_is_not_repeated():
    tools = [
        fn("get_zipcode", {"city": {"type": "string"}}),
        fn("estimate_distance", {"cityA": {"type": "string"}, "cityB": {"type": "string"}}),
    ]
    messages = [
        {"role": "user", "content": "How far is it from Rivermist to Stonebrook?"},
        call("get_zipcode", {"city": "Rivermist"}, "a"),
        out("a", {"zipcode": "83214"}),
    ]
    nxt = HistoryDrafter(corpus=[["get_zipcode", "get_zipcode", "estimate_distance"]]).predict(
        DraftRequest(messages, tools, samples=1)
    )
    assert nxt == [ToolCall("get_zipcode", {"city": "Stonebrook"})]  # not Rivermist again
    messages += [call("get_zipcode", {"city": "Stonebrook"}, "b"), out("b", {"zipcode": "74532"})]
    mined = HistoryDrafter.from_traces(
        [
            [
                {"role": "user", "content": "x"},
                call("get_zipcode", {"city": "P"}, "p"),
                out("p", {"zipcode": "1"}),
                call("get_zipcode", {"city": "Q"}, "q"),
                out("q", {"zipcode": "2"}),
                call("estimate_distance", {"cityA": "2", "cityB": "1"}, "r"),
            ]
        ]
    )
    guess = mined.predict(DraftRequest(messages, tools, samples=1))[0]
    assert guess.name == "estimate_distance"
    assert {guess.arguments["cityA"], guess.arguments["cityB"]} == {"83214", "74532"}


def test_apostrophes_are_not_quotes():
    tools = [fn("get_zipcode", {"city": {"type": "string"}})]
    text = "I'm curious what zipcode Silverpine has before I'll head out."
    guess = HistoryDrafter().predict(DraftRequest([{"role": "user", "content": text}], tools, samples=1))
    assert guess == [ToolCall("get_zipcode", {"city": "Silverpine"})]


def test_mining_a_conversation_parses_each_tool_output_once(monkeypatch):
    """mine() reads an output's fields, records, named records and outcome from one parse."""
    import json

    from spectool.drafters.history._evidence import collect_evidence
    from spectool.drafters.history._patterns import mine

    parsed: list[str] = []
    real = json.loads

    def counting(text, *a, **k):
        parsed.append(text)
        return real(text, *a, **k)

    monkeypatch.setattr(json, "loads", counting)
    conversation = session("alice", "u1", "hi")
    outputs = [m["content"] for m in conversation if m["role"] == "tool"]
    mine(conversation)
    assert sorted(t for t in parsed if t in outputs) == sorted(outputs)  # each once
    # control: the counter sees every parse (the history drafter's evidence parses each output
    # once more, as each of mine()'s four readers did before)
    collect_evidence(conversation)
    assert sorted(t for t in parsed if t in outputs) == sorted(outputs * 2)
