"""Shared by the core tests: tools over a key-value store with each of the three effects."""

from __future__ import annotations

from typing import Any

import anyio

import spectool


def kv_tools(store: dict[str, str]) -> list[Any]:
    """``get`` (read-only) and ``put`` (mutating) over ``store``, both in scope ``kv``, and a
    pure ``upper``; the store's tools yield once each, so runs interleave."""

    @spectool.tool(effect="read_only", scope="kv")
    async def get(key: str) -> str:
        """Read a key."""
        await anyio.lowlevel.checkpoint()
        return store.get(key, "")

    @spectool.tool(scope="kv")
    async def put(key: str, value: str) -> str:
        """Write a key."""
        await anyio.lowlevel.checkpoint()
        store[key] = value
        return "ok"

    @spectool.tool(effect="pure")
    async def upper(text: str) -> str:
        """Upper-case a text."""
        return text.upper()

    return [get, put, upper]


async def until(condition: Any, *, timeout: float = 30.0, what: str = "") -> None:
    """Wait until ``condition()`` holds: returns as soon as it does, fails after ``timeout`` s.

    Tests order on this instead of a short sleep that "lets something finish": on a loaded
    machine any step can be delayed by a second or more, and a fixed sleep then runs out first.
    The generous deadline is reached only when the behaviour under test is broken."""
    with anyio.move_on_after(timeout):
        while not condition():
            await anyio.sleep(0.002)
    assert condition(), f"not within {timeout} s: {what or condition}"
