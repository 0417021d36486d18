"""EndpointDrafter: draft tool calls with any OpenAI-compatible Chat Completions endpoint.

λ samples come from one request with ``n=λ`` (vLLM, OpenAI) or from λ parallel requests
(servers that ignore ``n``). Calls are read from the standard ``tool_calls`` of each choice and,
failing that, from the message text (xLAM's JSON array, hermes tags) — vLLM without a tool
parser returns xLAM's calls as text. Responses are read as plain dicts (``model_dump``), so no
version-specific openai types are touched: openai 1.x, 2.x and 3.x all work.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import anyio

from .._types import DraftRequest, ToolCall
from ..errors import ConfigError, DrafterError
from ..toolcall_text import salvage_tool_calls
from ._common import assistant_calls, message_text, tool_schemas, with_known_tools

__all__ = ["EndpointDrafter"]


class EndpointDrafter:
    """Drafts with ``client.chat.completions.create`` of an ``AsyncOpenAI`` client.

    Pass ``client`` or ``base_url`` (+ ``api_key``). ``sampling="n"`` asks for λ choices in one
    request; ``"parallel"`` sends λ requests with ``n=1`` at once. ``timeout`` bounds the whole
    proposal (seconds). ``temperature``/``max_tokens``/``tool_choice`` are sent only when set;
    ``extra_body`` goes through to the server (e.g. vLLM sampling options).
    """

    def __init__(
        self,
        client: Any = None,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        sampling: Literal["n", "parallel"] = "n",
        timeout: float | None = 10.0,
        temperature: float | None = 0.7,
        max_tokens: int | None = 256,
        tool_choice: Any = None,
        extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        if sampling not in ("n", "parallel"):
            raise ConfigError(f"sampling must be 'n' or 'parallel', got {sampling!r}")
        if client is None and base_url is None:
            raise ConfigError("EndpointDrafter needs an AsyncOpenAI client or a base_url")
        if timeout is not None and timeout <= 0:
            raise ConfigError(f"timeout must be positive, got {timeout}")
        self._client = client
        self._owns_client = client is None  # a client we made is ours to close
        self._base_url = base_url
        self._api_key = api_key
        self.model = model
        self.sampling = sampling
        self.timeout = timeout
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.tool_choice = tool_choice
        self.extra_body = dict(extra_body or {})

    @property
    def client(self) -> Any:
        if self._client is None:
            from openai import AsyncOpenAI

            # no retries: a draft is best effort, and a retry backing off outlasts the turn it was for
            self._client = AsyncOpenAI(
                base_url=self._base_url, api_key=self._api_key or "EMPTY", max_retries=0
            )
        return self._client

    async def aclose(self) -> None:
        """Close the client this drafter created from ``base_url`` (a passed client is the caller's)."""
        if self._owns_client and self._client is not None:
            client, self._client = self._client, None
            await client.close()

    async def __aenter__(self) -> EndpointDrafter:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def propose(self, request: DraftRequest) -> list[ToolCall]:
        tools = tool_schemas(request.tools)
        if not tools:
            return []
        n = max(1, int(request.samples))
        try:
            with anyio.fail_after(self.timeout):
                if self.sampling == "n":
                    responses = [await self._create(request, n)]
                else:
                    responses = await self._parallel(request, n)
        except TimeoutError as exc:
            raise DrafterError(f"endpoint drafter timed out after {self.timeout}s") from exc
        calls: list[ToolCall] = []
        for response in responses:
            calls.extend(_calls_of(response))
        return with_known_tools(calls, tools)

    async def _parallel(self, request: DraftRequest, n: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []

        async def one() -> None:
            out.append(await self._create(request, 1))

        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(one)
        return out

    async def _create(self, request: DraftRequest, n: int) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": list(request.messages),
            "tools": list(request.tools),
        }
        if n > 1:
            kwargs["n"] = n
        for name in ("temperature", "max_tokens", "tool_choice"):
            value = getattr(self, name)
            if value is not None:
                kwargs[name] = value
        if self.extra_body:
            kwargs["extra_body"] = self.extra_body
        if self.timeout is not None:
            kwargs["timeout"] = self.timeout
        try:
            response = await self.client.chat.completions.create(**kwargs)
        except Exception as exc:  # openai.APIError, httpx/httpx2 transport errors, bad clients
            raise DrafterError(f"endpoint drafter request failed: {type(exc).__name__}: {exc}") from exc
        return _as_dict(response)


def _as_dict(response: Any) -> dict[str, Any]:
    if isinstance(response, Mapping):
        return dict(response)
    dump = getattr(response, "model_dump", None)
    if callable(dump):
        return dump()
    raise DrafterError(f"endpoint returned {type(response).__name__}, not a chat completion")


def _calls_of(response: Mapping[str, Any]) -> list[ToolCall]:
    """Calls in every choice: structured ``tool_calls`` first, else parsed from the text."""
    calls: list[ToolCall] = []
    choices = response.get("choices")
    if not isinstance(choices, list):
        raise DrafterError("endpoint response has no choices")
    for choice in choices:
        message = choice.get("message") if isinstance(choice, Mapping) else None
        if not isinstance(message, Mapping):
            continue
        structured = assistant_calls(message)
        calls.extend(structured or salvage_tool_calls(message_text(message.get("content"))))
    return calls
