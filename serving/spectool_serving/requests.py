"""Chat Completions request bodies -> engine sequences (validation with clear 400s)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from spectool.errors import EngineError

from .prompts import encode, encode_prompt
from .sampling import SamplingParams
from .schemas import MAX_N, ChatCompletionRequest
from .sequence import Sequence

__all__ = ["MAX_N", "build_sequences", "first_error", "parse_chat"]


def _bad(message: str, param: str | None = None) -> EngineError:
    err = EngineError(message, status_code=400)
    err.param = param  # type: ignore[attr-defined]
    return err


def parse_chat(body: Any) -> ChatCompletionRequest:
    """Validate a decoded JSON body (or JSON bytes); EngineError(400) naming the field."""
    if isinstance(body, ChatCompletionRequest):
        return body
    try:
        if isinstance(body, (bytes, str)):
            return ChatCompletionRequest.model_validate_json(body)
        return ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["type"] == "json_invalid":
            raise _bad(f"body is not valid JSON: {first['msg']}") from exc
        loc = first.get("loc") or ()
        param = str(loc[0]) if loc and loc[0] in ChatCompletionRequest.model_fields else None
        raise _bad(first_error(exc), param) from exc


def first_error(exc: ValidationError) -> str:
    """The first validation error as ``where: what`` (``body`` where no field is named)."""
    first = exc.errors()[0]
    where = ".".join(str(x) for x in first.get("loc") or ())
    return f"{where or 'body'}: {first['msg']}"


def _tool_choice(req: ChatCompletionRequest, tools: list) -> str | None:
    choice = req.tool_choice
    if not tools:
        if choice not in (None, "none", "auto"):
            raise _bad("tool_choice needs tools", "tool_choice")
        return None
    if choice is None:
        return "auto"
    if isinstance(choice, str):
        return choice
    name = choice.function.name
    if name not in {t["function"]["name"] for t in tools}:
        raise _bad(f"tool_choice names {name!r}, which is not among the tools", "tool_choice")
    return name


def _params(req: ChatCompletionRequest, cap: int) -> SamplingParams:
    stop = req.stop or []
    stop = [stop] if isinstance(stop, str) else stop  # the schema refused empty ones and a 5th
    temperature = 1.0 if req.temperature is None else req.temperature
    top_p = 1.0 if req.top_p is None else req.top_p
    max_tokens = req.max_completion_tokens or req.max_tokens or min(256, cap)
    for name in ("max_tokens", "max_completion_tokens"):
        if (getattr(req, name) or 0) > cap:
            raise _bad(f"{name} is limited to {cap} on this server", name)
    return SamplingParams(temperature, top_p, max_tokens, req.seed, stop)


def build_sequences(
    body: Any, engine: Any, response_id: str, owner: str, *, max_tokens_cap: int = 32768
) -> list[Sequence]:
    """One sequence per choice; raises EngineError(400) on a malformed body."""
    req = parse_chat(body)
    plain = req.dump()
    tools = plain.get("tools") or []
    choice = _tool_choice(req, tools)
    params = _params(req, max_tokens_cap)
    fmt = engine.fmt
    forced = fmt.call_start if choice not in (None, "auto", "none") else ""
    prompt_tools = tools if choice is not None else []
    ids = encode_prompt(
        engine.tokenizer, fmt, plain["messages"], prompt_tools, forced_prefix=forced, memo=engine.memo
    )
    forced_ids = encode(engine.tokenizer, forced)
    rest = (params, fmt, prompt_tools, choice, forced_ids)  # tokens: a list of each choice's own
    return [
        Sequence(response_id, owner, list(ids), *rest, emit=lambda ev: None, index=i)
        for i in range(req.n or 1)
    ]
