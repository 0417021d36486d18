"""Data flow and control flow mined from finished conversations (PASTE-style, no model).

From traces (Chat Completions message lists of finished sessions) :func:`mine_flows` learns

* **control flow**: the tool-name sequence of every session (the history drafter's n-grams);
* **data flow**: for each (tool, parameter), where its value came from — an earlier call's
  argument ``("arg", tool, param)``, a field of an earlier tool output ``("out", tool, field)``
  or the user's text ``("user",)`` — counted over the calls that used it.

At draft time :meth:`Flows.sources` gives a parameter's sources with their share of
observations, so an argument named differently from its source (``receiver_id`` ← the
``user_id`` field of ``get_user_id``'s output) is filled from the right place.
"""

from __future__ import annotations

import functools
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .._common import assistant_calls, message_text

__all__ = ["NOT_JSON", "Flows", "Output", "Source", "mine_flows", "output_fields", "read_output", "value_tag"]

Source = tuple[str, ...]  # ("arg", tool, param) | ("out", tool, field) | ("user",)


def value_tag(value: Any) -> str:
    """A comparable form of a value: JSON with sorted keys; numbers equal as numbers."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return repr(float(value))
    if isinstance(value, str):
        return _string_tag(value)
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=repr)


@functools.lru_cache(maxsize=16384)
def _string_tag(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


#: the value of an :class:`Output` whose text is not JSON
NOT_JSON: Any = object()


class Output(NamedTuple):
    """A tool output read once: its text (stripped) and its JSON value (or :data:`NOT_JSON`);
    every reader of outputs takes this, so a conversation's outputs are parsed once a pass."""

    text: str
    value: Any


def read_output(content: Any) -> Output:
    text = message_text(content).strip()
    try:
        return Output(text, json.loads(text))
    except (json.JSONDecodeError, TypeError):
        return Output(text, NOT_JSON)


def output_fields(output: Output, depth: int = 3) -> Iterator[tuple[str, Any]]:
    """(field name, value) of a JSON tool output, nested up to ``depth``; list items under their
    field's name too (``{"files": ["a", "b"]}`` gives ``files: a`` and ``files: b``). An output
    that is one scalar or one bare word (``noah_ito_3850``) is the field ``""``."""
    text, value = output
    if value is NOT_JSON:
        if text and len(text) <= 100 and not any(c.isspace() for c in text):
            yield "", text  # a bare result (an id, a name): the whole output is the value
        return
    if not isinstance(value, (Mapping, list)):
        yield "", value
        return
    yield from _walk(value, "", depth)


def _walk(value: Any, name: str, depth: int) -> Iterator[tuple[str, Any]]:
    if depth < 0:
        return
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield str(k), v
            yield from _walk(v, str(k), depth - 1)
    elif isinstance(value, list):
        for v in value[:50]:
            if name and not isinstance(v, (Mapping, list)):
                yield name, v
            yield from _walk(v, name, depth - 1)


@dataclass
class Flows:
    """Mined control flow (``sequences``) and data flow (``counts``/``totals``)."""

    sequences: list[list[str]] = field(default_factory=list)
    counts: dict[tuple[str, str], Counter[Source]] = field(default_factory=lambda: defaultdict(Counter))
    totals: Counter[tuple[str, str]] = field(default_factory=Counter)

    def sources(self, tool: str, param: str, min_share: float = 0.2) -> list[tuple[Source, float]]:
        """Sources of ``tool``'s ``param`` seen in at least ``min_share`` of its uses, best first."""
        total = self.totals.get((tool, param), 0)
        if not total:
            return []
        ranked = [(src, n / total) for src, n in self.counts[(tool, param)].most_common()]
        return [(src, share) for src, share in ranked if share >= min_share]


def mine_flows(traces: Iterable[Sequence[Mapping[str, Any]]]) -> Flows:
    """Control flow and data flow of finished conversations (each a list of chat messages)."""
    flows = Flows()
    for messages in traces:
        names: list[str] = []
        seen: dict[str, set[Source]] = defaultdict(set)  # value tag -> sources seen so far
        user_text = ""
        call_names: dict[str, str] = {}  # tool_call_id -> tool name
        for m in messages:
            role = m.get("role")
            if role == "user":
                user_text += "\n" + message_text(m.get("content"))
            elif role == "assistant":
                for call in assistant_calls(m):
                    names.append(call.name)
                    _observe(flows, call.name, call.arguments, seen, user_text)
                    for k, v in call.arguments.items():
                        seen[value_tag(v)].add(("arg", call.name, str(k)))
                    if call.id:
                        call_names[call.id] = call.name
            elif role == "tool":
                tool = call_names.get(str(m.get("tool_call_id")), "")
                for k, v in output_fields(read_output(m.get("content"))):
                    seen[value_tag(v)].add(("out", tool, k))
        if names:
            flows.sequences.append(names)
    return flows


def _observe(
    flows: Flows, tool: str, arguments: Mapping[str, Any], seen: Mapping[str, set[Source]], user_text: str
) -> None:
    for k, v in arguments.items():
        key = (tool, str(k))
        flows.totals[key] += 1
        sources = set(seen.get(value_tag(v), ()))
        if isinstance(v, (str, int, float)) and not isinstance(v, bool) and str(v) and str(v) in user_text:
            sources.add(("user",))
        for src in sorted(sources):  # not set order: it varies with PYTHONHASHSEED and breaks ties
            flows.counts[key][src] += 1
