"""The AsyncOpenAI wrapper: speculation starts when a request is sent.

``SpeculativeOpenAI`` delegates to a real ``AsyncOpenAI`` client (openai 1.x, 2.x or 3.x; it
never imports openai and never monkeypatches). ``chat.completions.create`` and
``responses.create`` (streamed or not) start λ drafts before the request goes out; the model's
tool calls are then resolved through the session cache with :meth:`run_tool_calls`.

Hooks see every request: ``before_request`` may edit it, ``wrap_request`` runs around the
underlying call, ``after_response`` sees (and may replace) the result. ``mode="engine"`` adds
an :class:`EngineSink` that learns the response id from the stream and receives each finished
speculative output (Algorithm 4); see ``spectool._engine_client``.
"""

from __future__ import annotations

import inspect
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

import anyio.lowlevel

from ._auto import AutoSamples
from ._cache import ToolCache
from ._eager import EagerBatch, StreamWatcher, eager_policy
from ._estimates import shared_estimator
from ._options import check_client, check_options
from ._outcome import CacheCounters, Outcome
from ._speculator import Speculator
from ._tools import Toolbox
from ._types import Drafter, ToolCall
from ._wire import (
    ChatAccumulator,
    as_dict,
    engine_resolved,
    extract_calls,
    format_output,
    responses_input_to_messages,
)
from .errors import ConfigError

if TYPE_CHECKING:  # the SDK's own types, for type checkers only: openai is never imported here
    from openai.resources.chat import AsyncChat
    from openai.resources.responses import AsyncResponses

__all__ = [
    "EngineSink",
    "ModelRequest",
    "RequestHook",
    "SpeculativeOpenAI",
    "SpeculativeStream",
    "speculative",
]


@dataclass
class ModelRequest:
    """One request on its way to the model: ``api`` is "chat" or "responses"."""

    api: Literal["chat", "responses"]
    kwargs: dict[str, Any]
    messages: list[dict[str, Any]] = field(default_factory=list)  # chat view, for drafters


class RequestHook:
    """Subclass and override what you need; every method is optional."""

    async def before_request(self, request: ModelRequest) -> None:
        """Runs before drafting starts; may edit ``request.kwargs``."""

    async def wrap_request(
        self, request: ModelRequest, call_next: Callable[[ModelRequest], Awaitable[Any]]
    ) -> Any:
        """Runs around the underlying SDK call; must return ``await call_next(request)``'s value."""
        return await call_next(request)

    async def after_response(self, request: ModelRequest, response: Any) -> Any:
        """Sees the SDK's result (a stream is wrapped); returns it, or a replacement."""
        return response


class EngineSink(Protocol):
    """The engine half of ``mode="engine"`` (Algorithm 4), implemented in ``_engine_client``.

    ``prepare`` may edit the request (e.g. force streaming); ``on_response_id`` is called with
    the id of each model response as soon as the stream reveals it; ``on_tool_output`` gets
    every finished speculative run (post it to ``/cache-tool-output/{response_id}``).
    """

    def prepare(self, request: ModelRequest) -> None: ...

    def on_response_id(self, response_id: str) -> None: ...

    async def on_tool_output(self, call: ToolCall, key: str, outcome: Outcome) -> None: ...

    async def aclose(self) -> None: ...


def _engine_sink(client: Any, options: dict[str, Any]) -> EngineSink:
    try:
        from . import _engine_client
    except ImportError as exc:
        raise ConfigError("mode='engine' needs spectool._engine_client, which is missing") from exc
    return _engine_client.create_sink(client, **options)


class SpeculativeStream:
    """An SDK stream passed through chunk by chunk, watched for the response id and the
    final message (``final_message()`` once iterated; ``run_tool_calls`` drains it)."""

    def __init__(
        self,
        stream: Any,
        api: str,
        on_id: Callable[[str], None] | None,
        request: ModelRequest | None = None,
        eager: EagerBatch | None = None,
    ) -> None:
        self._stream, self.api, self._on_id, self.request = stream, api, on_id, request
        self.response_id: str | None = None
        self.response: Any = None  # responses API: the completed Response
        self._chat = ChatAccumulator()
        self._done = False
        #: the calls started while streaming (eager dispatch), or None
        self.eager = eager
        self._watch = StreamWatcher(eager) if eager is not None else None

    def _see(self, event: Any) -> None:
        if self.api == "chat":
            self._chat.add(event)
            rid = self._chat.id
            if self._watch is not None:
                self._watch.see_chat(self._chat.calls, event)
        else:
            if self._watch is not None:
                self._watch.see_responses(event)
            response = getattr(event, "response", None)
            if response is None and isinstance(event, dict):
                response = event.get("response")
            rid = getattr(response, "id", None) if response is not None else None
            if getattr(event, "type", None) == "response.completed":
                self.response = response
        if rid and self.response_id is None:
            self.response_id = rid
            if self._on_id is not None:
                self._on_id(rid)

    async def __aiter__(self):
        async for event in self._stream:
            self._see(event)
            yield event
        self._done = True
        if self._watch is not None:  # arguments are final only now (eager="all" writes)
            self._watch.end(self._chat.calls if self.api == "chat" else None)

    async def __aenter__(self) -> SpeculativeStream:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            result = close()
            if inspect.isawaitable(result):
                await result

    async def drain(self) -> None:
        if not self._done:
            async for _ in self:
                pass

    def final_message(self) -> Any:
        """The assistant message (chat, a dict) or the completed Response (responses)."""
        return self._chat.message() if self.api == "chat" else self.response


# Only ``create`` speculates; everything else on these resources (``parse``, ``stream``,
# ``with_raw_response`` …) is the SDK's own, reached by delegation.


class _Completions:
    def __init__(self, owner: SpeculativeOpenAI) -> None:
        self._owner = owner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._owner.client.chat.completions, name)

    async def create(self, **kwargs: Any) -> Any:
        return await self._owner._send("chat", kwargs)


class _Chat:
    def __init__(self, owner: SpeculativeOpenAI) -> None:
        self._owner = owner
        self.completions = _Completions(owner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._owner.client.chat, name)


class _Responses:
    def __init__(self, owner: SpeculativeOpenAI) -> None:
        self._owner = owner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._owner.client.responses, name)

    async def create(self, **kwargs: Any) -> Any:
        return await self._owner._send("responses", kwargs)


class SpeculativeOpenAI:
    """An ``AsyncOpenAI`` client that speculates tool calls. Use ``async with`` (one session).

    Other attributes (``models``, ``embeddings`` …) delegate to the wrapped client. For a type
    checker ``chat`` and ``responses`` are the SDK's own resources, so ``create`` keeps its
    overloads (``ChatCompletion``; a stream of ``ChatCompletionChunk`` with ``stream=True``,
    which at run time is a :class:`SpeculativeStream` iterating the same chunks).
    """

    chat: AsyncChat
    responses: AsyncResponses

    def __init__(
        self,
        client: Any,
        tools: Toolbox | Iterable[Any],
        drafter: Drafter | str | None = None,
        *,
        samples: int | Literal["auto"] | AutoSamples = 3,
        draft_timeout: float = 5.0,
        mode: Literal["client", "engine"] = "client",
        sink: EngineSink | None = None,
        hooks: Sequence[RequestHook] = (),
        on_tool_error: Literal["message", "raise"] = "message",
        eager: Literal["speculable", "all"] | bool = "speculable",
        speculator: Speculator | None = None,
        **options: Any,
    ) -> None:
        engine_options = options.pop("engine_options", {})
        check_options(options, "spectool.speculative()", Speculator, ToolCache)
        if mode not in ("client", "engine"):
            raise ConfigError(f"mode must be 'client' or 'engine', got {mode!r}")
        if on_tool_error not in ("message", "raise"):
            raise ConfigError(f"on_tool_error must be 'message' or 'raise', got {on_tool_error!r}")
        self.client, self.mode, self.hooks = client, mode, list(hooks)
        self.on_tool_error = on_tool_error
        self.eager = eager_policy(eager)
        check_client(client, asynchronous=True, where="spectool.speculative()")
        self.sink = sink if sink is not None or mode == "client" else _engine_sink(client, engine_options)
        self.speculator = speculator or Speculator(
            tools,
            drafter,
            samples=shared_estimator(client, drafter, samples, options),  # "auto" learns per client
            draft_timeout=draft_timeout,
            on_complete=self.sink.on_tool_output if self.sink is not None else None,
            **options,
        )
        bind = getattr(self.sink, "bind", None)
        if bind is not None:  # the sink posts only what this session's cache still holds valid
            bind(self.speculator.cache)
        self.toolbox = self.speculator.toolbox
        self.chat = cast("AsyncChat", _Chat(self))
        self.responses = cast("AsyncResponses", _Responses(self))
        self._history: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
        self._eager: list[EagerBatch] = []  # streamed responses whose calls may have started

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    async def __aenter__(self) -> SpeculativeOpenAI:
        await self.speculator.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        try:
            return await self.speculator.__aexit__(*exc)
        finally:
            if self.sink is not None:
                await self.sink.aclose()

    def with_options(self, **options: Any) -> SpeculativeOpenAI:
        """A view with the SDK's per-request options, sharing this session's cache."""
        twin = object.__new__(SpeculativeOpenAI)
        twin.__dict__.update(self.__dict__)
        twin.client = self.client.with_options(**options)
        twin.chat, twin.responses = cast("AsyncChat", _Chat(twin)), cast("AsyncResponses", _Responses(twin))
        return twin

    @property
    def counters(self) -> CacheCounters:
        return self.speculator.counters

    def stats(self) -> dict[str, Any]:
        return self.speculator.stats()

    # -- sending ----------------------------------------------------------------------------

    async def _send(self, api: Literal["chat", "responses"], kwargs: dict[str, Any]) -> Any:
        if not self.speculator.cache.is_open:
            raise ConfigError("open the session first: `async with spectool.speculative(...) as client:`")
        request = ModelRequest(api, dict(kwargs))
        if len(self.toolbox) and "tools" not in request.kwargs:  # an empty list is a 400 upstream
            request.kwargs["tools"] = self.toolbox.openai_tools(api)
        for hook in self.hooks:
            await hook.before_request(request)
        if self.sink is not None:
            self.sink.prepare(request)
        request.messages = self._chat_view(request)
        offered = request.kwargs.get("tools")  # may be the SDK's NOT_GIVEN sentinel
        self.speculator.start_turn(request.messages, offered if isinstance(offered, list) else None)
        # Let the draft task send its request first: an SDK call that completes without
        # suspending (in-process, cached) would otherwise finish before drafting even began.
        await anyio.lowlevel.checkpoint()
        result = await self._call_chain(0, request)
        if request.kwargs.get("stream"):
            batch = None
            if self.eager != "off":
                batch = EagerBatch(self.speculator, self.eager)
                self._eager.append(batch)  # in place: with_options() views share the list
                del self._eager[:-8]
            result = SpeculativeStream(result, api, self._on_response_id, request, batch)
        else:
            rid = getattr(result, "id", None)
            if isinstance(rid, str):
                self._on_response_id(rid)
            if api == "responses":
                self._remember(result, request)
        for hook in reversed(self.hooks):
            result = await hook.after_response(request, result)
        return result

    async def _call_chain(self, i: int, request: ModelRequest) -> Any:
        if i == len(self.hooks):
            target = self.client.chat.completions if request.api == "chat" else self.client.responses
            return await target.create(**request.kwargs)
        return await self.hooks[i].wrap_request(request, lambda r: self._call_chain(i + 1, r))

    def _on_response_id(self, rid: str) -> None:
        if self.sink is not None:
            self.sink.on_response_id(rid)

    def _chat_view(self, request: ModelRequest) -> list[dict[str, Any]]:
        kw = request.kwargs
        if request.api == "chat":
            return [as_dict(m) for m in kw.get("messages", ())]
        prior = self._history.get(kw.get("previous_response_id") or "", [])
        return [*prior, *responses_input_to_messages(kw.get("input"), kw.get("instructions"))]

    def _remember(self, response: Any, request: ModelRequest) -> None:
        """Keep the chat view of a Responses conversation so ``previous_response_id`` drafts."""
        rid = getattr(response, "id", None)
        if not isinstance(rid, str):
            return
        output = [as_dict(o) for o in (getattr(response, "output", None) or ())]
        self._history[rid] = [*request.messages, *responses_input_to_messages(output)]
        while len(self._history) > 64:
            self._history.popitem(last=False)

    # -- resolving --------------------------------------------------------------------------

    async def run_tool_calls(self, response: Any) -> list[dict[str, Any]]:
        """Run (or collect) the tool calls of a response; returns what to send back:
        ``{"role": "tool", ...}`` messages for chat, ``function_call_output`` items for
        responses. A stream is drained first. Parallel calls resolve concurrently."""
        if isinstance(response, SpeculativeStream):
            await response.drain()
            if response.api == "responses":
                self._remember_stream(response)
        api, parsed = extract_calls(response)
        batch = self._eager_batch(response, parsed)
        if batch is not None:  # some calls started while the response streamed
            aligned = await batch.resolve_all(parsed)
        else:
            outcomes = iter(await self.speculator.resolve_all([p for p in parsed if isinstance(p, ToolCall)]))
            aligned = [next(outcomes) if isinstance(p, ToolCall) else Outcome(error=p[2]) for p in parsed]
        return [
            self._tool_result(api, p.id if isinstance(p, ToolCall) else p[0], o)
            for p, o in zip(parsed, aligned)
        ]

    def _eager_batch(self, response: Any, calls: list[Any]) -> EagerBatch | None:
        """The eager batch of the streamed response these calls came from, if any started."""
        if isinstance(response, SpeculativeStream):  # its own batch, even if a call changed late
            batch = response.eager
            return batch if batch is not None and not batch.finished and batch.started else None
        for batch in reversed(self._eager):  # the caller passed the final message or output
            if batch.matches(calls):
                return batch
        return None

    def engine_resolved(self, response: Any) -> list[dict[str, Any]]:
        """Messages for the calls a spectool engine resolved inside ``response`` (engine mode;
        empty otherwise): an assistant message with the call, then its tool message, each in
        order, to insert before the response's final message. Their cache entries count as
        used. A stream must be drained first."""
        messages: list[dict[str, Any]] = []
        for rec in engine_resolved(response):
            tc = rec.get("tool_call") or {}
            fn = tc.get("function") or {}
            _, parsed = extract_calls([tc])
            if parsed and isinstance(parsed[0], ToolCall):
                self.speculator.cache.consume(parsed[0])
            function = {"name": fn.get("name"), "arguments": fn.get("arguments") or ""}
            call = {"id": tc.get("id"), "type": "function", "function": function}
            messages.append({"role": "assistant", "content": rec.get("content"), "tool_calls": [call]})
            output = format_output(rec.get("output"))
            messages.append({"role": "tool", "tool_call_id": tc.get("id"), "content": output})
        return messages

    def _remember_stream(self, stream: SpeculativeStream) -> None:
        if stream.response is not None:
            self._remember(stream.response, stream.request or ModelRequest("responses", {}))

    def _tool_result(self, api: str, call_id: str | None, outcome: Outcome) -> dict[str, Any]:
        if outcome.error is not None:
            if self.on_tool_error == "raise":
                raise outcome.error
            text = f"Error: {type(outcome.error).__name__}: {outcome.error}"
        else:
            text = format_output(outcome.value)
        if api == "chat":
            return {"role": "tool", "tool_call_id": call_id, "content": text}
        return {"type": "function_call_output", "call_id": call_id, "output": text}


def speculative(
    client: Any, tools: Toolbox | Iterable[Any], drafter: Drafter | str | None = None, **options: Any
) -> SpeculativeOpenAI:
    """Wrap an ``AsyncOpenAI`` client: ``async with speculative(client, tools, drafter) as c:``."""
    return SpeculativeOpenAI(client, tools, drafter, **options)
