"""The @tool decorator, effects, validation and the registry."""

import inspect

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spectool import (
    Effect,
    ToolArgumentsError,
    Toolbox,
    ToolDefinitionError,
    ToolNotFoundError,
    ToolSpec,
    tool,
    tool_spec,
)

names = st.from_regex(r"[a-z][a-z0-9_]{0,15}", fullmatch=True)


@given(names, st.sampled_from(["pure", "read_only", "mutating"]), st.booleans())
def test_decorator_with_options_returns_the_original_callable(name, effect, is_async) -> None:
    if is_async:

        async def fn(x: int) -> int:
            return x
    else:

        def fn(x: int) -> int:
            return x

    decorated = tool(name=name, effect=effect)(fn)
    assert decorated is fn
    assert inspect.iscoroutinefunction(decorated) == is_async
    spec = tool_spec(fn)
    assert (spec.name, spec.effect) == (name, Effect(effect))
    assert spec.speculable == (effect != "mutating")


def test_bare_decorator_is_mutating_and_unchanged() -> None:
    def lookup(key: str) -> str:
        """Find a key.

        Longer text that is not the description."""
        return key

    assert tool(lookup) is lookup
    spec = tool_spec(lookup)
    assert spec.effect is Effect.MUTATING and not spec.speculable
    assert spec.description == "Find a key."
    assert spec.parameters["properties"]["key"]["type"] == "string"
    assert spec.parameters["required"] == ["key"]
    assert lookup("k") == "k"  # still callable as before


@pytest.mark.anyio
async def test_sync_and_async_tools_run_and_validate() -> None:
    @tool(effect="pure")
    def double(x: int, factor: int = 2) -> int:
        return x * factor

    @tool(effect="read_only")
    async def greet(name: str) -> str:
        await anyio.sleep(0)
        return f"hi {name}"

    assert await tool_spec(double).invoke('{"x": 4}') == 8
    assert await tool_spec(double).invoke({"x": "5", "factor": 3}) == 15  # pydantic coercion
    assert await tool_spec(greet).invoke({"name": "ada"}) == "hi ada"


@given(
    st.one_of(
        st.text(min_size=1, max_size=5).filter(lambda s: not s.strip("-").isdigit()),
        st.lists(st.integers(), max_size=2),
    )
)
def test_validation_error_names_tool_and_field(bad) -> None:
    @tool(effect="pure")
    def area(width: int, height: int) -> int:
        return width * height

    with pytest.raises(ToolArgumentsError) as info:
        tool_spec(area).validate({"width": 2, "height": bad})
    assert info.value.tool == "area" and info.value.field == "height"
    assert "area" in str(info.value) and "height" in str(info.value)


def test_missing_and_extra_arguments_are_refused() -> None:
    @tool
    def f(a: int) -> int:
        return a

    with pytest.raises(ToolArgumentsError) as info:
        tool_spec(f).validate({})
    assert info.value.field == "a"
    with pytest.raises(ToolArgumentsError) as info:
        tool_spec(f).validate({"a": 1, "zzz": 2})
    assert info.value.field == "zzz"
    with pytest.raises(ToolArgumentsError):
        tool_spec(f).validate("{oops")


def test_bad_definitions_raise_definition_errors() -> None:
    with pytest.raises(ToolDefinitionError):
        tool(effect="sometimes")(lambda: None)
    with pytest.raises(ToolDefinitionError):
        tool(colour="red")  # type: ignore[call-overload]

    def star(*args: int) -> None: ...

    with pytest.raises(ToolDefinitionError):
        tool(star)


def test_toolbox_emits_both_openai_shapes_and_finds_tools() -> None:
    @tool(effect="read_only", scope="fs")
    def ls(path: str = ".") -> list[str]:
        """List a folder."""
        return []

    box = Toolbox([ls])
    (chat,) = box.openai_tools("chat")
    assert chat["type"] == "function" and chat["function"]["name"] == "ls"
    assert chat["function"]["parameters"]["properties"]["path"]["default"] == "."
    (resp,) = box.openai_tools("responses")
    assert resp["name"] == "ls" and resp["parameters"] == chat["function"]["parameters"]
    assert box.key("ls", {}) == box.key("ls", '{"path": "."}')  # default filled
    with pytest.raises(ToolNotFoundError, match="known: ls"):
        box.get("rm")
    with pytest.raises(ValueError):
        box.openai_tools("completions")


def test_two_tools_with_one_name_are_refused() -> None:
    a = ToolSpec.from_schema({"name": "x", "parameters": {"type": "object"}})
    b = ToolSpec.from_schema({"name": "x", "parameters": {"type": "object"}})
    with pytest.raises(ToolDefinitionError):
        Toolbox([a, b])
