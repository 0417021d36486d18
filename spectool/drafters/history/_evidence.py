"""Where the history drafter finds argument values: the conversation, read without a model.

Each candidate value for a parameter has a *strength* (3: the user wrote ``name: value``;
2: a tool output or an earlier call has a field named like the parameter, or the user's text
names one of its enum values; 1: a bare literal of the right type in the user's text) and a
*recency* (message index). Stronger wins, then more recent, then earlier in the text.
Mined data flow (:mod:`._flows`) adds candidates from the sources a parameter took its value
from in earlier sessions, at strength 2 + the source's share (above same-name evidence, below
an explicit ``name: value``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...keys import json_type
from .._common import assistant_calls, message_text

__all__ = ["Candidate", "Evidence", "collect_evidence"]

_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.]*[A-Za-z])")
# Single quotes only as quotes, not apostrophes: "I'm … I'll" is no quoted string.
_QUOTED = re.compile(r"\"([^\"]{1,200})\"|(?<!\w)'([^']{1,200})'(?!\w)|`([^`]{1,200})`")
# Proper nouns, tickers, file names, ids: the tokens a string argument usually is.
_ENTITY = re.compile(r"\b(?:[A-Z][\w-]*(?:\.[\w-]+)*|[\w-]+\.[A-Za-z0-9]{1,8}|[a-z]+\d[\w-]*)\b")
_SENTENCE_START = re.compile(r"(?:^|[.!?]\s+)$")
# Multi-word names, optionally with a region after a comma: "San Francisco", "New York, NY",
# "Chennai, Tamil Nadu", "2020 Addison Street, Berkeley, CA, USA".
_PLACE = re.compile(
    r"\b(?:\d+[A-Z]?\s)?[A-Z][a-z]+(?:\s[A-Z][a-z]+)+(?:,\s[A-Z][A-Za-z]+(?:\s[A-Z][a-z]+)*)*"
    r"|\b[A-Z][a-z]+(?:,\s[A-Z][A-Za-z]+(?:\s[A-Z][a-z]+)*)+"
)
_NOT_ENTITY = frozenset({"I", "I'm", "I'd", "I've"})


@dataclass(frozen=True)
class Candidate:
    value: Any
    strength: float
    recency: int
    order: int = 0
    literal_id: int | None = None


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


@dataclass
class Evidence:
    """Named values (from outputs and call arguments) and user texts, with message indices."""

    named: list[tuple[str, Any, int]] = field(default_factory=list)
    texts: list[tuple[str, int]] = field(default_factory=list)
    #: latest values per data-flow source (``("arg", tool, param)`` / ``("out", tool, field)``)
    sourced: dict[tuple[str, ...], list[tuple[Any, int]]] = field(default_factory=dict)

    def candidates(
        self,
        pname: str,
        schema: Mapping[str, Any],
        taken: set[int],
        mined: Sequence[tuple[tuple[str, ...], float]] = (),
    ) -> list[Candidate]:
        found: list[Candidate] = []
        for source, share in mined:
            for order, (value, rec) in enumerate(self.sourced.get(source, ())):
                coerced = _coerce(value, schema)
                if coerced is not _NO:
                    found.append(Candidate(coerced, 2 + share, rec, order))
        key = _norm(pname)
        for name, value, rec in self.named:
            if name == key:
                coerced = _coerce(value, schema)
                if coerced is not _NO:
                    found.append(Candidate(coerced, 2, rec))
        for t_index, (text, rec) in enumerate(self.texts):
            found.extend(self._from_text(pname, schema, text, rec, t_index, taken))
        found.sort(key=lambda c: (-c.strength, -c.recency, c.order))
        unique: list[Candidate] = []
        seen: set[str] = set()
        for cand in found:
            tag = json.dumps(cand.value, sort_keys=True, default=repr)
            if tag not in seen:
                seen.add(tag)
                unique.append(cand)
        return unique

    def _from_text(
        self, pname: str, schema: Mapping[str, Any], text: str, rec: int, t_index: int, taken: set[int]
    ) -> Iterator[Candidate]:
        words = r"[\s_-]*".join(re.escape(w) for w in re.split(r"[_\W]+", pname) if w)
        if words:
            phrase = re.compile(
                rf"\b{words}\b\s*(?:[:=]|is|of|as|to|named|called)?\s*"
                r"(\"[^\"]*\"|'[^']*'|[\w./@:+-]+)",
                re.I,
            )
            for m in phrase.finditer(text):
                raw = m.group(1).strip("\"'")
                coerced = _coerce(_scalar(raw), schema)
                if coerced is not _NO:
                    yield Candidate(coerced, 3, rec, m.start())
        for value in schema.get("enum") or ():
            if isinstance(value, str) and re.search(rf"\b{re.escape(value)}\b", text, re.I):
                yield Candidate(value, 2, rec, text.lower().find(value.lower()))
        for pos, raw in _literals(text, _types(schema)):
            lid = t_index * 1_000_000 + pos
            if lid in taken:
                continue
            coerced = _coerce(raw, schema)
            if coerced is not _NO:
                yield Candidate(coerced, 1, rec, pos, lid)


def collect_evidence(messages: Sequence[Mapping[str, Any]]) -> Evidence:
    from ._flows import NOT_JSON, output_fields, read_output

    ev = Evidence()
    call_names: dict[str, str] = {}
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "assistant":
            for call in assistant_calls(m):
                call_names[str(call.id)] = call.name
                for k, v in call.arguments.items():
                    ev.named.append((_norm(str(k)), v, i))
                    ev.sourced[("arg", call.name, str(k))] = [(v, i)]
        elif role == "tool":
            tool = call_names.get(str(m.get("tool_call_id")), "")
            fresh: dict[tuple[str, ...], list[tuple[Any, int]]] = {}
            output = read_output(m.get("content"))
            for k, v in output_fields(output):
                fresh.setdefault(("out", tool, k), []).append((v, i))
            for src, values in fresh.items():  # newest output first; earlier ones stay behind it
                ev.sourced[src] = values + ev.sourced.get(src, [])
            if output.value is NOT_JSON:
                continue
            for k, v in _fields(output.value, depth=3):
                ev.named.append((_norm(k), v, i))
        elif role == "user":
            ev.texts.append((message_text(m.get("content")), i))
    return ev


def _fields(value: Any, depth: int) -> Iterator[tuple[str, Any]]:
    if depth <= 0:
        return
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield str(k), v
            yield from _fields(v, depth - 1)
    elif isinstance(value, list):
        for v in value[:50]:
            yield from _fields(v, depth - 1)


def _literals(text: str, types: set[str]) -> Iterator[tuple[int, Any]]:
    """(position, value) of bare literals a parameter of ``types`` could take, in text order."""
    if types & {"number", "integer"}:
        for m in _NUMBER.finditer(text):
            yield m.start(), _scalar(m.group())
    if "string" in types or not types:
        quoted_spans = []
        for m in _QUOTED.finditer(text):
            quoted_spans.append(m.span())
            yield m.start(), next(g for g in m.groups() if g is not None)
        for m in _PLACE.finditer(text):
            start, name = m.start(), m.group()
            if _SENTENCE_START.search(text[:start]) is not None:  # "Use Oslo": drop the capital verb
                first, _, rest = name.partition(" ")
                start, name = start + len(first) + 1, rest
                if " " not in name and "," not in name:
                    continue
            if name and not any(a <= start < b for a, b in quoted_spans):
                yield start, name
        for m in _ENTITY.finditer(text):
            if m.group() in _NOT_ENTITY:
                continue
            inside = any(a <= m.start() < b for a, b in quoted_spans)
            sentence_start = _SENTENCE_START.search(text[: m.start()]) is not None
            if not inside and not (sentence_start and m.group()[0].isupper() and m.group()[1:].islower()):
                yield m.start(), m.group()


_NO = object()


def _types(schema: Mapping[str, Any]) -> set[str]:
    t = schema.get("type")
    if isinstance(t, str):
        return {t}
    if isinstance(t, list):
        return set(t)
    if "enum" in schema:
        return {json_type(v) for v in schema["enum"]}
    return set()


def _scalar(raw: str) -> Any:
    for cast in (int, float):
        try:
            return cast(raw)
        except ValueError:
            pass
    low = raw.lower()
    return {"true": True, "false": False}.get(low, raw)


def _coerce(value: Any, schema: Mapping[str, Any]) -> Any:
    """``value`` as the schema's type, or ``_NO`` if it does not fit."""
    if "enum" in schema and value not in schema["enum"]:
        return _NO
    types = _types(schema)
    if not types:
        return value
    if isinstance(value, bool):
        return value if "boolean" in types else (str(value).lower() if "string" in types else _NO)
    if isinstance(value, (int, float)):
        if "integer" in types and float(value).is_integer():
            return int(value)
        if "number" in types:
            return value
        return str(value) if "string" in types else _NO
    if isinstance(value, str):
        return value if "string" in types else _NO
    if isinstance(value, list):
        return value if "array" in types else _NO
    if isinstance(value, Mapping):
        return dict(value) if "object" in types else _NO
    return _NO
