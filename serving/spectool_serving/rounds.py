"""What one generated token does to a sequence: the tool-call round logic (O2 + O3).

An assistant message is a *round* (:class:`Round`). In free text the sequence watches for
the call start marker; inside a call the grammar constrains every token; when the call's
end-of-message token is accepted, the call is looked up by full key: a hit (O3) appends the
tool result exactly as the next request would render it and opens the next round in place; a
miss ends the sequence with the call. While a call is being written, a cached entry for the
same tool supplies draft tokens (O2) for the engine to verify. The round's text grows by each
token's decoded piece (:class:`RoundText`), never by decoding the whole round again.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from spectool.errors import ModelOutputError

from .grammar import CallGrammar
from .prompts import TokenMemo, encode
from .sequence import Content, Phase, Resolved, RoundEvent, Sequence
from .store import ToolOutputStore
from .toolcalls import close_call, draft_cached_call, scan_text

__all__ = ["Round", "RoundContext", "RoundText", "advance", "begin_round", "propose_draft"]

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


@dataclass
class RoundText:
    """A round's text, decoded incrementally: each token decodes only a short window (from
    the last committed piece's start), so the text equals one decode of all its ids. Ids whose
    bytes do not yet form a whole character stay pending: their decode (ending in U+FFFD) is
    the ``tail``, replaced once the rest arrives. Decoding each token alone would not do:
    a character split across tokens decodes to two U+FFFD, and some tokenizers drop or add
    a leading space at a decode's start."""

    tokenizer: Any
    ids: list[int] = field(default_factory=list)
    committed: str = ""
    tail: str = ""
    _prefix: int = 0  # the window starts here ...
    _read: int = 0  # ... and its text up to here is committed already
    _prefix_text: str = ""

    def push(self, ids: list[int]) -> None:
        self.ids.extend(ids)
        new = self.tokenizer.decode(self.ids[self._prefix :])[len(self._prefix_text) :]
        if new.endswith("\ufffd"):  # half a UTF-8 character: keep its bytes pending
            self.tail = new
            return
        self.committed, self.tail = self.committed + new, ""
        self._prefix, self._read = self._read, len(self.ids)
        self._prefix_text = self.tokenizer.decode(self.ids[self._prefix : self._read])

    @property
    def text(self) -> str:
        return self.committed + self.tail


@dataclass
class Round:
    """The current assistant message of a sequence."""

    start: int  # index in ``seq.tokens`` where the message body starts
    text: RoundText
    generated: int = 0
    phase: Phase = Phase.TEXT
    call_start: int | None = None  # char index in the text just past the call start marker
    refused: bool = False  # a marker ran into text the grammar refuses: plain text from here
    matcher: Any = None
    draft_attempts: int = 0
    emitted: int = 0  # characters streamed as content


def begin_round(seq: Sequence, ctx: RoundContext) -> None:
    """Start an assistant message at the end of ``seq.tokens`` (after any forced prefix)."""
    start = len(seq.tokens) - len(seq.forced_ids)
    seq.round = Round(start, RoundText(ctx.tokenizer))
    if seq.forced_ids:  # the call start marker is forced: the call begins right away
        seq.round.text.push(seq.forced_ids)
        _enter_call(seq, ctx, seq.round.text.text, len(seq.round.text.text))


def _tools_for(seq: Sequence) -> list:
    if seq.tool_choice not in (None, "auto", "none", "required"):
        return [t for t in seq.tools if t.get("function", t).get("name") == seq.tool_choice]
    return seq.tools


def _enter_call(seq: Sequence, ctx: RoundContext, body: str, i: int) -> None:
    """The call start marker ends at ``i``: the grammar takes over, unless it refuses the
    text already written after the marker (then the round stays plain text)."""
    r = seq.round
    if not seq.tools or seq.tool_choice == "none" or r.refused:
        return
    _emit_content(seq, body[: i - len(seq.fmt.call_start)])
    matcher = ctx.grammar.matcher(seq.fmt, _tools_for(seq))
    extra = body[i:]
    if extra and not matcher.accept_string(extra):
        r.refused = True
        return
    r.phase, r.matcher, r.call_start = Phase.CALL, matcher, i


def _emit_content(seq: Sequence, safe: str) -> None:
    while safe.endswith("\ufffd"):  # half a UTF-8 character: wait for the rest
        safe = safe[:-1]
    r = seq.round
    if len(safe) > r.emitted:
        seq.emit(Content(safe[r.emitted :]))
        r.emitted = len(safe)


def propose_draft(seq: Sequence, ctx: RoundContext, limit: int = MAX_DRAFT_TOKENS) -> list[int]:
    """O2: at most ``limit`` draft tokens completing the call being written, from the newest
    cached entry. An attempt is spent only when a draft is returned."""
    r = seq.round
    if r.phase is not Phase.CALL or ctx.store is None or r.draft_attempts >= MAX_DRAFT_ATTEMPTS or limit <= 0:
        return []
    call_text = r.text.text[r.call_start :]
    found = _NAME.search(call_text)
    if found is None:
        return []
    try:
        name = json.loads(found.group(1))
    except ValueError:
        return []
    entries = ctx.store.by_name(seq.response_id, seq.owner, name)
    text = draft_cached_call(seq.fmt, call_text, [(e.name, e.params) for e in entries])
    if text is None:
        return []
    r.draft_attempts += 1
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
    r = seq.round
    seq.tokens.append(token)
    seq.generated += 1
    r.generated += 1
    if token != ctx.eos_id:  # the end-of-message token is not part of the body
        r.text.push([token])
    body = r.text.text
    if r.phase is Phase.CALL:
        r.matcher.accept_token(token)
        if r.matcher.is_terminated():
            return _call_ended(seq, ctx, body)
    else:
        scan = scan_text(seq.fmt, body, seq.params.stop)
        if scan.stop >= 0 or token == ctx.eos_id:
            if token == ctx.eos_id:
                ctx.memo.put(body, seq.tokens[r.start : -1])
            return _finish(seq, "stop", body[: scan.stop] if scan.stop >= 0 else body)
        if scan.call >= 0:
            _enter_call(seq, ctx, body, scan.call)
        if r.phase is Phase.TEXT:
            _emit_content(seq, body[: scan.safe])
    if r.generated >= seq.params.max_tokens:
        # a call cut off mid-way is not content: keep only the text before its start marker
        cut = r.call_start - len(seq.fmt.call_start) if r.call_start is not None else len(body)
        return _finish(seq, "length", body[: max(cut, 0)])
    return True


def _finish(seq: Sequence, reason: str, content: str) -> bool:
    if seq.round.phase is Phase.TEXT or reason != "tool_calls":
        _emit_content(seq, content)
    seq.finish_reason, seq.content = reason, content
    return False


def _call_ended(seq: Sequence, ctx: RoundContext, body: str) -> bool:
    r = seq.round
    ctx.memo.put(body, seq.tokens[r.start : -1])
    assert r.call_start is not None
    content = body[: r.call_start - len(seq.fmt.call_start)]
    store = ctx.store

    def lookup(name: str, args: str) -> list[Any]:
        """O3: the store's entry for this exact call; a miss fences the store, since the
        client may run a write now (no read-only entry is served after it)."""
        if store is None:
            return []
        entry = (
            store.take(seq.response_id, seq.owner, name, args) if len(seq.resolved) < ctx.max_rounds else None
        )
        if entry is not None:
            return [entry.output]
        seq.round_events.append((RoundEvent.O3_MISS, 0))
        store.fence(seq.response_id, seq.owner)
        return []

    try:
        closed = close_call(seq.fmt, body[r.call_start :], lookup)
    except ModelOutputError:  # the grammar makes this unreachable; stay safe anyway
        return _finish(seq, "stop", body)
    call = {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": closed.name, "arguments": closed.arguments},
    }
    if closed.results is None:
        seq.final_call = call
        return _finish(seq, "tool_calls", content)
    # O3: the result goes straight into this sequence; no eviction, no re-prefill
    appended = encode(ctx.tokenizer, closed.results) + seq.forced_ids
    seq.tokens.extend(appended)
    seq.appended += len(appended)
    seq.round_events.append((RoundEvent.O3_HIT, len(appended)))
    record = {"content": content or None, "tool_call": call, "output": closed.outputs[0]}
    seq.resolved.append(record)
    seq.emit(Resolved(record))
    begin_round(seq, ctx)
    return True
