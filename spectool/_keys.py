"""Canonical keys for tool calls: the one key function both cache sides share.

Standard library only, so the serving engine (and a vLLM plugin) can import it alone.

Two calls get the same key exactly when a tool would see the same arguments: object key order
and JSON whitespace do not matter; where the JSON schema says ``number`` an integer and a float
of equal value are one value (``integer``: an integral float is the integer); defaults from
the schema are filled in; nested objects and arrays are normalized with their sub-schemas.
Without a schema, values are compared as JSON (``1`` and ``1.0`` stay distinct, since a tool
may treat them differently).
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Mapping

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


def _branch_for(value: Any, schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """For anyOf/oneOf, the first branch whose type admits the value (else the schema itself)."""
    for keyword in ("anyOf", "oneOf"):
        for branch in schema.get(keyword, ()) or ():
            if isinstance(branch, Mapping) and _admits(branch, value):
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
    if isinstance(value, (list, tuple)):
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
            return repr(value)  # NaN/inf are not JSON; keep them distinct and stable
        if "number" in types:
            return float(value)
        if "integer" in types and isinstance(value, float) and value.is_integer():
            return int(value)
        return value
    if isinstance(value, Mapping):
        props = (schema or {}).get("properties") or {}
        extra = (schema or {}).get("additionalProperties")
        out: dict[str, Any] = {}
        for k, v in value.items():
            sub = props.get(k, extra if isinstance(extra, Mapping) else None)
            out[str(k)] = _normalize(v, sub)
        for k, sub in props.items():
            if k not in out and isinstance(sub, Mapping) and "default" in sub:
                out[k] = _normalize(sub["default"], sub)
        return out
    if isinstance(value, (list, tuple)):
        items = (schema or {}).get("items")
        sub = items if isinstance(items, Mapping) else None
        return [_normalize(v, sub) for v in value]
    # Anything else is not JSON: fall back to its repr so the key is still stable.
    return repr(value)


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
