"""Why a draft missed: each missed speculable call sorted into one kind (pure, no I/O).

A speculable ground-truth call that no proposal matched is one of

* ``no_call``: the step got no proposal of an offered tool at all (the drafter wrote nothing it
  could parse, its gate held it back, or it failed): under the grammar this is where a format
  error ends up, since a draft that does not parse is dropped before it is scored;
* ``wrong_tool``: proposals came, none names the call's tool;
* ``wrong_args``: a proposal names the tool, but its argument names differ (one missing or one
  extra, after the schema's defaults are filled);
* ``wrong_value``: the same tool and argument names, a value differs. Of these,
  ``wrong_value_copyable`` counts the ones where every differing value of the call is a string
  found verbatim in what the drafter was told (user and tool messages): the misses a copy
  constraint could fix;
* ``repeat``: a proposal equal to the call exists but served another equal call of the step
  (an answer that needs the same call twice).

``bfcl_accepted`` counts the wrong-args and wrong-value misses that BFCL's own checker would
take: every argument of the closest proposal is one of the values BFCL lists as acceptable (an
omitted one where BFCL allows omitting it). The gold call is the first acceptable value of each
argument, so these are guesses a main model could as well have written; they are still misses,
since the cache key must equal the call the main model makes.

For each call the closest proposal of its tool is the one with the fewest differing argument
names, then values. The kinds are exclusive, so they add up to the step's missed speculable
calls; ``wrong_value_copyable`` is a part of ``wrong_value``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spectool import ToolCall
from spectool.drafters import call_key
from spectool.keys import canonical_arguments

__all__ = ["MISS_KINDS", "SUB_KINDS", "classify_misses", "told_text"]

MISS_KINDS = (
    "no_call",
    "wrong_tool",
    "wrong_args",
    "wrong_value",
    "wrong_value_copyable",
    "repeat",
    "bfcl_accepted",
)
#: the kinds that are parts of others (they do not add to the missed calls)
SUB_KINDS = ("wrong_value_copyable", "bfcl_accepted")


def told_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """What a value can be copied from: the user and tool messages' text."""
    return "\n".join(
        m["content"]
        for m in messages
        if m.get("role") in ("user", "tool") and isinstance(m.get("content"), str)
    )


def _arguments(call: ToolCall, schemas: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    try:
        return canonical_arguments(call.arguments, (schemas.get(call.name) or {}).get("parameters"))
    except ValueError:
        return dict(call.arguments)


def _distance(truth: Mapping[str, Any], guess: Mapping[str, Any]) -> tuple[int, int]:
    """(argument names in one and not the other, shared names with different values)."""
    names = len(set(truth) ^ set(guess))
    values = sum(1 for k in set(truth) & set(guess) if truth[k] != guess[k])
    return names, values


def classify_misses(
    proposals: Sequence[ToolCall],
    calls: Sequence[ToolCall],
    speculable_tools: set[str],
    schemas: Mapping[str, Mapping[str, Any]],
    source: str,
    options: Sequence[tuple[str, Mapping[str, Any]]] = (),
) -> dict[str, int]:
    """Counts per :data:`MISS_KINDS` of the step's missed speculable calls.

    Matching follows :func:`._metrics.score_step`: the first 16 proposals of offered tools,
    one distinct key serving one call. ``options``: per call of ``calls`` (same order), BFCL's
    acceptable values per argument, where the task has them (single-turn BFCL).
    """
    from ._metrics import MAX_PROPOSALS

    offered = [p for p in proposals[:MAX_PROPOSALS] if p.name in schemas]
    unmatched = {call_key(p, schemas) for p in offered}
    all_keys = set(unmatched)
    missed: list[tuple[ToolCall, Mapping[str, Any] | None]] = []
    aligned = len(options) == len(calls)  # BFCL's values line up with the gold calls
    for i, call in enumerate(calls):
        key = call_key(call, schemas)
        if key in unmatched:
            unmatched.discard(key)
        elif call.name in speculable_tools:
            missed.append((call, options[i][1] if aligned and options[i][0] == call.name else None))
    out = dict.fromkeys(MISS_KINDS, 0)
    for call, allowed in missed:
        kind = _kind(call, offered, schemas, source, call_key(call, schemas) in all_keys)
        out[kind] += 1
        if allowed is not None and kind in ("wrong_args", "wrong_value", "wrong_value_copyable"):
            out["bfcl_accepted"] += _accepted(call, offered, schemas, allowed)
    out["wrong_value"] += out["wrong_value_copyable"]
    return out


def _accepted(
    call: ToolCall,
    offered: Sequence[ToolCall],
    schemas: Mapping[str, Mapping[str, Any]],
    allowed: Mapping[str, Any],
) -> bool:
    """True when some proposal of the call's tool passes BFCL's value check: each argument it
    names is one of the allowed values, each it leaves out may be omitted ("" listed)."""
    schema = (schemas.get(call.name) or {}).get("parameters")

    def norm(name: str, value: Any) -> Any:
        try:
            return canonical_arguments({name: value}, schema).get(name)
        except ValueError:
            return value

    for proposal in offered:
        if proposal.name != call.name:
            continue
        given = dict(proposal.arguments)
        if not all(k in allowed for k in given):
            continue
        fits = all(
            norm(k, given[k]) in [norm(k, o) for o in opts if o != ""] if k in given else "" in opts
            for k, opts in allowed.items()
        )
        if fits:
            return True
    return False


def _kind(
    call: ToolCall,
    offered: Sequence[ToolCall],
    schemas: Mapping[str, Mapping[str, Any]],
    source: str,
    proposed: bool,
) -> str:
    if proposed:
        return "repeat"
    if not offered:
        return "no_call"
    same_tool = [p for p in offered if p.name == call.name]
    if not same_tool:
        return "wrong_tool"
    truth = _arguments(call, schemas)
    guesses = [_arguments(p, schemas) for p in same_tool]
    best = min(guesses, key=lambda g: _distance(truth, g))
    if _distance(truth, best)[0]:
        return "wrong_args"
    differing = [truth[k] for k in truth if truth[k] != best[k]]
    if differing and all(isinstance(v, str) and v and v in source for v in differing):
        return "wrong_value_copyable"
    return "wrong_value"
