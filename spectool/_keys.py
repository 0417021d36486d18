"""Canonical keys for tool calls: the one key function both cache sides share.

Standard library only, so the serving engine (and a vLLM plugin) can import it alone.

Two calls get the same key exactly when a tool would see the same arguments: object key order
and JSON whitespace do not matter; where the JSON schema says ``number`` an integer and a float
of equal value are one value (``integer``: an integral float is the integer); defaults from
the schema are filled in; nested objects and arrays are normalized with their sub-schemas.
In an ``anyOf``/``oneOf`` union a value takes the branch of its own JSON type first (``5``
the ``integer`` branch, ``5.0`` the ``number`` one), as pydantic's smart unions do.
Without a schema, values are compared as JSON (``1`` and ``1.0`` stay distinct, since a tool
may treat them differently). NaN and infinities stay floats (``NaN`` in the key text, never
the string ``"nan"``); values that are not JSON (tuples, non-string object keys, objects) are
refused with ``ValueError`` rather than given a key that could collide with a JSON value.

Tools with a pydantic validator (every ``@tool``) key their *validated* arguments instead
(``ToolSpec.key``), so equal keys mean the function receives equal arguments.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["KeyFunction", "canonical_arguments", "canonical_key", "parse_arguments"]

#: A per-tool custom key: receives the normalized arguments, returns any JSON-able value.
KeyFunction = Callable[[Mapping[str, Any]], Any]

_SEP = "\x1f"  # unit separator: cannot appear in a tool name that a model can emit


def parse_arguments(arguments: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """Arguments as a dict, from a JSON string (OpenAI wire format) or a mapping.

    Raises ``ValueError`` (with the reason) for malformed JSON or a non-object.
    """
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, Mapping):
        return dict(arguments)
    if not isinstance(arguments, str):
        raise ValueError(f"arguments must be a JSON object or string, got {type(arguments).__name__}")
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError as exc:
        raise ValueError(f"arguments are not valid JSON: {exc.msg} at position {exc.pos}") from exc
    if not isinstance(value, dict):
        raise ValueError(f"arguments must be a JSON object, got {type(value).__name__}")
    return value


def _types_of(schema: Mapping[str, Any]) -> set[str]:
    t = schema.get("type")
    if isinstance(t, str):
        return {t}
    if isinstance(t, list):
        return {x for x in t if isinstance(x, str)}
    return set()


def _exact_type(value: Any) -> str | None:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return None


def _branch_for(value: Any, schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """For anyOf/oneOf, the first branch of the value's own JSON type, else the first whose
    type admits it (else the schema itself). Exact type first: ``int | float`` keeps 5 and 5.0
    apart, as the validator does."""
    branches = [b for kw in ("anyOf", "oneOf") for b in (schema.get(kw, ()) or ()) if isinstance(b, Mapping)]
    exact = _exact_type(value)
    if exact is not None:
        for branch in branches:
            if exact in _types_of(branch):
                return branch
    for branch in branches:
        if _admits(branch, value):
            return branch
    return schema


def _admits(schema: Mapping[str, Any], value: Any) -> bool:
    types = _types_of(schema)
    if not types:
        return True
    if isinstance(value, bool):
        return "boolean" in types
    if isinstance(value, int):
        return bool(types & {"integer", "number"})
    if isinstance(value, float):
        return "number" in types or ("integer" in types and value.is_integer())
    if isinstance(value, str):
        return "string" in types
    if value is None:
        return "null" in types
    if isinstance(value, Mapping):
        return "object" in types
    if isinstance(value, list):
        return "array" in types
    return False


def _normalize(value: Any, schema: Mapping[str, Any] | None) -> Any:
    if schema is not None:
        schema = _branch_for(value, schema)
    types = _types_of(schema) if schema else set()
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            return value  # dumped as NaN/Infinity: never equal to the strings "nan"/"inf"
        if "number" in types:
            try:
                return float(value)
            except OverflowError:  # an int beyond float range stays itself
                return value
        if "integer" in types and isinstance(value, float) and value.is_integer():
            return int(value)
        return value
    if isinstance(value, Mapping):
        props = (schema or {}).get("properties") or {}
        extra = (schema or {}).get("additionalProperties")
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):  # str(k) would collide {1: x} with {"1": x}
                raise ValueError(f"object keys must be strings, got {type(k).__name__} {k!r}")
            sub = props.get(k, extra if isinstance(extra, Mapping) else None)
            out[k] = _normalize(v, sub)
        for k, sub in props.items():
            if k not in out and isinstance(sub, Mapping) and "default" in sub:
                out[k] = _normalize(sub["default"], sub)
        return out
    if isinstance(value, list):
        items = (schema or {}).get("items")
        sub = items if isinstance(items, Mapping) else None
        return [_normalize(v, sub) for v in value]
    # Not JSON (a tuple, a set, an object): a repr could collide with a string; refuse.
    raise ValueError(f"arguments must be JSON values, got {type(value).__name__}")


def canonical_arguments(
    arguments: str | Mapping[str, Any] | None, schema: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Normalized arguments: defaults filled, numbers unified per schema, nested values too."""
    return _normalize(parse_arguments(arguments), schema)


def canonical_key(
    name: str,
    arguments: str | Mapping[str, Any] | None,
    schema: Mapping[str, Any] | None = None,
    key_function: KeyFunction | None = None,
) -> str:
    """The cache key of a call: ``name`` + canonical JSON of its normalized arguments.

    ``schema`` is the tool's JSON schema for its parameters (an ``object`` schema).
    ``key_function`` replaces the argument part (it receives the normalized arguments).
    """
    args = canonical_arguments(arguments, schema)
    part = _normalize(key_function(args), None) if key_function is not None else args
    text = json.dumps(part, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return f"{name}{_SEP}{text}"
