"""What the learning drafter mines from one conversation, and the sums it drafts from.

One pass over a finished conversation (Chat Completions messages) gives a :class:`Patterns`:

* ``plan``: for each call, the tool that came next after each of the last 0…:data:`CONTEXT`
  *events* — a user turn ``<user>`` or an earlier call with its outcome (``get_order``,
  ``get_order!err``, ``get_order!empty``) — PASTE's control-flow patterns with outcomes;
* ``flows``: for each (tool, parameter), where its value came from (:mod:`._flows` sources);
* ``shapes``: what the values looked like (:func:`._shapes.shape`);
* ``anchors``: for values the user wrote, the words around them (:func:`._shapes.anchors`);
* ``linked``: for values taken from a tool output, whether the output's record named
  something the user wrote (the keyboard's ``product_id`` when the user spoke of a keyboard).

Patterns hold names, shapes and neighbouring words, never the values themselves. They add
and subtract (:meth:`Patterns.add`), so a window of sessions can drop its oldest.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..._types import ToolCall
from .._common import assistant_calls, message_text
from ._flows import Output, Source, output_fields, read_output, value_tag
from ._records import MAX_RECORDS, objects_of, records_of
from ._shapes import anchors, shape

__all__ = ["CONTEXT", "EventLog", "Patterns", "event", "mentioned_records", "mine", "outcome"]

#: longest event context the plan counts (back-off goes down to none)
CONTEXT = 4
#: calls mined per conversation at most: bounds one session's share of memory
MAX_CALLS = 200
USER = "<user>"
_PLAIN = re.compile(r"[A-Za-z][A-Za-z ]{3,59}")

Key = tuple[str, str]


def outcome(output: Output, user_text: str = "", used: Collection[str] = ()) -> str:
    """``"err"``, ``"empty"``, ``"match"`` or ``""`` (a result) for a tool output. ``"match"``:
    the output is one record with two or more fields the user wrote (``ORD``, ``PHL``) that no
    call has used yet: the record the user means was found, so a walk through records ends."""
    text = output.text
    if not text or text in ("[]", "{}", "null", '""'):
        return "empty"
    low = text[:80].lower()
    if low.startswith(("error", "exception", "traceback")) or low.startswith('{"error'):
        return "err"
    return "match" if user_text and _user_fields(output.value, user_text, used) >= 2 else ""


def _user_fields(record: Any, user_text: str, used: Collection[str]) -> int:
    """How many distinct top-level string fields of a JSON object output the user wrote."""
    if not isinstance(record, Mapping):
        return 0
    low = user_text.lower()
    found = {v.lower() for v in record.values() if isinstance(v, str) and 3 <= len(v) <= 60 and v not in used}
    return sum(1 for v in found if re.search(rf"(?<!\w){re.escape(v)}(?!\w)", low))


def event(tool: str, result: str) -> str:
    return f"{tool}!{result}" if result else tool


@dataclass
class Patterns:
    """Counts mined from conversations (see the module doc); ``sessions``: how many."""

    plan: dict[tuple[str, ...], Counter[str]] = field(default_factory=dict)
    flows: dict[Key, Counter[Source]] = field(default_factory=dict)
    uses: Counter[Key] = field(default_factory=Counter)
    shapes: dict[Key, Counter[str]] = field(default_factory=dict)
    anchors: dict[Key, Counter[str]] = field(default_factory=dict)
    linked: dict[Key, Counter[bool]] = field(default_factory=dict)
    #: per (tool, ""): whether a call's arguments (two or more) all came from one output record
    records: dict[Key, Counter[bool]] = field(default_factory=dict)
    sessions: int = 0

    def add(self, other: Patterns, sign: int = 1) -> None:
        """Add (``sign`` 1) or take away (-1) another conversation's counts; zeros are dropped."""
        for name in _TABLES:
            mine_, theirs = getattr(self, name), getattr(other, name)
            for key, counts in theirs.items():
                held = mine_.setdefault(key, Counter())
                for k, n in counts.items():
                    held[k] += sign * n
                    if held[k] <= 0:
                        del held[k]
                if not held:
                    del mine_[key]
        for key, n in other.uses.items():
            self.uses[key] += sign * n
            if self.uses[key] <= 0:
                del self.uses[key]
        self.sessions += sign * other.sessions

    def size(self) -> int:
        """Counted entries in all: what memory grows with."""
        return len(self.uses) + sum(len(c) for t in _TABLES for c in getattr(self, t).values())

    def to_json(self) -> dict[str, Any]:
        def dump(table: Mapping[Any, Counter[Any]]) -> list[Any]:
            return [
                [list(k) if isinstance(k, tuple) else k, [[_key(x), n] for x, n in c.items()]]
                for k, c in table.items()
            ]

        return {
            **{name: dump(getattr(self, name)) for name in _TABLES},
            "uses": [[list(k), n] for k, n in self.uses.items()],
            "sessions": self.sessions,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Patterns:
        loaded = cls(
            uses=Counter({tuple(k): int(n) for k, n in data.get("uses") or ()}),  # type: ignore[misc]
            sessions=int(data.get("sessions") or 0),
        )
        for name in _TABLES:
            inner = _INNER.get(name, lambda x: x)
            rows = data.get(name) or ()
            setattr(loaded, name, {tuple(k): Counter({inner(x): int(n) for x, n in c}) for k, c in rows})
        return loaded


#: the counter tables of :class:`Patterns` (``uses`` apart), in their saved order
_TABLES = ("plan", "flows", "shapes", "anchors", "linked", "records")
#: what a saved table's counted keys are read back as (else as they are)
_INNER: dict[str, Any] = {"flows": tuple, "linked": bool, "records": bool}


def _key(x: Any) -> Any:
    return list(x) if isinstance(x, tuple) else x


def mentioned_records(output: Output, user_text: str) -> set[str]:
    """Value tags of the scalar fields of every record (JSON object) in a tool output that
    has a plain-words field the user wrote (``"name": "Mechanical Keyboard"``)."""
    low = user_text.lower()
    out: set[str] = set()
    for record in objects_of(output):
        named = [
            v for v in record.values() if isinstance(v, str) and _PLAIN.fullmatch(v) and v.lower() in low
        ]
        if any(re.search(rf"\b{re.escape(v.lower())}\b", low) for v in named):
            out.update(value_tag(v) for v in record.values() if not isinstance(v, (Mapping, list)))
    return out


class EventLog:
    """A conversation's events as its messages are read (:func:`event`): user turns, calls,
    and each call's outcome once its output comes, with what :func:`outcome` reads (the
    user's words, the argument values called so far)."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.user_text = ""
        self.used: set[str] = set()
        self._pending: dict[str, tuple[int, str]] = {}  # tool_call_id -> (its event's index, tool)

    def read(self, message: Mapping[str, Any]) -> str:
        """One message's events; returns the tool a tool output is of ("" for other messages)."""
        role = message.get("role")
        if role == "user":
            self.user_text += "\n" + message_text(message.get("content"))
            self.events.append(USER)
        elif role == "assistant":
            for call in assistant_calls(message):
                self.call(call)
        elif role == "tool":
            return self.output(message, read_output(message.get("content")))
        return ""

    def call(self, call: ToolCall) -> None:
        self._pending[str(call.id)] = (len(self.events), call.name)
        self.events.append(call.name)
        self.used.update(str(v) for v in call.arguments.values())

    def output(self, message: Mapping[str, Any], output: Output) -> str:
        """Its call's event gets the output's outcome; returns the tool ("": no such call)."""
        i, tool = self._pending.get(str(message.get("tool_call_id")), (-1, ""))
        if i < 0:
            return ""
        self.events[i] = event(tool, outcome(output, self.user_text, self.used))
        return tool


def mine(messages: Sequence[Mapping[str, Any]]) -> Patterns:
    """The patterns of one conversation (see the module doc)."""
    p = Patterns(sessions=1)
    log = EventLog()
    seen: dict[str, set[Source]] = {}  # value tag -> sources so far
    linked: set[str] = set()  # value tags of records the user named
    calls = 0
    records: list[set[str]] = []  # value tags of each output record read so far
    for m in messages:
        if m.get("role") == "tool":  # a call's output: its outcome, values and records
            output = read_output(m.get("content"))
            tool = log.output(m, output)
            for field_name, v in output_fields(output):
                seen.setdefault(value_tag(v), set()).add(("out", tool, field_name))
            linked |= mentioned_records(output, log.user_text)
            records.extend({value_tag(v) for v in r.values()} for r in records_of(output))
            del records[:-MAX_RECORDS]
            continue
        if m.get("role") != "assistant":  # a user turn
            log.read(m)
            continue
        for call in assistant_calls(m):
            calls += 1
            if calls > MAX_CALLS:
                return p
            events = log.events
            for k in range(min(CONTEXT, len(events)) + 1):
                p.plan.setdefault(tuple(events[len(events) - k :]), Counter())[call.name] += 1
            _observe(p, call.name, call.arguments, seen, linked, log.user_text)
            if len(call.arguments) >= 2:
                tags = {value_tag(v) for v in call.arguments.values()}
                p.records.setdefault((call.name, ""), Counter())[any(tags <= r for r in records)] += 1
            for arg, v in call.arguments.items():
                seen.setdefault(value_tag(v), set()).add(("arg", call.name, str(arg)))
            log.call(call)  # its outcome comes with its output
    return p


def _observe(
    p: Patterns,
    tool: str,
    arguments: Mapping[str, Any],
    seen: Mapping[str, set[Source]],
    linked: set[str],
    user_text: str,
) -> None:
    for name, value in arguments.items():
        key = (tool, str(name))
        p.uses[key] += 1
        tag = value_tag(value)
        sources = set(seen.get(tag, ()))
        in_user = list(anchors(user_text, value))
        if in_user:
            sources.add(("user",))
            p.anchors.setdefault(key, Counter()).update(in_user)
        flows = p.flows.setdefault(key, Counter())
        for src in sorted(sources):  # not set order: it varies with PYTHONHASHSEED and breaks ties
            flows[src] += 1
        if s := shape(value):
            p.shapes.setdefault(key, Counter())[s] += 1
        if any(src[0] == "out" for src in sources):
            p.linked.setdefault(key, Counter())[tag in linked] += 1
