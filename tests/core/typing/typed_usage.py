"""Typed usage of the wrapper: mypy must see the SDK's types through ``speculative(...)``.

Checked by tests/core/test_typing.py (mypy reveals the types below); never executed.
"""

from __future__ import annotations

from openai import AsyncOpenAI

import spectool


@spectool.tool(effect="read_only")
def lookup(city: str) -> str:
    """Population of a city."""
    return city


async def main() -> None:
    async with spectool.speculative(AsyncOpenAI(api_key="x"), [lookup]) as client:
        completion = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
        reveal_type(completion)  # noqa: F821
        reveal_type(completion.choices[0].message.tool_calls)  # noqa: F821
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        async for chunk in stream:
            reveal_type(chunk)  # noqa: F821
        response = await client.responses.create(model="m", input="hi")
        reveal_type(response)  # noqa: F821
        messages = await client.run_tool_calls(completion)
        reveal_type(messages)  # noqa: F821


def sync_main() -> None:
    from openai import OpenAI

    with spectool.speculative_sync(OpenAI(api_key="x"), [lookup]) as client:
        completion = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        reveal_type(completion)  # noqa: F821
        for chunk in client.chat.completions.create(model="m", messages=[], stream=True):
            reveal_type(chunk)  # noqa: F821
