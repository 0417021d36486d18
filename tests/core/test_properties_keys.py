"""Property: two calls share a cache key exactly when the tool would receive equal validated
arguments (issue 18, failure 2).

Random parameter types (numbers, strings, booleans, unions, optionals, lists, string-keyed
objects, free-form values) give random JSON schemas through pydantic; random argument pairs are
near-misses of each other (5 vs 5.0, 10**20 vs 1e20, NaN vs "nan", True vs 1). For each pair:
equal keys ⇔ equal validated arguments (same types, same values), and a speculated call served
for another hands the tool arguments equal to the ones it would have validated itself.
"""

from __future__ import annotations

import math
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given
from hypothesis import strategies as st

import spectool
from spectool import ToolArgumentsError, ToolCache, ToolCall

LEAVES = [int, float, str, bool, Any, int | float, int | str, float | str]

types = st.recursive(
    st.sampled_from(LEAVES),
    lambda inner: st.one_of(
        inner.map(lambda t: list[t]), inner.map(lambda t: dict[str, t]), inner.map(lambda t: t | None)
    ),
    max_leaves=3,
)

scalars = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, 1, 5, 10**20, -3]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([5.0, 1e20, 0.0, -0.0, 1.5]),
    st.booleans(),
    st.none(),
    st.text(max_size=4),
    st.sampled_from(["nan", "5", "5.0", "inf", "true"]),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)


def values_for(annotation: Any) -> st.SearchStrategy:
    """JSON values aimed at ``annotation`` (mostly valid), mixed with arbitrary JSON."""
    origin = getattr(annotation, "__origin__", None)
    args = getattr(annotation, "__args__", ())
    if origin is list:
        aimed: st.SearchStrategy = st.lists(values_for(args[0]), max_size=3)
    elif origin is dict:
        aimed = st.dictionaries(st.text(max_size=3), values_for(args[1]), max_size=3)
    elif args:  # a union (Optional included)
        aimed = st.one_of(*[values_for(a) for a in args])
    elif annotation is type(None):
        aimed = st.none()
    else:
        aimed = {
            int: st.one_of(st.integers(-(2**70), 2**70), st.sampled_from([5, 10**20])),
            float: st.one_of(st.floats(), st.sampled_from([5.0, 1e20])),
            str: st.one_of(st.text(max_size=4), st.sampled_from(["nan", "5"])),
            bool: st.booleans(),
        }.get(annotation, json_values)
    return st.one_of(aimed, aimed, aimed, json_values)


@st.composite
def near(draw: Any, value: Any) -> Any:
    """A value a model might produce for the same intent: numbers retyped, or something else."""
    if isinstance(value, bool):
        return draw(st.sampled_from([value, int(value), str(value).lower()]))
    if isinstance(value, int):
        options = [value, str(value)]
        if abs(value) < 2**1000:
            options.append(float(value))
        return draw(st.sampled_from(options))
    if isinstance(value, float):
        options = [value, repr(value).lower()]
        if math.isfinite(value) and value.is_integer():
            options.append(int(value))
        return draw(st.sampled_from(options))
    if isinstance(value, list):
        return [draw(near(v)) for v in value]
    if isinstance(value, dict):
        return {k: draw(near(v)) for k, v in value.items()}
    return draw(st.sampled_from([value, None])) if value is not None else value


def make_tool(annotation: Any, seen: list) -> Any:
    def probe(x):  # the annotation is set below
        seen.append(x)
        return "ok"

    probe.__annotations__ = {"x": annotation}
    probe.__doc__ = "A probe."
    return spectool.tool(effect="pure")(probe)


def same(a: Any, b: Any) -> bool:
    """Equal types and values all the way down (NaN equals NaN: the same argument)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


def outcome(spec: Any, args: dict) -> tuple[str | None, Any]:
    try:
        validated = spec.validate(args)
    except ToolArgumentsError:
        return None, None
    return spec.key(args), validated["x"]


@given(st.data())
def test_equal_keys_iff_equal_validated_arguments(data) -> None:
    annotation = data.draw(types, label="type")
    spec = spectool.tool_spec(make_tool(annotation, []))
    a = data.draw(values_for(annotation), label="a")
    b = data.draw(near(a), label="b")
    key_a, val_a = outcome(spec, {"x": a})
    key_b, val_b = outcome(spec, {"x": b})
    if key_a is None or key_b is None:
        return  # an invalid call has no key: it can never be served from the cache
    assert (key_a == key_b) == same(val_a, val_b), (annotation, a, b, val_a, val_b)


@given(st.data())
def test_a_served_speculation_gave_the_tool_what_it_would_have_received(data) -> None:
    annotation = data.draw(types, label="type")
    seen: list = []
    tool = make_tool(annotation, seen)
    spec = spectool.tool_spec(tool)
    drafted = data.draw(values_for(annotation), label="drafted")
    called = data.draw(near(drafted), label="called")

    async def go() -> tuple[bool, Any]:
        async with ToolCache([tool]) as cache:
            cache.speculate(ToolCall("probe", {"x": drafted}))
            await anyio.lowlevel.checkpoint()
            result = await cache.resolve(ToolCall("probe", {"x": called}))
            return cache.counters.hits + cache.counters.joins == 1, result

    hit, result = anyio.run(go)
    if hit:
        assert result.ok and len(seen) == 1
        assert same(seen[0], spec.validate({"x": called})["x"]), (annotation, drafted, called, seen)


@pytest.mark.parametrize(
    ("annotation", "text", "twin"),
    [
        (int | float, "0.0", 0),  # pydantic's int takes "0.0" first: the tool gets int 0, not 0.0
        (int | float, "-2.000", -2),
        (int, "7.0", 7),
    ],
)
def test_integral_decimal_text_keys_like_the_int_pydantic_makes_of_it(annotation, text, twin) -> None:
    """Found by the property above: "0.0" was keyed as the float 0.0 while the tool received the
    int 0, so a call with 0.0 would have been served the output of a call with 0."""
    spec = spectool.tool_spec(make_tool(annotation, []))
    key, value = outcome(spec, {"x": text})
    assert same(value, twin)
    assert key == spec.key({"x": twin})
    assert key != spec.key({"x": float(twin)}) or annotation is int  # int coerces 7.0 to 7 too


@pytest.mark.parametrize(("text", "twin"), [("inf", math.inf), ("-Infinity", -math.inf), ("NaN", math.nan)])
def test_non_finite_text_keys_like_the_float_pydantic_makes_of_it(text, twin) -> None:
    """Also found by the property: pydantic hands the tool float("inf") for "inf", so the key
    must equal the one of the float (a miss either way would only be slower, but the property
    is "equal keys iff equal arguments"); under ``float | str`` the string stays a string."""
    spec = spectool.tool_spec(make_tool(float, []))
    key, value = outcome(spec, {"x": text})
    assert same(value, twin) and key == spec.key({"x": twin})
    either = spectool.tool_spec(make_tool(float | str, []))
    assert same(outcome(either, {"x": text})[1], text) and either.key({"x": text}) != either.key({"x": twin})
