"""Chat Completions request bodies -> engine sequences (validation with clear 400s)."""

from __future__ import annotations

from typing import Any, Mapping

from spectool.errors import EngineError

from .prompts import encode, encode_prompt
from .sampling import SamplingParams
from .sequence import Sequence

__all__ = ["MAX_N", "build_sequences"]

MAX_N = 8


def _bad(message: str, param: str | None = None) -> EngineError:
    err = EngineError(message, status_code=400)
    err.param = param  # type: ignore[attr-defined]
    return err


def _tool_choice(body: Mapping[str, Any], tools: list) -> str | None:
    choice = body.get("tool_choice")
    if not tools:
        if choice not in (None, "none", "auto"):
            raise _bad("tool_choice needs tools", "tool_choice")
        return None
    if choice is None:
        return "auto"
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, Mapping) and isinstance(choice.get("function"), Mapping):
        name = choice["function"].get("name")
        names = {t["function"]["name"] for t in tools}
        if name not in names:
            raise _bad(f"tool_choice names {name!r}, which is not among the tools", "tool_choice")
        return name
    raise _bad("tool_choice must be 'auto', 'none', 'required' or {type: function, function: {name}}",
               "tool_choice")


def _tools(body: Mapping[str, Any]) -> list:
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise _bad("tools must be an array", "tools")
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise _bad(f"tools[{i}] must be {{type: function, function: {{name, parameters}}}}", "tools")
    return tools


def _params(body: Mapping[str, Any]) -> SamplingParams:
    stop = body.get("stop") or []
    stop = [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop) or len(stop) > 4:
        raise _bad("stop must be a string or up to 4 non-empty strings", "stop")
    try:
        temperature = float(body.get("temperature", 1.0) if body.get("temperature") is not None else 1.0)
        top_p = float(body.get("top_p") if body.get("top_p") is not None else 1.0)
        max_tokens = int(body.get("max_completion_tokens") or body.get("max_tokens") or 256)
        seed = body.get("seed")
        seed = int(seed) if seed is not None else None
    except (TypeError, ValueError) as exc:
        raise _bad(f"bad sampling parameter: {exc}") from exc
    if not 0 <= temperature <= 2 or not 0 < top_p <= 1 or max_tokens < 1:
        raise _bad("need 0 <= temperature <= 2, 0 < top_p <= 1, max_tokens >= 1")
    return SamplingParams(temperature, top_p, max_tokens, seed, stop)


def build_sequences(body: Any, engine: Any, response_id: str, owner: str) -> list[Sequence]:
    """One sequence per choice; raises EngineError(400) on a malformed body."""
    if not isinstance(body, Mapping):
        raise _bad("body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(
            isinstance(m, Mapping) and m.get("role") in ("system", "developer", "user", "assistant", "tool")
            for m in messages):
        raise _bad("messages must be a non-empty array of {role, content}", "messages")
    tools = _tools(body)
    choice = _tool_choice(body, tools)
    n = body.get("n") or 1
    if not isinstance(n, int) or not 1 <= n <= MAX_N:
        raise _bad(f"n must be an integer in 1..{MAX_N}", "n")
    params = _params(body)
    fmt = engine.fmt
    forced = fmt.call_start if choice not in (None, "auto", "none") else ""
    prompt_tools = tools if choice is not None else []
    ids = encode_prompt(engine.tokenizer, fmt, messages, prompt_tools, forced_prefix=forced, memo=engine.memo)
    forced_ids = encode(engine.tokenizer, forced)
    return [Sequence(response_id, owner, list(ids), params, fmt, prompt_tools, choice, forced_ids,
                     emit=lambda ev: None, index=i) for i in range(n)]
