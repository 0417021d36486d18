"""The learning drafter: value rules, plan context, learning from nothing, memory and disk.

Each value rule and the plan context has a negative control: the same request with the rule
switched off loses the hit the rule claims.
"""

from __future__ import annotations

import json
import os

import anyio
import pytest

from spectool import DraftRequest, ToolCall, resolve_drafter
from spectool.drafters import LearningDrafter, learning_drafter
from spectool.drafters.history._patterns import mine
from spectool.drafters.history._shapes import anchors, shape
from spectool.drafters.history._values import RULES
from spectool.errors import ConfigError


def _tool(name: str, *params: str, description: str = "x") -> dict:
    props = {p: {"type": "string"} for p in params}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": props, "required": list(params)},
        },
    }


TOOLS = [
    _tool("find_user", "first_name", "last_name"),
    _tool("get_user", "user_id"),
    _tool("get_order", "order_id"),
    _tool("get_product", "product_id"),
]


def _conversation(user: str, calls: list[tuple[str, dict, object]]) -> list[dict]:
    """A user message, then each call with its output (a string, or JSON for anything else)."""
    messages: list[dict] = [{"role": "user", "content": user}]
    for i, (name, args, output) in enumerate(calls):
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(args)},
                    }
                ],
            }
        )
        text = output if isinstance(output, str) else json.dumps(output)
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": text})
    return messages


def _shop(first: str, last: str, uid: str, orders: list[str], user_extra: str = "") -> list[dict]:
    """A finished retail-like conversation: find the user, read them, walk their orders."""
    calls: list[tuple[str, dict, object]] = [
        ("find_user", {"first_name": first, "last_name": last}, uid),
        ("get_user", {"user_id": uid}, {"user_id": uid, "orders": orders}),
    ]
    calls += [("get_order", {"order_id": o}, {"order_id": o, "items": []}) for o in orders]
    return _conversation(f"Reason for call: a refund. Known info: You are {first} {last}.{user_extra}", calls)


TRAIN = [
    _shop("Mei", "Kovacs", "mei_kovacs_8020", ["#W1000001", "#W1000002"]),
    _shop("Noah", "Ito", "noah_ito_3850", ["#W2000001", "#W2000002", "#W2000003"]),
    _shop("Ava", "Lopez", "ava_lopez_1111", ["#W3000001"]),
]


def _first(drafter: LearningDrafter, messages: list[dict], samples: int = 1) -> list[ToolCall]:
    return drafter.predict(DraftRequest(messages, TOOLS, samples))


def test_shape_and_anchor_words():
    assert shape("#W6729841") == "#A0{7}" and shape("noah_ito_3850") == "a_a_0{4}"
    assert shape("4OG6T3") == "X{6}" and shape("ORD") == "A{3}" and shape("Mei") == "Aa"
    assert shape(3) == shape(3.5) == "<num>" and shape(True) == "<bool>" and shape([1]) == ""
    assert list(anchors("You are Mei Kovacs, zip 28236.", "Mei")) == ["before:are", "after:<Cap>"]
    assert list(anchors("You are Mei Kovacs, zip 28236.", "28236")) == ["before:zip", "after:<none>"]
    assert list(anchors("Meiko", "Mei")) == []  # whole words only


def test_anchor_rule_picks_the_name_the_user_wrote_and_its_control_does_not():
    """first_name is written after "are" and before a capitalized word in every trace."""
    request = _conversation("Reason for call: a refund. Known info: You are Lia Chen.", [])
    on = _first(LearningDrafter(TRAIN), request)
    assert on[0] == ToolCall("find_user", {"first_name": "Lia", "last_name": "Chen"})
    off = _first(LearningDrafter(TRAIN, rules=RULES - {"anchor"}), request)
    assert off[0].name == "find_user" and off[0].arguments["first_name"] != "Lia"


def test_shape_rule_drops_values_that_do_not_look_like_the_parameter_and_its_control():
    """get_user's user_id always had the shape a_a_0{4} (the bare output of find_user)."""
    request = _conversation("Reason for call: a refund. Known info: My id is lia_chen_4242.", [])
    want = ToolCall("get_user", {"user_id": "lia_chen_4242"})
    only = [TOOLS[1]]
    assert LearningDrafter(TRAIN).predict(DraftRequest(request, only, 1)) == [want]
    off = LearningDrafter(TRAIN, rules=RULES - {"shape"}).predict(DraftRequest(request, only, 1))
    assert off and want not in off


def test_used_rule_walks_a_list_of_ids_and_its_control_repeats():
    history = _shop("Lia", "Chen", "lia_chen_4242", ["#W9000001", "#W9000002", "#W9000003"])[:-2]
    history += _conversation("", [("get_product", {"product_id": "p1"}, {"name": "Lamp"})])[1:]
    on = _first(LearningDrafter(TRAIN), history)
    assert on[0] == ToolCall("get_order", {"order_id": "#W9000003"})  # #W…1 and #W…2 were read
    off = _first(LearningDrafter(TRAIN, rules=RULES - {"used"}), history)
    assert off[0].name == "get_order" and off[0].arguments["order_id"] != "#W9000003"


def test_linked_rule_takes_the_record_the_user_named_and_its_control_does_not():
    def order_trace(user: str, wanted: str) -> list[dict]:
        items = [
            {"name": "Desk Lamp", "product_id": "1111"},
            {"name": "Mechanical Keyboard", "product_id": "2222"},
        ]
        items += [{"name": "Water Bottle", "product_id": "3333"}]
        pid = next(i["product_id"] for i in items if i["name"] == wanted)
        return _conversation(
            user,
            [
                ("get_order", {"order_id": "#W5000001"}, {"order_id": "#W5000001", "items": items}),
                ("get_product", {"product_id": pid}, {"name": wanted}),
            ],
        )

    train = [order_trace("Order #W5000001: swap the water bottle.", "Water Bottle")] * 2
    request = order_trace("Order #W5000001: swap the mechanical keyboard.", "Mechanical Keyboard")[:3]
    on = _first(LearningDrafter(train), request)
    assert on[0] == ToolCall("get_product", {"product_id": "2222"})
    off = _first(LearningDrafter(train, rules=RULES - {"linked"}), request)
    assert off[0] != ToolCall("get_product", {"product_id": "2222"})


def test_plan_context_reads_the_outcome_and_backs_off_and_its_control_does_not():
    """After an error the agents of the traces looked the user up another way; after a result
    they read the user. The plan context tells the two apart; the words alone cannot."""
    tools = [_tool("lookup", "q"), _tool("lookup_by_mail", "q"), _tool("read", "q")]

    def trace(outcome: str, then: str) -> list[dict]:
        return _conversation(
            "Find Zed please.", [("lookup", {"q": "Zed"}, outcome), (then, {"q": "Zed"}, "ok")]
        )

    train = [trace("Error: none", "lookup_by_mail"), trace("zed_1", "read")] * 3
    request = _conversation("Find Zed please.", [("lookup", {"q": "Zed"}, "Error: none")])
    on = LearningDrafter(train).predict(DraftRequest(request, tools, 1))
    assert on[0].name == "lookup_by_mail"
    off = LearningDrafter(train, plan=False).predict(DraftRequest(request, tools, 1))
    assert not any(c.name == "lookup_by_mail" for c in off)


def test_learning_from_nothing_drafts_like_the_primed_drafter_after_a_few_sessions():
    learner, primed = LearningDrafter(), LearningDrafter(TRAIN)
    probe = _shop("Lia", "Chen", "lia_chen_4242", ["#W9000001"])[:3]  # after find_user's output
    assert ToolCall("get_user", {"user_id": "lia_chen_4242"}) not in _first(learner, probe)
    for trace in TRAIN:  # three sessions go by, each seen in full
        learner.predict(DraftRequest(trace, TOOLS, 1))
    want = ToolCall("get_user", {"user_id": "lia_chen_4242"})
    assert _first(learner, probe)[0] == want == _first(primed, probe)[0]


def test_a_session_drafts_without_its_own_counts_and_later_requests_replace_them():
    drafter = LearningDrafter()
    trace = TRAIN[0]
    for end in range(1, len(trace) + 1):
        drafter.predict(DraftRequest(trace[:end], TOOLS, 1))
    assert len(drafter._sessions) == 1 and drafter.patterns.sessions == 1
    assert drafter.patterns.plan == mine(trace).plan  # counted once, not once per request


def test_memory_is_bounded_by_the_session_window():
    drafter = LearningDrafter(max_sessions=4)
    sizes = []
    for i in range(40):
        trace = _shop(f"Name{i}", "Last", f"name_last_{1000 + i}", [f"#W{7000000 + i}"], f" Note {i}.")
        drafter.predict(DraftRequest(trace, TOOLS, 1))
        sizes.append(drafter.patterns.size())
    assert len(drafter._sessions) == 4 and drafter.patterns.sessions == 4
    assert max(sizes[10:]) <= 1.2 * max(sizes[:10])  # no growth after the window filled
    unbounded = LearningDrafter(max_sessions=1000)  # the control: a wide window keeps all 40
    for i in range(40):
        unbounded.learn(_shop(f"N{i}", "L", f"n_l_{1000 + i}", [f"#W{7000000 + i}"], f" Note {i}."))
    assert unbounded.patterns.sessions == 40


def test_nothing_is_written_unless_a_path_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    drafter = LearningDrafter()
    for trace in TRAIN:
        drafter.predict(DraftRequest(trace, TOOLS, 1))
    assert list(tmp_path.rglob("*")) == []
    with pytest.raises(ConfigError, match="needs a path"):
        drafter.save()
    path = tmp_path / "agent" / "patterns.json"  # the control: a named path is written
    kept = LearningDrafter(path=path)
    for trace in TRAIN:
        kept.predict(DraftRequest(trace, TOOLS, 1))
    assert path.exists() and [p.name for p in tmp_path.rglob("*") if p.is_file()] == ["patterns.json"]
    kept.save()
    reloaded = LearningDrafter(path=path)
    assert reloaded.patterns.plan == kept.patterns.plan and reloaded.patterns.flows == kept.patterns.flows
    assert "mei_kovacs_8020" not in path.read_text()  # patterns, not the values of tool outputs
    path.write_text("not json")
    with pytest.raises(ConfigError, match="cannot read"):
        LearningDrafter(path=path)


def test_learning_resolves_by_name_one_per_scope():
    a = resolve_drafter("learning")
    assert isinstance(a, LearningDrafter) and resolve_drafter("learning") is a
    tenant = resolve_drafter("learning:tenant-a")
    assert tenant is learning_drafter("tenant-a") and tenant is not a
    assert resolve_drafter("learning:tenant-b") is not tenant
    with pytest.raises(ConfigError):
        learning_drafter("")
    with pytest.raises(ConfigError):
        LearningDrafter(rules={"nope"})


def test_propose_is_the_async_predict():
    drafter = LearningDrafter(TRAIN)
    probe = _shop("Lia", "Chen", "lia_chen_4242", ["#W9000001"])[:3]
    got = anyio.run(drafter.propose, DraftRequest(probe, TOOLS, 1))
    assert got == LearningDrafter(TRAIN).predict(DraftRequest(probe, TOOLS, 1))
    assert os.environ.get("SPECTOOL_NEVER_SET") is None


def test_record_rule_walks_output_records_and_its_control_does_not():
    """search took origin, destination and date from one flight of a reservation each time,
    in the order the reservations were read: the next search is the first flight not yet
    searched, all three values from it (filled one by one, the newest output comes first)."""
    tools = [_tool("get_res", "rid"), _tool("search", "origin", "destination", "date")]

    def trace(reservations: dict[str, list[tuple[str, str, str]]], searched: int) -> list[dict]:
        calls: list[tuple[str, dict, object]] = [
            (
                "get_res",
                {"rid": rid},
                {"rid": rid, "flights": [dict(zip(("origin", "destination", "date"), leg)) for leg in legs]},
            )
            for rid, legs in reservations.items()
        ]
        legs = [leg for legs in reservations.values() for leg in legs]
        calls += [
            ("search", dict(zip(("origin", "destination", "date"), leg)), []) for leg in legs[:searched]
        ]
        return _conversation("Check each flight of my reservations.", calls)

    train = [
        trace({"AB12CD": [("JFK", "LAX", "2024-05-01")], "EF34GH": [("LAX", "SFO", "2024-05-03")]}, 2),
        trace({"IJ56KL": [("SEA", "DEN", "2024-05-02")], "MN78OP": [("DEN", "MIA", "2024-05-04")]}, 2),
    ]
    request = trace({"QR12ST": [("ORD", "PHL", "2024-06-10")], "UV34WX": [("BOS", "ATL", "2024-06-12")]}, 0)
    want = ToolCall("search", {"origin": "ORD", "destination": "PHL", "date": "2024-06-10"})
    assert LearningDrafter(train).predict(DraftRequest(request, tools, 1)) == [want]
    off = LearningDrafter(train, rules=RULES - {"record"}).predict(DraftRequest(request, tools, 1))
    assert off and want not in off


def test_word_weight_follows_what_ranked_the_called_tool_first_and_its_control():
    """The plan says `read` after `lookup`; this agent reads the mail when the user says mail.
    Once a request showed it, the words weigh more within a turn; without feedback they do not."""
    tools = [_tool("lookup", "q"), _tool("read", "q"), _tool("mail_check", "q", description="check the mail")]
    train = [
        _conversation("Find Zed.", [("lookup", {"q": "Zed"}, "zed_1"), ("read", {"q": "Zed"}, "ok")])
    ] * 3
    drafter = LearningDrafter(train)
    first = _conversation("Find Zed, then check the mail.", [("lookup", {"q": "Zed"}, "zed_1")])
    assert drafter.predict(DraftRequest(first, tools, 1))[0].name == "read"  # the plan leads
    assert drafter._word_weight(False, {"read": 1.0}) == 0.2
    later = first + _conversation("", [("mail_check", {"q": "Zed"}, "ok")])[1:]
    drafter.predict(DraftRequest(later, tools, 1))  # shows the call made: mail_check
    assert drafter._word_weight(False, {"read": 1.0}) > 0.2
    other = _conversation("Find Amy, then check the mail.", [("lookup", {"q": "Amy"}, "amy_1")])
    assert drafter.predict(DraftRequest(other, tools, 1))[0].name == "mail_check"
    control = LearningDrafter(train)  # never shown what was called: the plan still leads
    assert control.predict(DraftRequest(other, tools, 1))[0].name == "read"


def _trip(trip: tuple[str, str], reservations: list[tuple[str, str]]) -> list[dict]:
    """Read the user's reservations until the one of the trip the user wrote, then search."""
    origin, destination = trip
    ids = [f"R{i}X{origin}" for i in range(len(reservations))]
    calls: list[tuple[str, dict, object]] = [
        ("get_user", {"user_id": "sam_7"}, {"user_id": "sam_7", "reservations": ids})
    ]
    for rid, (o, d) in zip(ids, reservations):
        calls.append(("get_order", {"order_id": rid}, {"order_id": rid, "origin": o, "destination": d}))
        if (o, d) == trip:
            break
    calls.append(("search", {"origin": origin, "destination": destination}, []))
    return _conversation(f"Fly me from {origin} to {destination}. My user id is sam_7.", calls)


def test_a_read_record_the_user_wrote_ends_the_walk_and_its_control_walks_on(monkeypatch):
    """The agents of the traces read reservations until one has the trip the user wrote, then
    searched: a record matching the user's words is an event outcome (``!match``), so the plan
    tells "found it" from "read one more". Controls: a record that does not match, and the
    match outcome switched off, both predict another read."""
    from spectool.drafters.history import _patterns

    tools = [*TOOLS, _tool("search", "origin", "destination")]
    train = [
        _trip(("ORD", "PHL"), [("JFK", "LAX"), ("ORD", "PHL"), ("SFO", "SEA")]),
        _trip(("BOS", "MIA"), [("BOS", "MIA"), ("DEN", "ATL")]),
        _trip(("DFW", "LAS"), [("IAH", "ORD"), ("PHX", "SAN"), ("DFW", "LAS")]),
        _trip(("SEA", "JFK"), [("LGA", "BWI"), ("SEA", "JFK")]),
        _trip(("PDX", "OAK"), [("SEA", "PDX"), ("OAK", "PDX"), ("PDX", "OAK")]),
    ]
    found = _trip(("ATL", "DEN"), [("ATL", "DEN"), ("MSP", "DTW")])[:5]  # the matching record read
    not_yet = _trip(("ATL", "DEN"), [("MSP", "DTW"), ("ATL", "DEN")])[:5]  # a record of another trip
    want = ToolCall("search", {"origin": "ATL", "destination": "DEN"})
    assert LearningDrafter(train).predict(DraftRequest(found, tools, 1))[0] == want
    assert LearningDrafter(train).predict(DraftRequest(not_yet, tools, 1))[0].name == "get_order"
    monkeypatch.setattr(_patterns, "_user_fields", lambda *a: 0)
    assert LearningDrafter(train).predict(DraftRequest(found, tools, 1))[0].name == "get_order"
