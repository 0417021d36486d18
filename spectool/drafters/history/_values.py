"""Value selection: rank the candidate values of one parameter of a predicted tool.

Candidates come from :class:`._evidence.Evidence` (mined data-flow sources, same-name fields
of outputs and arguments, ``name: value`` phrases, enum values, literals of the user's text)
plus every word or id of the user's text (:func:`._shapes.spans`) for a string parameter.
:func:`rank_values` orders them by what finished conversations taught (:class:`._patterns.Patterns`),
each rule one name in ``rules`` so it can be switched off (and its hits measured):

* ``used``: a value this tool already took for this parameter in the conversation goes last
  (a list of order ids is walked, not repeated);
* ``shape``: where a parameter's values came in few id shapes (digits, ``#_@`` or capitals
  only in each; at least :data:`MIN_SEEN` values, three per shape: order ids, user ids,
  dates, zips, codes), a candidate of another shape (:func:`._shapes.shape`) is dropped
  (``"Reason"`` is no ``user_id``); where they came in few one-word shapes, one of another
  shape ranks last (``"Mei Kovacs"`` is no first name);
* ``anchor``: where the values came in few one-word shapes (first names, zips), a value the
  user wrote with the same word before / after it as some past values (``are Mei <Cap>``: a
  first name) scores that share plus the share of values the flows say came from the user;
* ``linked``: a value from a tool output whose record names something the user wrote (the
  keyboard's ``product_id``) scores the share of past values that were so linked.

Then stronger evidence, then more recent, then earlier in its text. Pure: no I/O, no state.
"""

from __future__ import annotations

import re
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
#: what makes a shape an id's: digits, or the marks ids are written with
_ID_MARK = re.compile(r"0\{|[#_@]|^[XA]\{")


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


def _span_candidates(
    schema: Mapping[str, Any], ctx: ValueContext, rec: int, shapes: Mapping[str, int] | None
) -> list[Candidate]:
    """Words and ids of the user's text shaped like the parameter's past values (none where
    no values were seen: a bare word is no value on its own)."""
    types = _types(schema)
    if not shapes or (types and "string" not in types):
        return []
    out = []
    for pos, token in ctx.tokens or tuple(spans(ctx.user_text)):
        coerced = _coerce(token, schema)
        if coerced is not _NO and shape(coerced) in shapes:
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
    for c in _span_candidates(schema, ctx, ctx.user_index, patterns.shapes.get(key)):
        if value_tag(c.value) not in seen:
            seen.add(value_tag(c.value))
            found.append(c)
    shapes = patterns.shapes.get(key)
    seen_n = sum(shapes.values()) if shapes else 0
    # values that came in few shapes: ids drop the misfits, one-word values read anchors
    closed = seen_n >= MIN_SEEN and shapes is not None and len(shapes) * 3 <= seen_n
    ids = closed and shapes is not None and all(_ID_MARK.search(s) for s in shapes)
    words = closed and shapes is not None and not any(" " in s or "," in s for s in shapes)
    flows = patterns.flows.get(key)
    uses = patterns.uses.get(key, 0)
    user_share = flows[("user",)] / uses if flows is not None and uses else 0.0
    anchor_counts = patterns.anchors.get(key)
    linked_counts = patterns.linked.get(key)
    ranked: list[tuple[tuple[Any, ...], Candidate]] = []
    for i, c in enumerate(found):
        tag = value_tag(c.value)
        if "shape" in rules and ids and shapes is not None and shape(c.value) not in shapes:
            continue
        score = c.strength
        if "anchor" in rules and words and user_share and c.strength < 2:
            fit = _share(anchor_counts, set(anchors(ctx.user_text, c.value)))
            if fit:
                score = 2 + user_share + fit
        if "linked" in rules and tag in ctx.linked:
            score += _share(linked_counts, (True,))
        used = "used" in rules and (tool, pname, tag) in ctx.used
        # one-word parameters rank a value of another shape ("Mei Kovacs" for a first name) last
        misfit = "shape" in rules and words and shapes is not None and shape(c.value) not in shapes
        ranked.append(((used, misfit, -score, -c.recency, c.order, i), c))
    ranked.sort(key=lambda x: x[0])
    return [c for _, c in ranked]
