"""Record fillings: every argument of a call from one record of a tool output, records walked.

An agent that checks each flight of a reservation (``search(origin, destination, date)``)
takes all three values from one record of an output (one flight), then the next record.
Filling each parameter on its own mixes records (``ORD → PHL`` on another flight's date) and
repeats the first. Here a tool that the mined patterns say took its arguments from one record
(:attr:`._patterns.Patterns.records`) is filled record by record, in the order the records
were read, each record whose call was already made skipped. Pure functions.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .._common import assistant_calls
from ._flows import NOT_JSON, Output, read_output, value_tag

__all__ = ["MAX_RECORDS", "objects_of", "records_of", "record_fillings"]

#: records read per output at most
MAX_RECORDS = 200


def objects_of(output: Output) -> Iterator[Mapping[str, Any]]:
    """The JSON objects of a tool output, nested ones too (4 levels deep, the first 50 items of
    a list), in order; none where the output is not JSON."""
    return _walk(output.value, 4) if output.value is not NOT_JSON else iter(())


def records_of(output: Output) -> list[dict[str, Any]]:
    """The JSON objects of a tool output (nested ones too), scalar fields only, in order."""
    out: list[dict[str, Any]] = []
    for record in objects_of(output):
        scalars = {str(k): v for k, v in record.items() if not isinstance(v, (Mapping, list))}
        if len(scalars) >= 2:
            out.append(scalars)
        if len(out) >= MAX_RECORDS:
            break
    return out


def _walk(value: Any, depth: int) -> Iterator[Mapping[str, Any]]:
    if depth < 0:
        return
    if isinstance(value, Mapping):
        yield value
        for v in value.values():
            yield from _walk(v, depth - 1)
    elif isinstance(value, list):
        for v in value[:50]:
            yield from _walk(v, depth - 1)


def record_fillings(
    tool: str,
    params: Mapping[str, Any],
    messages: Sequence[Mapping[str, Any]],
    fields: Mapping[str, Sequence[str]],
    most: int,
) -> list[dict[str, Any]]:
    """Up to ``most`` argument sets of ``tool``, each from one record, records in the order they
    were read; ``fields``: per parameter, the output field names its values came from (its
    own name is tried last). A record must give every required parameter; an argument set the
    conversation already called ``tool`` with is skipped."""
    props = params.get("properties") or {}
    required = [p for p in params.get("required") or () if p in props]
    if len(required) < 2:
        return []
    made = {
        json.dumps({k: value_tag(v) for k, v in sorted(c.arguments.items())})
        for m in messages
        if m.get("role") == "assistant"
        for c in assistant_calls(m)
        if c.name == tool
    }
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for m in messages:
        if m.get("role") != "tool":
            continue
        for record in records_of(read_output(m.get("content"))):
            args = {}
            for pname in props:
                for f in (*fields.get(pname, ()), pname):
                    if f in record:
                        args[pname] = record[f]
                        break
            if not all(p in args for p in required):
                continue
            tag = json.dumps({k: value_tag(v) for k, v in sorted(args.items())})
            if tag in made or tag in seen:
                continue
            seen.add(tag)
            out.append(args)
            if len(out) >= most:
                return out
    return out
