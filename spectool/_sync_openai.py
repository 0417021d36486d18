"""The ``openai.OpenAI`` (sync) wrapper: the async wrapper on a blocking portal.

There is one implementation of the wrapper: :class:`SpeculativeOpenAI` runs on the event loop
of a :class:`SyncSpeculator` (a background thread), over a small async façade of the sync
client whose calls run in worker threads. Every public call blocks the calling thread until
the loop has the answer; streams are handed over chunk by chunk.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Self, cast

import anyio.to_thread

from ._cache import ToolCache
from ._estimates import shared_estimator
from ._loop import AgentResult, run_agent
from ._openai import SpeculativeOpenAI, SpeculativeStream
from ._options import check_client, check_options
from ._speculator import Speculator
from ._sync import SyncSpeculator
from ._tools import Toolbox
from ._types import Drafter
from .errors import ConfigError

if TYPE_CHECKING:  # the SDK's types, for type checkers only
    from openai.resources.chat import Chat
    from openai.resources.responses import Responses

__all__ = ["SyncSpeculativeOpenAI", "SyncSpeculativeStream", "speculative_sync"]

_END = object()


class _ThreadedStream:
    """An SDK sync stream as an async iterator: each chunk is pulled in a worker thread."""

    def __init__(self, stream: Any) -> None:
        self._stream, self._it = stream, iter(stream)

    def __aiter__(self) -> _ThreadedStream:
        return self

    async def __anext__(self) -> Any:
        item = await anyio.to_thread.run_sync(next, self._it, _END)
        if item is _END:
            raise StopAsyncIteration
        return item

    async def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            await anyio.to_thread.run_sync(close)


class _Create:
    """``resource.create`` of a sync SDK resource, awaitable (the call runs in a thread)."""

    def __init__(self, resource: Any) -> None:
        self._resource = resource

    def __getattr__(self, name: str) -> Any:
        return getattr(self._resource, name)

    async def create(self, **kwargs: Any) -> Any:
        result = await anyio.to_thread.run_sync(functools.partial(self._resource.create, **kwargs))
        return _ThreadedStream(result) if kwargs.get("stream") else result


class _AsyncFacade:
    """Enough of ``AsyncOpenAI`` for the wrapper, over an ``OpenAI`` client."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.chat = type("_Chat", (), {})()
        self.chat.completions = _Create(client.chat.completions)
        self.responses = _Create(client.responses)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def with_options(self, **options: Any) -> _AsyncFacade:
        return _AsyncFacade(self._client.with_options(**options))


class SyncSpeculativeStream:
    """A speculative stream for sync code: iterate it for the SDK's chunks / events."""

    def __init__(self, owner: SyncSpeculativeOpenAI, stream: SpeculativeStream) -> None:
        self._owner, self.stream = owner, stream
        self._it = stream.__aiter__()

    def __iter__(self) -> Iterator[Any]:
        while True:
            item = self._owner._session._call(_anext_or_end, self._it)
            if item is _END:
                return
            yield item

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._owner._session._call(self.stream.close)

    def final_message(self) -> Any:
        return self.stream.final_message()


async def _anext_or_end(it: Any) -> Any:
    try:
        return await it.__anext__()
    except StopAsyncIteration:
        return _END


class _SyncResource:
    def __init__(self, owner: SyncSpeculativeOpenAI, path: tuple[str, ...]) -> None:
        self._owner, self._path = owner, path

    def _on(self, client: Any) -> Any:  # this resource of ``client``: client.chat.completions …
        return functools.reduce(getattr, self._path, client)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._on(self._owner.client), name)

    def create(self, **kwargs: Any) -> Any:
        create = self._on(self._owner.async_client).create
        result = self._owner._session._call(functools.partial(create, **kwargs))
        return SyncSpeculativeStream(self._owner, result) if isinstance(result, SpeculativeStream) else result


class _SyncChat:
    def __init__(self, owner: SyncSpeculativeOpenAI) -> None:
        self._owner = owner
        self.completions = _SyncResource(owner, ("chat", "completions"))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._owner.client.chat, name)


class SyncSpeculativeOpenAI:
    """An ``openai.OpenAI`` client that speculates tool calls. Use ``with`` (one session).

    ``chat.completions.create`` / ``responses.create`` / ``run_tool_calls`` / ``run_agent``
    are the async wrapper's, blocking. For a type checker ``chat`` and ``responses`` are the
    SDK's sync resources. ``mode="engine"`` is not offered here (use the async client).
    """

    def __init__(
        self,
        client: Any,
        tools: Toolbox | Iterable[Any],
        drafter: Drafter | str | None = None,
        **options: Any,
    ) -> None:
        if options.pop("mode", "client") != "client":
            raise ConfigError(
                "the sync wrapper speculates on the client only; use the async client for mode='engine'"
            )
        # hooks= and on_tool_error= are the async wrapper's (it checks them); the rest the session's
        wrapper = {k: options.pop(k) for k in ("hooks", "on_tool_error") if k in options}
        check_options(options, "spectool.speculative_sync()", SyncSpeculator, Speculator, ToolCache)
        check_client(client, asynchronous=False, where="spectool.speculative_sync()")
        self.client = client
        # samples="auto": the estimates live with the wrapped client, across its sessions
        options["samples"] = shared_estimator(client, drafter, options.get("samples", 3), options)
        self._session = SyncSpeculator(tools, drafter, **options)
        self.async_client = SpeculativeOpenAI(
            _AsyncFacade(client),
            self._session.speculator.toolbox,
            speculator=self._session.speculator,
            **wrapper,
        )
        self.chat = cast("Chat", _SyncChat(self))
        self.responses = cast("Responses", _SyncResource(self, ("responses",)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def __enter__(self) -> Self:
        self._session.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self._session.close()

    def stats(self) -> dict[str, Any]:
        return self._session.stats()

    def run_tool_calls(self, response: Any) -> list[dict[str, Any]]:
        """The tool results to send back (see :meth:`SpeculativeOpenAI.run_tool_calls`)."""
        if isinstance(response, SyncSpeculativeStream):
            response = response.stream
        return self._session._call(self.async_client.run_tool_calls, response)

    def run_agent(self, **kwargs: Any) -> AgentResult:
        """:func:`spectool.run_agent` on this client, blocking."""
        return self._session._call(functools.partial(run_agent, self.async_client, **kwargs))


def speculative_sync(
    client: Any, tools: Toolbox | Iterable[Any], drafter: Drafter | str | None = None, **options: Any
) -> SyncSpeculativeOpenAI:
    """Wrap an ``openai.OpenAI`` client: ``with speculative_sync(client, tools, drafter) as c:``."""
    return SyncSpeculativeOpenAI(client, tools, drafter, **options)
