"""How LangChain tools declare their effect through spectool (default: mutating)."""

from __future__ import annotations

import pytest
from langchain.tools import ToolRuntime
from langchain_core.tools import BaseTool, StructuredTool, tool

import spectool
from langchain_spectool import effect_of, speculable
from langchain_spectool._effects import to_tool_spec
from spectool import Effect, ToolDefinitionError


@tool
def plain(x: int) -> int:
    """Undeclared."""
    return x


class Lookup(BaseTool):
    name: str = "lookup"
    description: str = "A BaseTool subclass."

    def _run(self, q: str) -> str:
        return q


def test_default_is_mutating_for_every_kind_of_tool():
    fn_tool = StructuredTool.from_function(lambda q: q, name="f", description="d")
    for t in (plain, Lookup(), fn_tool):
        assert effect_of(t) is Effect.MUTATING
        assert not to_tool_spec(t).speculable


def test_speculable_declares_on_tool_decorator_and_subclass():
    @speculable(effect="pure", ttl=5)
    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    lookup = speculable(Lookup(), effect="read_only", scope="db")
    assert effect_of(add) is Effect.PURE and to_tool_spec(add).ttl == 5
    spec = to_tool_spec(lookup)
    assert spec.effect is Effect.READ_ONLY and spec.scope == "db"
    assert spec.parameters["properties"] == {"q": {"type": "string"}}
    assert add.metadata["spectool"]["effect"] == "pure"  # plain JSON: safe in traces


def test_spectool_decorated_functions_keep_their_effect_in_create_agent():
    @spectool.tool(effect="read_only", scope="wx", ttl=5, max_concurrency=2)
    def weather(city: str) -> str:
        """Weather."""
        return city

    # create_agent turns plain functions into StructuredTools the same way tool() does.
    assert effect_of(tool(weather)) is Effect.READ_ONLY
    spec = to_tool_spec(tool(weather))
    assert (spec.scope, spec.ttl, spec.max_concurrency) == ("wx", 5, 2)


def test_tools_with_injected_arguments_are_never_speculable():
    @tool
    def whoami(x: int, runtime: ToolRuntime) -> str:
        """Depends on graph state."""
        return str(x)

    speculable(whoami, effect="pure")
    assert effect_of(whoami) is Effect.MUTATING
    assert not to_tool_spec(whoami).speculable


def test_bad_declarations_are_clear_errors():
    with pytest.raises(ToolDefinitionError, match="effect must be one of"):
        speculable(plain, effect="sometimes")
    with pytest.raises(ToolDefinitionError, match="BaseTool"):
        speculable(lambda x: x, effect="pure")
    with pytest.raises(ToolDefinitionError, match="ttl"):
        speculable(plain, effect="pure", ttl=0)


def test_every_basetool_field_is_copied_or_deliberately_not_by_the_stand_ins():
    """One helper decides what a stand-in copies; a field LangChain adds must be classified."""
    from langchain_core.tools import BaseTool
    from langchain_core.tools import tool as lc_tool

    from langchain_spectool._fields import FACE, RUNNING, stand_in_fields

    assert sorted(FACE + RUNNING) == sorted(BaseTool.model_fields)
    assert not set(FACE) & set(RUNNING)

    @lc_tool(response_format="content_and_artifact")
    def lookup(q: str) -> tuple[str, dict]:
        """Look up q."""
        return q, {}

    lookup.handle_tool_error = True
    lookup.tags = ["t"]
    full = stand_in_fields(lookup, runs_as_the_tool=True)
    face = stand_in_fields(lookup, runs_as_the_tool=False)
    assert full["handle_tool_error"] is True and "handle_tool_error" not in face
    assert face["response_format"] == "content_and_artifact" and face["tags"] == ["t"]
