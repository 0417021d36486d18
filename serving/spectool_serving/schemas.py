"""Request bodies as pydantic models: one place that says what the server accepts.

The routes validate with these (so the OpenAPI schema at ``/openapi.json`` documents the same
shapes the server enforces); semantic checks that need the engine (a forced tool that is not
among the tools, the prompt format) stay in :mod:`.requests`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, RootModel

__all__ = [
    "MAX_N",
    "ChatCompletionRequest",
    "ChatMessage",
    "ErrorBody",
    "FunctionSpec",
    "ToolOutputItem",
    "ToolOutputItems",
    "ToolOutputPosted",
    "ToolSpec",
]

MAX_N = 8


class ToolOutputItem(BaseModel):
    """One speculative tool output posted to ``/cache-tool-output/{response_id}``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(min_length=1, description="the tool's name, as in the request's tools")
    params: dict[str, JsonValue] | None = Field(default=None, description="the call's arguments")
    output: JsonValue = Field(description="what the tool returned (strings verbatim, else JSON)")
    keep_alive: float | None = Field(
        default=None, gt=0, strict=True, description="seconds to keep the entry (capped by the server's TTL)"
    )
    effect: Literal["pure", "read_only"] = Field(
        default="read_only",
        description="pure: may be served any number of times; read_only: served at most once, "
        "only inside the response it was posted to, never after that response "
        "emitted a call the engine did not serve",
    )


class ToolOutputItems(RootModel[list[ToolOutputItem]]):
    """The body of ``POST /cache-tool-output/{response_id}``."""


class ToolOutputPosted(BaseModel):
    cached: int = Field(
        description="entries kept (read-only entries posted after the response "
        "emitted an unserved call are not)"
    )


class _ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: int


class ErrorBody(BaseModel):
    error: _ErrorDetail


class _Open(BaseModel):
    """Strictly typed; fields that stock clients add are kept, not refused."""

    model_config = ConfigDict(extra="allow", strict=True)


class FunctionSpec(_Open):
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, JsonValue] | None = None


class ToolSpec(_Open):
    type: Literal["function"] = "function"
    function: FunctionSpec


class _ForcedFunction(BaseModel):
    model_config = ConfigDict(strict=True)

    name: str


class ForcedTool(BaseModel):
    model_config = ConfigDict(strict=True)

    type: Literal["function"] = "function"
    function: _ForcedFunction


class _CalledFunction(_Open):
    name: str = Field(min_length=1)
    arguments: str | dict[str, JsonValue] = "{}"


class MessageToolCall(_Open):
    id: str | None = None
    type: Literal["function"] = "function"
    function: _CalledFunction


class ChatMessage(_Open):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, JsonValue]] | None = None
    tool_calls: list[MessageToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None


class StreamOptions(_Open):
    include_usage: bool = False


class ChatCompletionRequest(_Open):
    """The subset of OpenAI's Chat Completions request this engine honours; other fields that
    stock clients send are accepted and ignored."""

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[ToolSpec] | None = None
    tool_choice: Literal["auto", "none", "required"] | ForcedTool | None = None
    n: int | None = Field(default=None, ge=1, le=MAX_N)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    seed: int | None = None
    stop: (
        Annotated[str, Field(min_length=1)]
        | Annotated[list[Annotated[str, Field(min_length=1)]], Field(max_length=4)]
        | None
    ) = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None

    def dump(self) -> dict[str, Any]:
        """Plain JSON-like dict (what the prompt renderer reads), without unset fields."""
        return self.model_dump(exclude_unset=True, mode="json")
