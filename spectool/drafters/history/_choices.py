"""The values a model drafter may choose from: value selection's candidates, per parameter.

Where the mined flows say a parameter's value is copied (its most common source, an earlier
argument, a field of a tool output or the user's text, covers at least :data:`COPIED_SHARE` of its
uses), :func:`value_choices` gives that parameter's top candidates from
:func:`._values.rank_values` (the same ranking the learning drafter fills calls with). The local
drafter's ``choose_values`` option makes them the parameter's ``enum`` in the call grammar
(:func:`._grammar.with_choices`), so the model picks one of them instead of writing a value. A
parameter the flows have not seen, or one they say is written, is left out (free schema).
Pure: no I/O, no state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ._evidence import collect_evidence
from ._learning import mined_sources, value_context
from ._patterns import Patterns
from ._values import RULES, rank_values

__all__ = ["COPIED_SHARE", "MAX_CHOICES", "copied", "value_choices"]

#: a parameter is copied when one source covers at least this share of its uses
COPIED_SHARE = 0.5
#: candidates offered per parameter at most (the grammar's enum)
MAX_CHOICES = 8


def copied(patterns: Patterns, tool: str, pname: str) -> bool:
    """Whether the flows say ``tool``'s ``pname`` is copied from somewhere."""
    uses = patterns.uses.get((tool, pname), 0)
    counts = patterns.flows.get((tool, pname))
    return bool(uses and counts) and max(counts.values()) / uses >= COPIED_SHARE  # type: ignore[union-attr]


def value_choices(
    messages: Sequence[Mapping[str, Any]],
    tools: Mapping[str, Mapping[str, Any]],
    patterns: Patterns,
) -> dict[str, dict[str, list[Any]]]:
    """``{tool: {parameter: [values, best first]}}`` for the copied parameters of ``tools``
    (name -> function body) that have candidates in ``messages``."""
    evidence = collect_evidence(messages)
    ctx = value_context(messages)
    out: dict[str, dict[str, list[Any]]] = {}
    for name, body in tools.items():
        props = (body.get("parameters") or {}).get("properties") or {}
        for pname, pschema in props.items():
            if not copied(patterns, name, pname):
                continue
            schema = pschema if isinstance(pschema, Mapping) else {}
            mined = mined_sources(patterns, name, pname)
            ranked = rank_values(name, pname, schema, evidence, set(), mined, patterns, ctx, RULES)
            if ranked:
                out.setdefault(name, {})[pname] = [c.value for c in ranked[:MAX_CHOICES]]
    return out
