"""The agent loop: Algorithm 2 repeated until the model answers without tool calls.

Each turn sends the conversation (speculation starts as it is sent), appends the model's
message, resolves its tool calls through the session cache and appends their results. The
transcript is plain JSON-able dicts, identical with and without speculation.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ._openai import SpeculativeOpenAI, SpeculativeStream
from ._wire import as_dict
from .errors import ConfigError

__all__ = ["AgentResult", "run_agent"]


@dataclass
class AgentResult:
    """What an agent run produced. ``transcript`` is chat messages (``api="chat"``) or
    Responses input items (``api="responses"``), including the initial ones."""

    transcript: list[dict[str, Any]]
    final_text: str | None
    turns: int
    stop_reason: Literal["answer", "max_turns"]
    seconds: float
    stats: dict[str, Any] = field(default_factory=dict)

    def transcript_json(self) -> str:
        """The transcript as canonical JSON (for byte-for-byte comparisons)."""
        return json.dumps(self.transcript, sort_keys=True, ensure_ascii=False)


def _assistant(message: Any) -> dict[str, Any]:
    """A chat assistant message in one normal form, whether it came streamed or not."""
    m = as_dict(message)
    out: dict[str, Any] = {"role": "assistant", "content": m.get("content")}
    calls = m.get("tool_calls") or []
    if calls:
        out["tool_calls"] = [
            {
                "id": c.get("id"),
                "type": "function",
                "function": {
                    "name": c["function"]["name"],
                    "arguments": c["function"].get("arguments") or "",
                },
            }
            for c in calls
        ]
    return out


def _output_text(items: Sequence[dict[str, Any]]) -> str | None:
    texts = [
        part.get("text", "")
        for it in items
        if it.get("type") == "message"
        for part in it.get("content") or ()
        if part.get("type") == "output_text"
    ]
    return "".join(texts) if texts else None


def _output_item(item: Any) -> dict[str, Any]:
    d = as_dict(item)
    if d.get("type") == "function_call":  # keep what the API needs back, in one normal form
        return {k: d[k] for k in ("type", "id", "call_id", "name", "arguments") if k in d}
    return d


async def run_agent(
    client: SpeculativeOpenAI,
    *,
    model: str,
    messages: Sequence[Any] | str,
    api: Literal["chat", "responses"] = "chat",
    max_turns: int = 10,
    stream: bool = False,
    **create_options: Any,
) -> AgentResult:
    """Run the agent to its final answer (at most ``max_turns`` model calls).

    ``messages`` is the chat history (or, for ``api="responses"``, the ``input``: a string or
    items). The client must be open (``async with``).
    """
    if max_turns < 1:
        raise ConfigError("max_turns must be >= 1")
    if api not in ("chat", "responses"):
        raise ConfigError(f"api must be 'chat' or 'responses', got {api!r}")
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    transcript = [as_dict(m) for m in messages]
    start = time.perf_counter()
    step = _chat_turn if api == "chat" else _responses_turn
    # one set of create() arguments for every turn: the transcript list grows in place
    kwargs: dict[str, Any] = {"model": model, "messages" if api == "chat" else "input": transcript}
    kwargs.update(create_options, **({"stream": True} if stream else {}))
    turns = 0
    while turns < max_turns:
        done, text, used = await step(client, transcript, kwargs, max_turns - turns)
        turns += used
        if done:
            return AgentResult(transcript, text, turns, "answer", time.perf_counter() - start, client.stats())
    return AgentResult(transcript, None, turns, "max_turns", time.perf_counter() - start, client.stats())


async def _chat_turn(
    client: SpeculativeOpenAI, transcript: list[dict[str, Any]], kwargs: dict[str, Any], budget: int
) -> tuple[bool, str | None, int]:
    """One model call; returns (answered, final text, turns used). Each call an engine
    answered in place (O3) is a turn, as the same call made by the client would be: a response
    holding more than ``budget`` turns is cut where the client's own loop would have stopped."""
    # The transcript is plain dicts and the options the caller's: the SDK's overloads cannot
    # tell which one applies, so the call goes through as Any (the result is checked below).
    create: Any = client.chat.completions.create
    response = await create(**kwargs)
    if isinstance(response, SpeculativeStream):
        await response.drain()
        message = _assistant(response.final_message())
    else:
        message = _assistant(response.choices[0].message)
    resolved = client.engine_resolved(response)  # pairs: the assistant's call, then its result
    hops = len(resolved) // 2
    if hops >= budget:
        transcript.extend(resolved[: 2 * budget])
        return False, None, budget
    transcript.extend(resolved)
    transcript.append(message)
    if not message.get("tool_calls"):
        return True, message.get("content"), hops + 1
    transcript.extend(await client.run_tool_calls(message))
    return False, None, hops + 1


async def _responses_turn(
    client: SpeculativeOpenAI, transcript: list[dict[str, Any]], kwargs: dict[str, Any], budget: int
) -> tuple[bool, str | None, int]:
    create: Any = client.responses.create
    response = await create(**kwargs)
    if isinstance(response, SpeculativeStream):
        await response.drain()
        response = response.final_message()
    output = [_output_item(o) for o in (getattr(response, "output", None) or ())]
    transcript.extend(output)
    if not any(o.get("type") == "function_call" for o in output):
        return True, _output_text(output), 1
    transcript.extend(await client.run_tool_calls(output))
    return False, None, 1
