"""Canonical keys: properties that must hold for any arguments (hypothesis)."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spectool import canonical_key
from spectool.keys import canonical_arguments, parse_arguments

# Example counts come from the profile in conftest.py ("ci" by default, "long" on request).

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(max_size=8),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=10,
)
objects = st.dictionaries(st.text(max_size=6), json_values, max_size=5)


def _shuffled(value, rnd):
    """The same JSON value with every object's keys in a different order."""
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: _shuffled(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rnd) for v in value]
    return value


@given(objects, st.randoms(use_true_random=False))
def test_key_order_does_not_matter(args, rnd) -> None:
    assert canonical_key("t", args) == canonical_key("t", _shuffled(args, rnd))


@given(objects, st.sampled_from([None, 2, 4]), st.sampled_from([(",", ":"), (", ", ": ")]))
def test_json_whitespace_does_not_matter(args, indent, separators) -> None:
    text = json.dumps(args, indent=indent, separators=separators)
    assert canonical_key("t", text) == canonical_key("t", args)


@given(objects, objects)
def test_different_arguments_give_different_keys(a, b) -> None:
    same_json = json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert (canonical_key("t", a) == canonical_key("t", b)) == same_json


@given(objects)
def test_tool_name_is_part_of_the_key(args) -> None:
    assert canonical_key("a", args) != canonical_key("b", args)


@given(st.integers(-(10**9), 10**9))
def test_number_schema_unifies_int_and_float(n) -> None:
    schema = {"type": "object", "properties": {"x": {"type": "number"}}}
    assert canonical_key("t", {"x": n}, schema) == canonical_key("t", {"x": float(n)}, schema)


@given(st.integers(-(10**9), 10**9))
def test_integer_schema_takes_integral_floats(n) -> None:
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    assert canonical_key("t", {"x": float(n)}, schema) == canonical_key("t", {"x": n}, schema)


def test_without_schema_int_and_float_stay_distinct() -> None:
    assert canonical_key("t", {"x": 1}) != canonical_key("t", {"x": 1.0})


@given(st.text(max_size=8))
def test_defaults_are_filled_from_the_schema(unit) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string", "default": unit}},
    }
    assert canonical_key("w", {"city": "Oslo"}, schema) == canonical_key(
        "w", {"city": "Oslo", "unit": unit}, schema
    )


@given(st.lists(st.integers(-1000, 1000), max_size=5))
def test_nested_structures_follow_sub_schemas(values) -> None:
    schema = {
        "type": "object",
        "properties": {
            "p": {"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "number"}}}}
        },
    }
    as_ints = {"p": {"xs": values}}
    as_floats = {"p": {"xs": [float(v) for v in values]}}
    assert canonical_key("t", as_ints, schema) == canonical_key("t", as_floats, schema)


@given(objects)
def test_custom_key_function_replaces_the_argument_part(args) -> None:
    key = canonical_key("t", args, key_function=lambda a: sorted(a))
    assert key == canonical_key("t", {k: "other" for k in args}, key_function=lambda a: sorted(a))


@given(objects)
def test_canonical_arguments_are_idempotent(args) -> None:
    once = canonical_arguments(args)
    assert canonical_arguments(once) == once


@pytest.mark.parametrize("bad", ["{not json", "[1, 2]", "3", 7])
def test_malformed_arguments_raise_value_error(bad) -> None:
    with pytest.raises(ValueError):
        parse_arguments(bad)


def test_nan_and_infinity_are_stable() -> None:
    assert canonical_key("t", {"x": float("nan")}) == canonical_key("t", {"x": float("nan")})
    assert canonical_key("t", {"x": float("inf")}) != canonical_key("t", {"x": float("-inf")})


# -- unions, and agreement with what pydantic hands the tool -------------------------------------

UNION = {"type": "object", "properties": {"x": {"anyOf": [{"type": "integer"}, {"type": "number"}]}}}


def test_any_of_keeps_each_value_in_its_own_branch() -> None:
    """``int | float``: pydantic passes 5 as int and 5.0 as float; the keys must differ."""
    assert canonical_key("t", {"x": 5}, UNION) != canonical_key("t", {"x": 5.0}, UNION)
    assert canonical_key("t", {"x": 5}, UNION) == canonical_key("t", '{"x": 5}', UNION)
    str_or_int = {"type": "object", "properties": {"x": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}}
    assert canonical_key("t", {"x": "5"}, str_or_int) != canonical_key("t", {"x": 5}, str_or_int)
    # No exact branch: the first branch that admits the value still normalizes it.
    only_int = {"type": "object", "properties": {"x": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}}
    assert canonical_key("t", {"x": 5.0}, only_int) == canonical_key("t", {"x": 5}, only_int)


def test_non_json_values_are_refused_not_keyed_by_repr() -> None:
    for bad in ({"x": (1, 2)}, {"x": {1: "a"}}, {"x": object()}, {"x": {1, 2}}):
        with pytest.raises(ValueError):
            canonical_key("t", bad)
    assert canonical_key("t", {"x": float("nan")}) != canonical_key("t", {"x": "nan"})


@pytest.mark.parametrize(
    "annotation,a,b",
    [
        ("int | float", 5, 5.0),
        ("int | float", 5, 5),
        ("float", 5, 5.0),
        ("int", 5, 5.0),
        ("list[int]", [10**20], [1e20]),
        ("int | str", 5, "5"),
        ("bool", True, 1),
        ("dict[str, float]", {"k": 1}, {"k": 1.0}),
        ("int | None", None, None),
        ("int | None", 0, None),
    ],
)
def test_tool_keys_agree_with_what_pydantic_passes_to_the_tool(annotation, a, b) -> None:
    """Equal keys exactly when the function would receive equal (same-typed) arguments."""
    import spectool
    from spectool import ToolArgumentsError

    seen: list = []
    ns: dict = {}
    exec(f"def probe(x: {annotation}):\n    seen.append(x)", {"seen": seen}, ns)  # noqa: S102
    ns["probe"].__doc__ = "A probe."
    spec = spectool.tool_spec(spectool.tool(effect="pure")(ns["probe"]))

    def received(v):
        try:
            return spec.key({"x": v}), spec.validate({"x": v})["x"]
        except ToolArgumentsError:
            return None, None

    (ka, va), (kb, vb) = received(a), received(b)
    for k, v in ((ka, a), (kb, b)):
        if k is None:  # invalid for the tool: it has no key, so no entry can ever serve it
            with pytest.raises(ToolArgumentsError):
                spec.key({"x": v})
    if ka is None or kb is None:
        return
    assert (ka == kb) == (type(va) is type(vb) and va == vb), (va, vb)
