"""Canonical keys for tool calls: the one key function the client cache and the engine's tool
output store (``spectool_serving``, its vLLM plugin) share. Both call :func:`canonical_key` on
the wire arguments and the tool's JSON schema, so a client hit and a server hit are the same
event by construction.

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

The normalization is a subset of what a validator (pydantic's lax mode, which every ``@tool``
uses) does to JSON input, never more: equal keys mean the tool sees equal validated arguments.
A coercion the validator may refuse is not made (an integral float becomes an ``integer`` only
inside the int64 range pydantic accepts, so ``[1e20]`` never shares ``[10**20]``'s key), and
one it makes beyond JSON types (``"5"`` or ``true`` for an ``integer``) is not made either:
those calls get distinct keys, a lost hit at worst, never a wrong one.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["KeyFunction", "canonical_arguments", "canonical_key", "parse_arguments"]

#: A per-tool custom key: receives the normalized arguments, returns any JSON-able value.
KeyFunction = Callable[[Mapping[str, Any]], Any]

_INT64 = 2.0**63
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


def _types_of(schema: Mapping[str, Any]) -> list[str]:
    t = schema.get("type")
    if isinstance(t, str):
        return [t]
    if isinstance(t, list):
        return [x for x in t if isinstance(x, str)]
    return []


#: Python type -> JSON type, bool before int (a bool is an int)
_JSON_TYPES: tuple[tuple[type, str], ...] = ((bool, "boolean"), (int, "integer"), (float, "number"))
_JSON_TYPES += ((str, "string"), (type(None), "null"), (Mapping, "object"), (list, "array"))


def json_type(value: Any) -> str:
    for kind, name in _JSON_TYPES:
        if isinstance(value, kind):
            return name
    # Not JSON (a tuple, a set, an object): a repr could collide with a string; refuse.
    raise ValueError(f"arguments must be JSON values, got {type(value).__name__}")


_NO = object()  # "this type cannot take the value", distinct from a coerced None
_INT_TEXT = re.compile(r"-?[0-9]{1,4000}(\.0{1,300})?")  # pydantic's int takes "1.0" (as 1)
_FLOAT_TEXT = re.compile(r"-?[0-9]{1,300}(\.[0-9]{1,300})?([eE][+-]?[0-9]{1,3})?")
# pydantic's float takes these (any case): the tool gets the float, so the key must too
_NON_FINITE = {
    **dict.fromkeys(("inf", "+inf", "infinity", "+infinity"), math.inf),
    **dict.fromkeys(("-inf", "-infinity"), -math.inf),
    **dict.fromkeys(("nan", "+nan", "-nan"), math.nan),
}
_TRUE, _FALSE = {"1", "on", "t", "true", "y", "yes"}, {"0", "off", "f", "false", "n", "no"}


def _coerce(value: Any, target: str) -> Any:
    """``value`` as the scalar JSON ``target`` type the way pydantic's lax mode converts it,
    or _NO. Only conversions pydantic certainly makes (and agrees on the result of)."""
    kind = json_type(value)
    if kind == target or target in ("array", "object"):
        return value if kind == target else _NO
    if target == "integer":
        if kind == "boolean":
            return int(value)
        if kind == "number" and math.isfinite(value) and value.is_integer() and abs(value) < _INT64:
            return int(value)  # pydantic refuses integral floats outside int64 (1e20 for int)
        if kind == "string" and _INT_TEXT.fullmatch(value):
            return int(value.partition(".")[0])
    elif target == "number":
        if kind in ("integer", "boolean"):
            try:
                return float(value)
            except OverflowError:  # pydantic refuses an int beyond float range too
                return _NO
        if kind == "string" and _FLOAT_TEXT.fullmatch(value):
            return float(value)  # "1e400" is inf to pydantic too
        if kind == "string" and value.lower() in _NON_FINITE:
            return _NON_FINITE[value.lower()]
    elif target == "boolean":
        if kind in ("integer", "number") and value in (0, 1):
            return bool(value)
        if kind == "string" and value.lower() in _TRUE | _FALSE:
            return value.lower() in _TRUE
    return _NO


def _resolve(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    """Follow a local ``$ref`` (pydantic puts nested models under ``$defs``) and a lone
    ``allOf`` wrapper; anything else is taken as it stands."""
    for _ in range(64):  # a cycle of refs is not followed forever
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/"):
            node: Any = root
            for part in ref[2:].split("/"):
                node = node.get(part) if isinstance(node, Mapping) else None
            if not isinstance(node, Mapping):
                return {}
            schema = node
            continue
        all_of = schema.get("allOf")
        if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], Mapping):
            schema = {**{k: v for k, v in schema.items() if k != "allOf"}, **all_of[0]}
            continue
        return schema
    return {}


def _options(schema: Mapping[str, Any], root: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The single-type alternatives a value may take, in order: the branches of an
    anyOf/oneOf, each type of a ``type`` list (empty: the schema does not say)."""
    branches = [b for kw in ("anyOf", "oneOf") for b in (schema.get(kw) or ()) if isinstance(b, Mapping)]
    if branches:
        return [o for b in branches for o in _options(_resolve(b, root), root)]
    return [{**schema, "type": t} for t in _types_of(schema)]


def _normalize(value: Any, schema: Mapping[str, Any] | None, root: Mapping[str, Any]) -> Any:
    """``value`` as a validator would hand it to the tool, as far as the schema tells.

    Like pydantic's smart unions, a branch of the value's own JSON type wins; otherwise the
    first branch that converts it (``true`` for ``int | float`` is ``1``). A value no branch
    takes is invalid: it stays as it is, so its key cannot equal a valid call's (in that
    slot every valid value has one of the schema's types, this one has none of them).
    """
    options = _options(_resolve(schema, root), root) if schema is not None else []
    kind = json_type(value)
    chosen, coerced = None, value
    for option in options:
        if option["type"] == kind:
            chosen = option
            break
    else:
        for option in options:
            coerced = _coerce(value, option["type"])
            if coerced is not _NO:
                chosen = option
                break
        else:
            coerced = value
    if kind == "number" and chosen is None and not math.isfinite(value):
        return value  # dumped as NaN/Infinity: never equal to the strings "nan"/"inf"
    if isinstance(coerced, Mapping):
        return _normalize_object(coerced, chosen, root)
    if isinstance(coerced, list):
        items = (chosen or {}).get("items")
        sub = items if isinstance(items, Mapping) else None
        return [_normalize(v, sub, root) for v in coerced]
    return coerced


def _normalize_object(
    value: Mapping[str, Any], schema: Mapping[str, Any] | None, root: Mapping[str, Any]
) -> dict[str, Any]:
    props = (schema or {}).get("properties") or {}
    extra = (schema or {}).get("additionalProperties")
    out: dict[str, Any] = {}
    for k, v in value.items():
        if not isinstance(k, str):  # str(k) would collide {1: x} with {"1": x}
            raise ValueError(f"object keys must be strings, got {type(k).__name__} {k!r}")
        sub = props.get(k, extra if isinstance(extra, Mapping) else None)
        out[k] = _normalize(v, sub, root)
    for k, sub in props.items():
        if k not in out and isinstance(sub, Mapping) and "default" in sub:
            # As it stands: pydantic hands a default to the tool unvalidated (``x: float = 1``
            # gives 1, an explicit 1 gives 1.0).
            out[k] = _normalize(sub["default"], None, root)
    return out


def canonical_arguments(
    arguments: str | Mapping[str, Any] | None, schema: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Normalized arguments: defaults filled, numbers unified per schema, nested values too."""
    return _normalize(parse_arguments(arguments), schema, schema or {})


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
    part = _normalize(key_function(args), None, {}) if key_function is not None else args
    text = json.dumps(part, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return f"{name}{_SEP}{text}"
