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
