"""Every option is checked where it is given: ranges, types and typos (with "did you mean"),
at the call that takes it, not at the first request or never; one INFO line per session
naming the tools that will not run early and why; a drafter failure is one WARNING line."""

from __future__ import annotations

import logging

import anyio
import pytest

import spectool
from spectool import ConfigError, Speculator, ToolDefinitionError
from spectool.testing import KeyValueWorld, ScriptedDrafter, ScriptedModel, openai_client


def read(key: str) -> str:
    """Read a key."""
    return key


@pytest.mark.parametrize("options", [{"ttl": -5}, {"capacity": 0}, {"max_concurrency": -1}, {"ttl": "soon"}])
def test_session_options_out_of_range_are_refused(options) -> None:
    name = next(iter(options))
    with pytest.raises(ConfigError, match=name):
        Speculator(KeyValueWorld().toolbox, **options)
    with pytest.raises(ConfigError, match=name):
        spectool.speculative(openai_client(ScriptedModel([])), KeyValueWorld().toolbox, **options)


def test_good_session_options_pass() -> None:  # control
    Speculator(KeyValueWorld().toolbox, ttl=0, capacity=1, max_concurrency=1)
    Speculator(KeyValueWorld().toolbox, ttl=None)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"effect": "read_only", "ttl": -1}, "ttl"),
        ({"effect": "read_only", "scope": 3}, "scope"),
        ({"effect": "read_only", "scope": ""}, "scope"),
        ({"effect": "read_only", "max_concurrency": 0}, "max_concurrency"),
    ],
)
def test_tool_options_out_of_range_are_refused(options, says) -> None:
    with pytest.raises(ToolDefinitionError, match=says):
        spectool.tool(**options)(read)
    with pytest.raises(ToolDefinitionError, match=says):
        spectool.ToolSpec(name="read", description="", parameters={}, **options)


def test_typos_get_did_you_mean() -> None:
    with pytest.raises(ConfigError, match="did you mean 'samples'"):
        Speculator(KeyValueWorld().toolbox, sampels=3)
    with pytest.raises(ConfigError, match="did you mean 'draft_timeout'"):
        spectool.speculative(openai_client(ScriptedModel([])), KeyValueWorld().toolbox, draft_timout=1)
    with pytest.raises(ToolDefinitionError, match="did you mean 'read_only'"):
        spectool.tool(effect="read-only")(read)
    with pytest.raises(ToolDefinitionError, match="did you mean 'effect'"):
        spectool.tool(efect="pure")(read)
    with pytest.raises(ConfigError, match="did you mean 'history'"):
        Speculator(KeyValueWorld().toolbox, "histroy")
    with pytest.raises(ConfigError) as caught:  # control: nothing close, no guess
        Speculator(KeyValueWorld().toolbox, zzzzzz=3)
    assert "did you mean" not in str(caught.value)


def test_a_function_where_a_list_of_tools_goes_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"a list of tools.*\[read\]"):
        spectool.speculative(openai_client(ScriptedModel([])), read)
    with pytest.raises(ConfigError, match=r"a list of tools"):
        Speculator("read")
    Speculator([read])  # control


@pytest.mark.anyio
async def test_one_info_line_per_session_names_the_tools_that_never_run_early(caplog) -> None:
    @spectool.tool(effect="read_only")
    async def get(key: str) -> str:
        """Get."""
        return key

    @spectool.tool(effect="mutating")
    async def put(key: str) -> str:
        """Put."""
        return key

    @spectool.tool(effect="read_only", gated=True)
    async def peek(key: str) -> str:
        """Peek."""
        return key

    async def plain(key: str) -> str:
        """Not declared."""
        return key

    caplog.set_level(logging.INFO, logger="spectool")
    async with Speculator([get, put, peek, plain], ScriptedDrafter(lambda m: [])) as spec:
        for _ in range(3):
            await spec.start_turn([{"role": "user", "content": "?"}]).wait()
    lines = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.INFO and "never run early" in r.getMessage()
    ]
    assert len(lines) == 1, lines
    [line] = lines
    named = {part.split(" (")[0]: part for part in line.split("session: ", 1)[1].split("; ")}
    assert list(named) == ["put", "peek", "plain"]  # get may run early: not listed
    assert named["put"] == "put (mutating)" and named["peek"] == "peek (gated)"
    assert named["plain"].startswith("plain (not declared")


@pytest.mark.anyio
async def test_a_drafter_failure_warning_is_one_line_with_the_traceback_at_debug(caplog) -> None:
    def broken(messages):
        raise RuntimeError("drafter down")

    caplog.set_level(logging.DEBUG, logger="spectool")
    async with Speculator(KeyValueWorld().toolbox, ScriptedDrafter(broken), samples=1) as spec:
        await spec.start_turn([{"role": "user", "content": "?"}]).wait()
        await anyio.sleep(0)
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "drafter down" in warning.getMessage() and "\n" not in warning.getMessage()
    assert warning.exc_info is None
    assert any(r.levelno == logging.DEBUG and r.exc_info for r in caplog.records)
