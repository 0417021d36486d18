"""Prompt formats, tool-call boundaries, parsing and cached-call drafting. Strings only.

Nothing here touches a model or an engine, so a vLLM backend reuses it as is:

* :class:`PromptFormat` — one place for each family (ChatML/SmolLM2, Qwen, Llama-3, xLAM):
  how messages, tools, tool calls and tool results render.
* :func:`render_segments` — a chat as text segments; assistant *bodies* are their own
  segments so an engine can tokenize the prompt exactly where generation started and ended.
* :func:`held_back` / :meth:`PromptFormat.call_start_in` — boundary detection on a text stream.
* :func:`draft_cached_call` — the text that completes a started call from a cached entry (O2).
* :func:`parse_call` — name and raw argument text of a finished call (via spectool's parser).

A call always renders as ``start + prefix + {"name": "N", "arguments": ARGS} + suffix`` with
``ARGS`` kept verbatim, so a generated call and the same call echoed back by a client are the
same text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spectool.errors import ModelOutputError
from spectool.toolcall_text import parse_tool_calls

__all__ = [
    "FORMATS",
    "PromptFormat",
    "call_json",
    "detect_format",
    "draft_cached_call",
    "held_back",
    "output_text",
    "parse_call",
    "render_segments",
    "scan_text",
]

_SMOL_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
# Two worked examples: a 135M model calls tools reliably only when shown how (REFERENCE §2).
_EXAMPLES = (
    'Example. User: What is the weather in Rome?\nAssistant: <tool_call>\n{"name": "get_weather", '
    '"arguments": {"city": "Rome"}}\n</tool_call>\n'
    'Example. User: Convert 5 km to miles.\nAssistant: <tool_call>\n{"name": "convert", '
    '"arguments": {"value": 5, "unit": "km"}}\n</tool_call>\n'
)


@dataclass(frozen=True)
class PromptFormat:
    """How one model family writes a chat. Tags are plain text unless the tokenizer has them."""

    name: str
    bos: str
    header: str  # "{role}" is replaced; the text before a message's content
    footer: str  # the end-of-message text (the EOS token the model emits) ...
    separator: str  # ... and what follows it before the next header
    call_start: str
    call_prefix: str  # between the start marker and the call JSON
    call_suffix: str  # after the call JSON; ends the call
    tool_role: str
    tool_wrap: str = "{content}"
    default_system: str | None = None
    start_only_at_message_start: bool = False

    @property
    def eos(self) -> str:
        """The token the model ends a message with: the footer."""
        return self.footer

    def call_start_in(self, body: str) -> int:
        """Index just past the call start marker in an assistant body, or -1."""
        if self.start_only_at_message_start:
            return len(self.call_start) if body.startswith(self.call_start) else -1
        i = body.find(self.call_start)
        return -1 if i < 0 else i + len(self.call_start)

    def render_call(self, name: str, arguments: str) -> str:
        return self.call_start + self.call_prefix + call_json(name, arguments) + self.call_suffix

    def generation_prompt(self) -> str:
        return self.header.format(role="assistant")

    def message(self, role: str, content: str) -> str:
        """A whole message: header, content, end-of-message and what follows it."""
        return self.header.format(role=role) + content + self.footer + self.separator

    def tool_message(self, content: str) -> str:
        return self.message(self.tool_role, self.tool_wrap.format(content=content))

    def tool_system(self, system: str | None, tools: Sequence[Mapping[str, Any]]) -> str:
        lines = [system or self.default_system or ""]
        if tools:
            lines.append(
                "You can call tools. To call one, answer with exactly:\n"
                f"{self.render_call('<tool name>', '{<arguments as JSON>}')}\n"
                "Available tools:\n"
                + "\n".join(json.dumps(_fn(t)) for t in tools)
                + "\n"
                + (_EXAMPLES if self.call_start == "<tool_call>" else "")
            )
        return "\n\n".join(x for x in lines if x).strip()


# One row per family: name, the message frame (bos, header, footer, separator), the call
# markers (start, prefix, suffix), the tool role and the rest by keyword.
_CHATML = ("", "<|im_start|>{role}\n", "<|im_end|>", "\n")
_LLAMA3 = ("<|begin_of_text|>", "<|start_header_id|>{role}<|end_header_id|>\n\n", "<|eot_id|>", "")
_TAGS = ("<tool_call>", "\n", "\n</tool_call>")
FORMATS: dict[str, PromptFormat] = {
    f.name: f
    for f in (
        PromptFormat("chatml", *_CHATML, *_TAGS, "tool", default_system=_SMOL_SYSTEM),
        PromptFormat("qwen", *_CHATML, *_TAGS, "user", "<tool_response>\n{content}\n</tool_response>"),
        PromptFormat("llama3", *_LLAMA3, *_TAGS, "ipython"),
        # xLAM writes its calls as a JSON array that is the whole message
        PromptFormat("xlam", *_CHATML, "[", "", "]", "tool", start_only_at_message_start=True),
    )
}


def detect_format(chat_template: str | None, model_name: str = "") -> PromptFormat:
    """The family from a tokenizer's chat template (ChatML when unsure)."""
    template = chat_template or ""
    if "xlam" in model_name.lower():
        return FORMATS["xlam"]
    if "<|start_header_id|>" in template:
        return FORMATS["llama3"]
    if "<tool_response>" in template:
        return FORMATS["qwen"]
    return FORMATS["chatml"]


def call_json(name: str, arguments: str) -> str:
    """The call object exactly as the grammar makes the model write it (arguments verbatim)."""
    return '{"name": ' + json.dumps(name, ensure_ascii=False) + ', "arguments": ' + arguments + "}"


def output_text(output: Any) -> str:
    """A tool output as the content of a tool message (strings verbatim, else JSON)."""
    return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)


def _fn(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    return tool.get("function", tool)


def _arguments_text(call: Mapping[str, Any]) -> tuple[str, str]:
    fn = _fn(call)
    args = fn.get("arguments", "{}")
    return fn["name"], args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)


def assistant_body(fmt: PromptFormat, message: Mapping[str, Any]) -> str:
    """The text of an assistant message between its header and its end-of-message."""
    body = _content(message)  # content parts too (a list here once crashed the prompt memo: 500)
    for call in message.get("tool_calls") or ():
        body += fmt.render_call(*_arguments_text(call))
    return body


def render_segments(
    fmt: PromptFormat,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] = (),
    *,
    forced_prefix: str = "",
) -> list[tuple[str, bool]]:
    """The prompt as ``(text, is_assistant_body)`` segments, ending with the generation prompt.

    Tokenizing each segment separately and concatenating gives the same ids an engine holds
    after generating those bodies itself; ``forced_prefix`` (e.g. the call start for
    ``tool_choice=required``) is its own last segment.
    """
    out: list[tuple[str, bool]] = []
    text = fmt.bos
    msgs = list(messages)
    if tools or fmt.default_system:
        system = None
        if msgs and msgs[0].get("role") in ("system", "developer"):
            system = _content(msgs.pop(0))
        text += fmt.message("system", fmt.tool_system(system, tools))
    for m in msgs:
        role = m.get("role")
        if role == "assistant":
            out += [(text + fmt.generation_prompt(), False), (assistant_body(fmt, m), True)]
            text = fmt.footer + fmt.separator
        elif role == "tool":
            text += fmt.tool_message(_content(m))
        else:
            text += fmt.message("system" if role == "developer" else str(role), _content(m))
    out.append((text + fmt.generation_prompt(), False))
    if forced_prefix:
        out.append((forced_prefix, False))
    return out


def tool_results_text(fmt: PromptFormat, outputs: Iterable[Any], forced_prefix: str = "") -> str:
    """What follows an assistant's end-of-message token when its calls' results come back
    (O3), through the next generation prompt: exactly the next request's rendering."""
    text = fmt.separator + "".join(fmt.tool_message(output_text(o)) for o in outputs)
    return text + fmt.generation_prompt() + forced_prefix


def _content(message: Mapping[str, Any]) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):  # OpenAI content parts: keep the text parts
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
    return str(content)


def held_back(text: str, markers: Iterable[str]) -> int:
    """How many trailing characters might begin a marker (so a stream must not emit them yet)."""
    keep = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), keep, -1):
            if marker.startswith(text[-n:]):
                keep = n
                break
    return keep


def draft_cached_call(
    fmt: PromptFormat, call_text: str, entries: Iterable[tuple[str, Mapping[str, Any] | str]]
) -> str | None:
    """O2: the rest of a started call, from the newest cached entry that agrees with it.

    ``call_text`` is what the model wrote after the start marker; ``entries`` are (name,
    arguments) pairs, newest first. Returns ``None`` until the name is written (drafting
    before that would guess among tools) or when no entry continues the text.
    """
    for name, arguments in entries:
        args = arguments if isinstance(arguments, str) else json.dumps(dict(arguments), ensure_ascii=False)
        full = fmt.call_prefix + call_json(name, args) + fmt.call_suffix
        named = len(fmt.call_prefix + call_json(name, "")) - 1  # through '"arguments": '
        if len(call_text) >= named and full.startswith(call_text) and len(full) > len(call_text):
            return full[len(call_text) :]
    return None


def parse_call(fmt: PromptFormat, call_text: str) -> tuple[str, str]:
    """(name, raw arguments text) of a finished call written after the start marker."""
    body = call_text.removeprefix(fmt.call_prefix).removesuffix(fmt.call_suffix)
    head = '{"name": '
    try:
        name, end = json.JSONDecoder().raw_decode(body, len(head))
        marker = ', "arguments": '
        if not body.startswith(head) or body[end : end + len(marker)] != marker or not body.endswith("}"):
            raise ValueError("not the call layout")
        args = body[end + len(marker) : -1]
        json.loads(args)
        return str(name), args
    except ValueError:
        # not our exact layout (e.g. a client-written call): fall back to the lenient parser
        calls = parse_tool_calls(
            fmt.call_start + fmt.call_prefix + body + fmt.call_suffix
            if fmt.call_start == "<tool_call>"
            else "[" + body + "]"
        )
        if len(calls) != 1:
            raise ModelOutputError(f"expected one tool call, got {len(calls)}: {call_text[:80]!r}") from None
        return calls[0].name, calls[0].arguments_json


@dataclass(frozen=True)
class TextScan:
    """Where an assistant body in free text stands: the first stop string (-1: none), the
    index just past the call start marker (-1: none) and how much may stream already."""

    stop: int
    call: int
    safe: int


def scan_text(fmt: PromptFormat, body: str, stops: Sequence[str]) -> TextScan:
    """All the boundary questions a free-text token asks, in one pass over the body."""
    stop = min((body.find(s) for s in stops if s in body), default=-1)
    return TextScan(stop, fmt.call_start_in(body), len(body) - held_back(body, [fmt.call_start, *stops]))


@dataclass(frozen=True)
class ClosedCall:
    """A finished call: its name and raw arguments, and when the lookup answered it, the
    text that follows its end-of-message token (the results through the next generation
    prompt) and the outputs as tool messages carry them."""

    name: str
    arguments: str
    outputs: list[str]
    results: str | None


def close_call(fmt: PromptFormat, call_text: str, lookup: Callable[[str, str], list[Any]]) -> ClosedCall:
    """Parse a finished call and ask ``lookup(name, arguments)`` for its outputs (an empty
    list: not answered). Raises :class:`ModelOutputError` when the text is not one call."""
    name, args = parse_call(fmt, call_text)
    outputs = [output_text(o) for o in lookup(name, args)]
    results = tool_results_text(fmt, outputs) if outputs else None
    return ClosedCall(name, args, outputs, results)
