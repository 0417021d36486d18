"""Client and server keys agree, and both agree with what the tool is handed (issue 26, class 1).

Three relations over a random ``@tool`` signature and a random pair of wire arguments must be
one relation: the client cache's key equality (``ToolSpec.key``), the engine store's hit
(``ToolOutputStore.post`` then ``take``, keyed from the request's JSON schema only), and the
tool receiving equal validated arguments (same types, same reprs: ``1`` is not ``1.0``).
Runs in the CI hypothesis profile (tests/conftest.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import spectool
from spectool import ToolArgumentsError
from spectool.keys import canonical_key

pytest.importorskip("fastapi")  # the store validates posted items with the server's models
from spectool_serving.store import ToolOutputStore  # noqa: E402

_UNIONS = ["int | float", "float | int", "int | str", "str | int", "bool | int", "int | bool", "str | bool"]
_annotations = st.recursive(
    st.sampled_from(["int", "float", "str", "bool", *_UNIONS]),
    lambda inner: st.one_of(
        inner.map(lambda t: f"list[{t}]"),
        inner.map(lambda t: f"{t} | None"),
        inner.map(lambda t: f"dict[str, {t}]"),
    ),
    max_leaves=3,
)
_scalars = st.one_of(
    st.integers(-3, 3),
    st.sampled_from([10**20, 2**63, -(2**63), 2**63 - 1]),
    st.sampled_from([0.0, 1.0, -0.0, 5.5, 1e20, 9.2e18, 2.0**63, -(2.0**63)]),
    st.booleans(),
    st.sampled_from(["5", "05", "-1", "1.5", "1e3", "yes", "TRUE", "off", "abc", "", "0", "1"]),
    st.none(),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=2), st.dictionaries(st.sampled_from("kq"), inner, max_size=2)
    ),
    max_leaves=4,
)


def _respell(value: Any) -> Any:
    """Another wire spelling of (often) the same value, so equal pairs are frequent."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return float(value) if abs(value) < 2**60 else str(value)
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) < 2**70 else str(value)
    if isinstance(value, list):
        return [_respell(v) for v in value]
    if isinstance(value, dict):
        return {k: _respell(v) for k, v in reversed(value.items())}
    return value


def _tool(annotation: str):
    ns: dict[str, Any] = {}
    exec(f"def probe(x: {annotation}, y: int = 7, z: {annotation} | None = None):\n    pass", {}, ns)  # noqa: S102
    ns["probe"].__doc__ = "A probe."
    return spectool.tool_spec(spectool.tool(effect="pure")(ns["probe"]))


def _same(a: Any, b: Any) -> bool:
    """What the tool sees is equal: same types all the way down, same reprs at the leaves."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return repr(a) == repr(b)


def _relations(spec, a: dict, b: dict, client_key=None) -> tuple[bool, bool, bool] | None:
    """(client keys equal, server hit, tool sees equal), or None when ``a`` is invalid
    (the client runs nothing, so nothing is ever posted for it)."""
    client_key = client_key or spec.key
    try:
        ka, va = client_key(a), spec.validate(a)
    except ToolArgumentsError:
        return None
    try:
        kb, vb = client_key(b), spec.validate(b)
    except ToolArgumentsError:
        kb, vb = None, None
    store = ToolOutputStore()
    store.open("r1", "tenant", [spec.openai_chat()])
    store.post("r1", "tenant", [{"name": spec.name, "params": a, "output": "A", "effect": "pure"}])
    hit = store.take("r1", "tenant", spec.name, json.dumps(b)) is not None
    seen_equal = vb is not None and _same(va, vb)
    return ka == kb, hit, seen_equal


@given(_annotations, _values, _values, st.booleans(), st.booleans())
def test_client_key_server_key_and_validated_arguments_agree(annotation, x, other, respell, second):
    spec = _tool(annotation)
    a = {"x": x, **({"z": x} if second else {})}
    y = _respell(x) if respell else other
    b = {"x": y, **({"z": y} if second else {})}
    rel = _relations(spec, a, b)
    if rel is not None:
        client, server, seen = rel
        assert client == server == seen, (annotation, a, b, rel)


@pytest.mark.parametrize(
    ("annotation", "a", "b", "equal"),
    [
        ("list[int]", [10**20], [1e20], None),  # 1e20 is refused by the tool: never a hit
        ("list[int]", [5], [5.0], True),
        ("float", 1, True, True),  # pydantic hands 1.0 for both
        ("list[int]", [1], [True], True),
        ("int", 1, True, True),
        ("int | float", 5, 5.0, False),
        ("float", 1, "1", True),
        ("int | str", 5, "5", False),
        ("bool", True, 1, True),
        ("bool", True, 2, None),
    ],
)
def test_issue_cases(annotation, a, b, equal) -> None:
    spec = _tool(annotation)
    rel = _relations(spec, {"x": a}, {"x": b})
    assert rel is not None
    client, server, seen = rel
    assert client == server == seen == bool(equal)


def test_negative_control_a_schema_blind_key_is_caught() -> None:
    """The relation check catches a key that disagrees: keying without the schema (the old
    client path for tools without a validator) splits 5 and 5.0 for a ``float``."""
    spec = _tool("float")
    rel = _relations(spec, {"x": 5}, {"x": 5.0}, client_key=lambda args: canonical_key("probe", args))
    assert rel is not None
    client, server, seen = rel
    assert server and seen and not client
