"""What one generated token does to a sequence: the tool-call round logic (O2 + O3).

An assistant message is a *round*. In free text the sequence watches for the call start
marker; inside a call the grammar constrains every token; when the call's end-of-message
token is accepted, the call is looked up by full key: a hit (O3) appends the tool result
exactly as the next request would render it and opens the next round in place; a miss ends
the sequence with the call. While a call is being written, a cached entry for the same tool
supplies draft tokens (O2) for the engine to verify.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

from spectool.errors import ModelOutputError

from .grammar import CallGrammar
from .prompts import TokenMemo, encode
from .sequence import Phase, RoundEvent, Sequence
from .store import ToolOutputStore
from .toolcalls import draft_cached_call, held_back, output_text, parse_call, tool_results_text

__all__ = ["RoundContext", "advance", "begin_round", "propose_draft"]

_NAME = re.compile(r'"name": ("(?:[^"\\]|\\.)*")')
MAX_DRAFT_TOKENS = 96
MAX_DRAFT_ATTEMPTS = 4


@dataclass
class RoundContext:
    """What the round logic needs from its engine (no engine internals)."""

    tokenizer: Any
    eos_id: int
    grammar: CallGrammar
    store: ToolOutputStore | None
    memo: TokenMemo
    max_rounds: int = 16


def begin_round(seq: Sequence) -> None:
    """Start an assistant message at the end of ``seq.tokens`` (after any forced prefix)."""
    seq.body_start = len(seq.tokens) - len(seq.forced_ids)
    seq.round_generated = seq.emitted_chars = seq.draft_attempts = 0
    seq.phase, seq.matcher, seq.call_start = Phase.TEXT, None, -1


def _body(seq: Sequence, ctx: RoundContext) -> str:
    ids = seq.tokens[seq.body_start :]
    if ids and ids[-1] == ctx.eos_id:
        ids = ids[:-1]
    return ctx.tokenizer.decode(ids)


def _tools_for(seq: Sequence) -> list:
    if seq.tool_choice not in (None, "auto", "none", "required"):
        return [t for t in seq.tools if t.get("function", t).get("name") == seq.tool_choice]
    return seq.tools


def enter_call_if_started(seq: Sequence, ctx: RoundContext, body: str) -> None:
    if not seq.tools or seq.tool_choice == "none" or seq.call_start == -2:
        return
    i = seq.fmt.call_start_in(body)
    if i < 0:
        return
    _emit_content(seq, body[: i - len(seq.fmt.call_start)])
    matcher = ctx.grammar.matcher(seq.fmt, _tools_for(seq))
    extra = body[i:]
    if extra and not matcher.accept_string(extra):
        seq.call_start = -2  # the marker token ran into text the grammar refuses: plain text
        return
    seq.phase, seq.matcher, seq.call_start = Phase.CALL, matcher, i


def _emit_content(seq: Sequence, safe: str) -> None:
    while safe.endswith("\ufffd"):  # half a UTF-8 character: wait for the rest
        safe = safe[:-1]
    if len(safe) > seq.emitted_chars:
        seq.emit({"type": "content", "text": safe[seq.emitted_chars :]})
        seq.emitted_chars = len(safe)


def propose_draft(seq: Sequence, ctx: RoundContext, limit: int = MAX_DRAFT_TOKENS) -> list[int]:
    """O2: at most ``limit`` draft tokens completing the call being written, from the newest
    cached entry. An attempt is spent only when a draft is returned."""
    if (
        seq.phase is not Phase.CALL
        or ctx.store is None
        or seq.draft_attempts >= MAX_DRAFT_ATTEMPTS
        or limit <= 0
    ):
        return []
    body = _body(seq, ctx)
    call_text = body[seq.call_start :]
    found = _NAME.search(call_text)
    if found is None:
        return []
    try:
        import json

        name = json.loads(found.group(1))
    except ValueError:
        return []
    entries = ctx.store.by_name(seq.response_id, seq.owner, name)
    text = draft_cached_call(seq.fmt, call_text, [(e.name, e.params) for e in entries])
    if text is None:
        return []
    seq.draft_attempts += 1
    # no end-of-message token in the draft: the grammar forces it as the bonus token
    return encode(ctx.tokenizer, text)[: min(limit, MAX_DRAFT_TOKENS)]


def advance(seq: Sequence, tokens: list[int], ctx: RoundContext) -> int:
    """Append chosen tokens in order; returns how many were kept. It stops after the token
    that finishes the sequence or ends a call answered from the store (O3 appended its result
    after that token, so the rest of a draft no longer follows it)."""
    for n, token in enumerate(tokens, 1):
        appended = len(seq.tokens) + 1
        if not _advance_one(seq, token, ctx) or len(seq.tokens) != appended:
            return n
    return len(tokens)


def _advance_one(seq: Sequence, token: int, ctx: RoundContext) -> bool:
    """Append one chosen token; returns False once the sequence has finished."""
    seq.tokens.append(token)
    seq.generated += 1
    seq.round_generated += 1
    if seq.phase is Phase.CALL:
        seq.matcher.accept_token(token)
        if seq.matcher.is_terminated():
            return _call_ended(seq, ctx)
    else:
        body = _body(seq, ctx)
        cut = min((body.find(s) for s in seq.params.stop if s in body), default=-1)
        if cut >= 0 or token == ctx.eos_id:
            if token == ctx.eos_id:
                ctx.memo.put(body, seq.tokens[seq.body_start : -1])
            return _finish(seq, "stop", body[:cut] if cut >= 0 else body)
        enter_call_if_started(seq, ctx, body)
        if seq.phase is Phase.TEXT:
            _emit_content(seq, body[: len(body) - held_back(body, [seq.fmt.call_start, *seq.params.stop])])
    if seq.round_generated >= seq.params.max_tokens:
        body = _body(seq, ctx)
        # a call cut off mid-way is not content: keep only the text before its start marker
        cut = seq.call_start - len(seq.fmt.call_start) if seq.phase is Phase.CALL else len(body)
        return _finish(seq, "length", body[: max(cut, 0)])
    return True


def _finish(seq: Sequence, reason: str, content: str) -> bool:
    if seq.phase is Phase.TEXT or reason != "tool_calls":
        _emit_content(seq, content)
    seq.finish_reason, seq.content = reason, content
    return False


def _call_ended(seq: Sequence, ctx: RoundContext) -> bool:
    body = _body(seq, ctx)
    ctx.memo.put(body, seq.tokens[seq.body_start : -1])
    content = body[: seq.call_start - len(seq.fmt.call_start)]
    try:
        name, args = parse_call(seq.fmt, body[seq.call_start :])
    except ModelOutputError:  # the grammar makes this unreachable; stay safe anyway
        return _finish(seq, "stop", body)
    call = {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": name, "arguments": args},
    }
    entry = None
    if ctx.store is not None and len(seq.resolved) < ctx.max_rounds:
        entry = ctx.store.take(seq.response_id, seq.owner, name, args)
    if entry is None:
        if ctx.store is not None:  # the client may run a write now: no read-only entry after it
            seq.events.append((RoundEvent.O3_MISS, 0))
            ctx.store.fence(seq.response_id, seq.owner)
        seq.final_call = call
        return _finish(seq, "tool_calls", content)
    # O3: the result goes straight into this sequence; no eviction, no re-prefill
    output = output_text(entry.output)
    appended = encode(ctx.tokenizer, tool_results_text(seq.fmt, [output])) + seq.forced_ids
    seq.tokens.extend(appended)
    seq.appended += len(appended)
    seq.events.append((RoundEvent.O3_HIT, len(appended)))
    record = {"content": content or None, "tool_call": call, "output": output}
    seq.resolved.append(record)
    seq.emit({"type": "resolved", "record": record})
    begin_round(seq)
    if seq.forced_ids:
        enter_call_if_started(seq, ctx, _body(seq, ctx))
    return True
