"""The replay main model: serves BFCL ground-truth trajectories as an OpenAI-compatible endpoint.

For controlled experiments only, and labelled as such in every output (``main_model:
"replay"``). It does not think: it answers each request with the next step of the task's
ground truth (multi-turn tasks: one tool call per step; single-turn tasks: the turn's calls
together, as parallel calls; then a short final message per user turn) after the time a model
with the given token rates would take:

    seconds = overhead + new prompt tokens / prefill rate + (reasoning + output tokens) / decode rate

Streamed, the time is spread as a real model spreads it: the first chunk after the overhead,
prefill and reasoning, then one ~4-character piece of the output per decode step, so a client
sees each call's arguments close before the response ends (eager dispatch has something to do).

"New" prompt tokens are those after the last assistant message (a prefix-caching engine
prefills only those). Tokens are estimated as characters / 4. The position in the trajectory is
the number of assistant messages in the request, so the model is stateless and any agent loop
that appends one assistant message per response can drive it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from spectool import ToolCall
from spectool.errors import ConfigError

from ..bfcl._tasks import Task

__all__ = [
    "ReplayModel",
    "ReplayStep",
    "TokenRates",
    "count_tokens",
    "first_user_text",
    "next_step",
    "next_step_call",
]


@dataclass(frozen=True)
class TokenRates:
    """Generation speed of the simulated main model (defaults: SmolLM2 on 2 CPU cores, fp32)."""

    prefill_tok_s: float = 450.0
    decode_tok_s: float = 15.5
    reasoning_tokens: int = 0
    overhead_s: float = 0.0

    def seconds(self, new_prompt_tokens: int, output_tokens: int) -> float:
        return (
            self.overhead_s
            + new_prompt_tokens / self.prefill_tok_s
            + (self.reasoning_tokens + output_tokens) / self.decode_tok_s
        )


def count_tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4)


def first_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    for m in messages:
        if m.get("role") == "user":
            content = m.get("content")
            return content if isinstance(content, str) else json.dumps(content)
    raise ConfigError("the conversation has no user message")


def _steps(task: Task) -> list[list[ToolCall] | str]:
    out: list[list[ToolCall] | str] = []
    for calls in task.ground_truth:
        if task.multi_turn:
            out.extend([c] for c in calls)
        elif calls:
            out.append(list(calls))  # single-turn: the model emits the turn's calls at once
        out.append("Done: " + ", ".join(c.name for c in calls) + "." if calls else "Nothing to do.")
    return out


def next_step(task: Task, messages: Sequence[Mapping[str, Any]]) -> list[ToolCall] | str:
    """The ground-truth step that follows ``messages``: its calls, or the turn's final text."""
    steps = _steps(task)
    index = sum(1 for m in messages if m.get("role") == "assistant")
    return steps[index] if index < len(steps) else "Done."


def next_step_call(task: Task, messages: Sequence[Mapping[str, Any]]) -> ToolCall | str:
    """The first call of the ground-truth step that follows ``messages``, or its final text."""
    step = next_step(task, messages)
    return step[0] if isinstance(step, list) else step


@dataclass(frozen=True)
class ReplayStep:
    message: dict[str, Any]  # the assistant message (Chat Completions shape)
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    task_id: str
    first_token_s: float = 0.0  # overhead + prefill + reasoning: when streaming starts


class ReplayModel:
    """Ground-truth trajectories of ``tasks`` with generation time from ``rates``."""

    label = "replay"

    def __init__(self, tasks: Sequence[Task], rates: TokenRates | None = None) -> None:
        self.rates = rates or TokenRates()
        self._tasks: dict[str, Task] = {}
        for t in tasks:
            self._tasks.setdefault(first_user_text(t.turns[0]), t)

    def task_for(self, messages: Sequence[Mapping[str, Any]]) -> Task:
        try:
            return self._tasks[first_user_text(messages)]
        except KeyError:
            raise ConfigError("the replay model does not know this conversation's task") from None

    def step(self, messages: Sequence[Mapping[str, Any]]) -> ReplayStep:
        task = self.task_for(messages)
        nxt = next_step(task, messages)
        last_assistant = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
        new = sum(count_tokens(json.dumps(m, default=str)) for m in messages[last_assistant + 1 :])
        if isinstance(nxt, list):
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{uuid.uuid4().hex[:12]}",
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments_json},
                    }
                    for c in nxt
                ],
            }
            out_tokens = sum(count_tokens(c.name + c.arguments_json) + 6 for c in nxt)  # + call markup
        else:
            message = {"role": "assistant", "content": nxt}
            out_tokens = count_tokens(nxt)
        total_prompt = sum(count_tokens(json.dumps(m, default=str)) for m in messages)
        seconds = self.rates.seconds(new, out_tokens)
        return ReplayStep(
            message,
            total_prompt,
            out_tokens,
            seconds,
            task.id,
            first_token_s=seconds - out_tokens / self.rates.decode_tok_s,
        )

    # --- the OpenAI-compatible endpoint (in-process HTTP transport) ---------------------------

    def http_client(self, httpx_module: Any = None) -> Any:
        """An ``AsyncClient`` whose requests this model answers (for ``AsyncOpenAI(http_client=…)``).

        ``httpx_module`` is ``httpx2`` (openai ≥ 3) or ``httpx``; by default whichever the
        installed openai uses.
        """
        if httpx_module is None:
            try:
                import httpx2 as httpx_module
            except ImportError:
                import httpx as httpx_module
        mod = httpx_module

        async def handler(request: Any) -> Any:
            if request.method != "POST" or not request.url.path.endswith("/chat/completions"):
                return mod.Response(
                    404, json={"error": {"message": f"replay model: no route {request.url.path}"}}
                )
            body = json.loads(request.content or b"{}")
            return await self._answer(mod, body)

        return mod.AsyncClient(transport=mod.MockTransport(handler), base_url="http://replay.local/v1")

    async def _answer(self, mod: Any, body: Mapping[str, Any]) -> Any:
        try:
            step = self.step(body.get("messages") or [])
        except ConfigError as exc:
            return mod.Response(400, json={"error": {"message": str(exc)}})
        rid = f"chatcmpl-replay-{uuid.uuid4().hex[:16]}"
        usage = {
            "prompt_tokens": step.prompt_tokens,
            "completion_tokens": step.completion_tokens,
            "total_tokens": step.prompt_tokens + step.completion_tokens,
        }
        finish = "tool_calls" if step.message.get("tool_calls") else "stop"
        base = {"id": rid, "created": int(time.time()), "model": body.get("model", "replay")}
        if not body.get("stream"):
            await anyio.sleep(step.seconds)
            return mod.Response(
                200,
                json={
                    **base,
                    "object": "chat.completion",
                    "usage": usage,
                    "choices": [{"index": 0, "message": step.message, "finish_reason": finish}],
                },
            )
        return mod.Response(
            200,
            content=self._stream(step, base, finish, usage, body),
            headers={"content-type": "text/event-stream"},
        )

    async def _stream(
        self,
        step: ReplayStep,
        base: dict[str, Any],
        finish: str,
        usage: dict[str, Any],
        body: Mapping[str, Any],
    ) -> AsyncIterator[bytes]:
        """SSE chunks paced like decoding: pieces of the output at the decode rate."""

        def sse(delta: dict[str, Any] | None, finish_reason: str | None = None, **extra: Any) -> bytes:
            choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
            body = {**base, "object": "chat.completion.chunk", "choices": choices, **extra}
            return f"data: {json.dumps(body)}\n\n".encode()

        tick = 1.0 / self.rates.decode_tok_s
        pieces: list[dict[str, Any]] = []
        text = step.message.get("content")
        for i, tc in enumerate(step.message.get("tool_calls") or []):
            fn = tc["function"]
            head = count_tokens(fn["name"]) + 6  # name and call markup: one chunk, its tokens' time
            pieces.append(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": tc["id"],
                            "type": "function",
                            "function": {"name": fn["name"], "arguments": ""},
                        }
                    ],
                    "_n": head,
                }
            )
            args = fn["arguments"]
            pieces.extend(
                {"tool_calls": [{"index": i, "function": {"arguments": args[k : k + 4]}}], "_n": 1}
                for k in range(0, len(args), 4)
            )
        if text:
            pieces.extend({"content": text[k : k + 4], "_n": 1} for k in range(0, len(text), 4))
        await anyio.sleep(max(0.0, step.first_token_s))
        yield sse({"role": "assistant", "content": None if step.message.get("tool_calls") else ""})
        # Sleep per batch of pieces, not per piece: fewer timer wake-ups, same pace.
        owed = 0.0
        for piece in pieces:
            owed += piece.pop("_n") * tick
            if owed >= 0.02:
                await anyio.sleep(owed)
                owed = 0.0
            yield sse(piece)
        if owed:
            await anyio.sleep(owed)
        yield sse({}, finish)
        if (body.get("stream_options") or {}).get("include_usage"):
            yield sse(None, usage=usage)
        yield b"data: [DONE]\n\n"
