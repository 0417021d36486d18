"""The native drafter prompt: the model's own chat template with ``tools=``.

Instruct models taught tool calling (Qwen2.5, Hammer, xLAM-2 at 1–3 B) have a format of their
own — Qwen writes ``<tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call>`` after a system
prompt its template builds from the tools — and they call tools best in it, zero-shot. This
module renders a :class:`~spectool._types.DraftRequest` through that template (the
conversation as the main model saw it, oldest turns dropped to fit a token budget) and builds
the matching grammar: 1..``max_calls`` tagged calls whose JSON is the tools' schema.
Pure apart from the tokenizer and xgrammar objects it is handed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..._types import DraftRequest
from ...errors import ConfigError
from .._common import UNPARSED, function_calls, message_text

__all__ = ["CALL_CLOSE", "CALL_OPEN", "native_grammar", "native_messages", "native_prompt_ids"]

#: Qwen2.5's (and Hermes') tool-call tags, as its chat template states them.
CALL_OPEN, CALL_CLOSE = "<tool_call>\n", "\n</tool_call>"


def native_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Chat Completions messages in the shape chat templates expect: text content, and
    tool-call arguments as objects (templates render them with ``tojson``)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        role = "system" if m.get("role") == "developer" else str(m.get("role") or "user")
        msg: dict[str, Any] = {"role": role, "content": message_text(m.get("content"))}
        calls = [
            {"type": "function", "function": {"name": name, "arguments": {} if args is UNPARSED else args}}
            for _, name, args in function_calls(m)
        ]
        if calls:
            msg["tool_calls"] = calls
        out.append(msg)
    return out


def native_prompt_ids(
    tokenizer: Any, request: DraftRequest, tools: Sequence[Mapping[str, Any]], max_prompt_tokens: int
) -> list[int]:
    """Token ids of the model's own tool-calling prompt, dropping the oldest turns to fit."""
    template = getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str) or "tools" not in template:
        raise ConfigError(
            "prompt='native' needs a model whose chat template takes tools= (Qwen2.5, xLAM-2 …); "
            "use prompt='compact' for this model"
        )
    msgs = native_messages(request.messages)
    while True:
        text = tokenizer.apply_chat_template(
            msgs, tools=list(tools), tokenize=False, add_generation_prompt=True
        )
        ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        rest = [i for i, m in enumerate(msgs) if m["role"] != "system"]
        if len(ids) <= max_prompt_tokens or len(rest) <= 1:
            return ids
        del msgs[rest[0]]


def native_grammar(xgr: Any, call_schema: Mapping[str, Any], max_calls: int) -> Any:
    """An xgrammar ``Grammar``: 1..``max_calls`` calls, each ``<tool_call>\\n{json}\\n</tool_call>``
    (newline-separated, as the template writes them), the JSON matching ``call_schema``."""
    call = xgr.Grammar.from_json_schema(json.dumps(call_schema), any_whitespace=False)
    one = xgr.Grammar.concat(_literal(xgr, CALL_OPEN), call, _literal(xgr, CALL_CLOSE))
    choices, seq = [], one
    for n in range(max_calls):
        if n:
            seq = xgr.Grammar.concat(seq, _literal(xgr, "\n"), one)
        choices.append(seq)
    return choices[0] if len(choices) == 1 else xgr.Grammar.union(*choices)


def _literal(xgr: Any, text: str) -> Any:
    return xgr.Grammar.from_ebnf(f"root ::= {json.dumps(text)}")
