"""Value selection: rank the candidate values of one parameter of a predicted tool.

Candidates come from :class:`._evidence.Evidence` (mined data-flow sources, same-name fields
of outputs and arguments, ``name: value`` phrases, enum values, literals of the user's text)
plus every word or id of the user's text (:func:`._shapes.spans`) for a string parameter.
:func:`rank_values` orders them by what finished conversations taught (:class:`._patterns.Patterns`),
each rule one name in ``rules`` so it can be switched off (and its hits measured):

* ``used``: a value this tool already took for this parameter in the conversation goes last
  (a list of order ids is walked, not repeated);
* ``shape``: with :data:`MIN_SEEN` values seen, one whose shape (:func:`._shapes.shape`) the
  parameter never took is dropped (``"Reason"`` is no ``user_id``);
* ``anchor``: a value the user wrote scores the share of the parameter's past values that had
  the same word before / after it (``are Mei <Cap>``: a first name), and the share of values
  the flows say came from the user's text;
* ``linked``: a value from a tool output whose record names something the user wrote (the
  keyboard's ``product_id``) scores the share of past values that were so linked.

Then stronger evidence, then more recent, then earlier in its text. Pure: no I/O, no state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._evidence import _NO, Candidate, Evidence, _coerce, _types
from ._flows import Source, value_tag
from ._patterns import Patterns
from ._shapes import anchors, shape, spans

__all__ = ["MIN_SEEN", "RULES", "ValueContext", "rank_values"]

#: the value rules; "record" is applied by the drafter (:mod:`._records`), before these
RULES = frozenset({"used", "shape", "anchor", "linked", "record"})
#: values of a parameter seen before its shapes are trusted to drop a candidate
MIN_SEEN = 3


@dataclass(frozen=True)
class ValueContext:
    """What one request says about values: the user's text, the (tool, parameter, value tag)
    triples its calls used, and the value tags of output records the user named."""

    user_text: str
    used: frozenset[tuple[str, str, str]]
    linked: frozenset[str]
    user_index: int = 0  # message index of the latest user text
    tokens: tuple[tuple[int, str], ...] = ()  # (position, word or id) of the user's text


def _share(counts: Mapping[Any, int] | None, keys: Iterable[Any]) -> float:
    if not counts:
        return 0.0
    total = sum(counts.values())
    return sum(counts.get(k, 0) for k in keys) / total if total else 0.0


def _span_candidates(schema: Mapping[str, Any], ctx: ValueContext, rec: int) -> list[Candidate]:
    types = _types(schema)
    if types and "string" not in types:
        return []
    out = []
    for pos, token in ctx.tokens or tuple(spans(ctx.user_text)):
        coerced = _coerce(token, schema)
        if coerced is not _NO:
            out.append(Candidate(coerced, 0.5, rec, pos))
    return out


def rank_values(
    tool: str,
    pname: str,
    schema: Mapping[str, Any],
    evidence: Evidence,
    taken: set[int],
    mined: Sequence[tuple[Source, float]],
    patterns: Patterns,
    ctx: ValueContext,
    rules: frozenset[str] = RULES,
) -> list[Candidate]:
    """The parameter's candidates, best first, distinct values (see the module doc)."""
    key = (tool, pname)
    found = evidence.candidates(pname, schema, taken, mined)
    seen = {value_tag(c.value) for c in found}
    for c in _span_candidates(schema, ctx, ctx.user_index):
        if value_tag(c.value) not in seen:
            seen.add(value_tag(c.value))
            found.append(c)
    shapes = patterns.shapes.get(key)
    known_shapes = shapes is not None and sum(shapes.values()) >= MIN_SEEN
    flows = patterns.flows.get(key)
    uses = patterns.uses.get(key, 0)
    user_share = (flows or {}).get(("user",), 0) / uses if uses else 0.0
    anchor_counts = patterns.anchors.get(key)
    linked_counts = patterns.linked.get(key)
    ranked: list[tuple[tuple[Any, ...], Candidate]] = []
    for i, c in enumerate(found):
        tag = value_tag(c.value)
        if "shape" in rules and known_shapes and shapes is not None and shape(c.value) not in shapes:
            continue
        score = c.strength
        if "anchor" in rules and user_share and c.strength < 2:
            around = set(anchors(ctx.user_text, c.value))
            if around:
                score = 2 + user_share + _share(anchor_counts, around)
        if "linked" in rules and tag in ctx.linked:
            score += _share(linked_counts, (True,))
        used = "used" in rules and (tool, pname, tag) in ctx.used
        ranked.append(((used, -score, -c.recency, c.order, i), c))
    ranked.sort(key=lambda x: x[0])
    return [c for _, c in ranked]
