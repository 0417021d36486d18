"""Copy bias: nudge the drafter's string values toward spans of what it was told.

Most string arguments are copied from the conversation — a city, a file name, an id a tool
returned — and a 135M drafter misspells them (``"Hirat"`` for *Hyderabad*, ``"Qué"`` for
*Quintana Roo*). While the drafter writes a JSON string *value*, :class:`CopyBias` adds
``beta`` nats to every token that keeps the value a verbatim substring of the source text
(the user and tool messages): at the value's start, tokens that begin a word of the source;
inside it, tokens that continue one of the value's occurrences. It never forbids anything — a
value the source does not contain (``"transit"``) is written as the model prefers — and the
grammar mask is applied after it, so only tokens the schema allows can win. The main model's
calls are never touched: this shapes guesses, and a wrong guess is only a cache miss.

Pure Python and one vector add per sampled step; torch is imported lazily.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["CopyBias", "TokenTable", "open_string_value", "source_text", "token_table"]

#: Longest continuation (characters) looked up per occurrence; longer tokens are rare.
MAX_TOKEN_CHARS = 24
#: Source characters kept (the most recent): bounds the per-step lookups.
MAX_SOURCE_CHARS = 6000


@dataclass(frozen=True)
class TokenTable:
    """A vocabulary by token text, and the tokens that close a string (``"``, ``",``, ``"}`` …)."""

    by_text: Mapping[str, Sequence[int]]
    closers: tuple[int, ...]

    @classmethod
    def from_texts(cls, by_text: Mapping[str, Sequence[int]]) -> TokenTable:
        closers = sorted({i for t, found in by_text.items() if t.startswith('"') for i in found})
        return cls(by_text, tuple(closers))


_TABLES: weakref.WeakKeyDictionary[Any, TokenTable] = weakref.WeakKeyDictionary()


def token_table(tokenizer: Any, vocab: int) -> TokenTable:
    """The tokenizer's :class:`TokenTable` (built once per tokenizer, ~0.3 s). Tokens that decode
    to a partial character (byte pieces of a longer UTF-8 sequence) are left out."""
    try:
        return _TABLES[tokenizer]
    except (KeyError, TypeError):
        pass
    size = min(vocab, len(tokenizer))
    by_text: dict[str, list[int]] = {}
    for i, text in enumerate(tokenizer.batch_decode([[i] for i in range(size)])):
        if text and "\ufffd" not in text:
            by_text.setdefault(text, []).append(i)
    table = TokenTable.from_texts(by_text)
    try:
        _TABLES[tokenizer] = table
    except TypeError:  # a tokenizer that cannot be weakly referenced: rebuild next time
        pass
    return table


def source_text(messages: Iterable[Mapping[str, Any]]) -> str:
    """What values are copied from: user and tool message text, most recent last."""
    parts = []
    for m in messages:
        content = m.get("content")
        if m.get("role") in ("user", "tool") and isinstance(content, str):
            parts.append(content)
    return "\n".join(parts)[-MAX_SOURCE_CHARS:]


def open_string_value(text: str) -> str | None:
    """The characters of the JSON string value ``text`` ends inside, or None when it does not
    end inside a string value (outside strings, or inside an object key)."""
    return _scan(text)[0]


def _scan(text: str) -> tuple[str | None, bool]:
    """(:func:`open_string_value`, whether ``text`` ends where a value may open: after ``:``,
    ``[`` or an array's ``,``, so the next token may be the opening quote merged with the
    value's first characters)."""
    stack: list[str] = []  # "{" / "["
    expecting_key = False
    expecting_value = False
    start = -1  # index after the opening quote of the string we are in
    is_key = False
    escaped = False
    for i, ch in enumerate(text):
        if start >= 0:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                start = -1
            continue
        if ch.isspace():
            continue
        expecting_value = ch == ":" or (ch in "[," and bool(stack) and (ch == "[" or stack[-1] == "["))
        if ch == '"':
            start, is_key = i + 1, expecting_key
            expecting_key = False
        elif ch in "{[":
            stack.append(ch)
            expecting_key = ch == "{"
        elif ch in "}]":
            if stack:
                stack.pop()
            expecting_key = False
        elif ch == ",":
            expecting_key = bool(stack) and stack[-1] == "{"
        elif ch == ":":
            expecting_key = False
    if start >= 0:
        return (None if is_key else text[start:]), False
    return None, expecting_value


def _word_starts(source: str) -> list[int]:
    """Positions a copied value may start at: a letter or digit after a non-word character,
    and every character of scripts written without spaces (CJK, kana, Hangul)."""
    out = []
    for i, ch in enumerate(source):
        if ch.isspace():
            continue
        if i == 0 or ord(ch) >= 0x2E80 or (ch.isalnum() and not source[i - 1].isalnum()):
            out.append(i)
    return out


class CopyBias:
    """Adds ``beta`` to the logits of tokens that keep the open string value a copy of
    ``source``. Call with the row's text so far and its logits; returns biased logits."""

    def __init__(self, source: str, table: TokenTable, beta: float) -> None:
        self.source = source
        self.texts = table.by_text
        # closing quotes are boosted where a copied span ends a word, so the bias never pushes
        # a value on past the words it copied
        self._closers = table.closers
        self.beta = float(beta)
        self._starts = _word_starts(source)

    def token_ids(self, value: str) -> list[int]:
        """Ids of tokens t such that ``value + t`` occurs in the source (at a word start when
        ``value`` is empty), and the closing quotes where an occurrence of ``value`` ends a word."""
        src = self.source
        if value:
            ends, at = [], src.find(value)
            while at >= 0:
                ends.append(at + len(value))
                at = src.find(value, at + 1)
        else:
            ends = self._starts
        ids: set[int] = set()
        self._add_spans(ends, "", ids)
        if value and any(end == len(src) or not src[end].isalnum() for end in ends):
            ids.update(self._closers)
        return sorted(ids)

    def opening_ids(self) -> list[int]:
        """Ids of the opening quote, alone or merged with a copied value's first characters."""
        ids: set[int] = set()
        for quote in ('"', ' "'):
            ids.update(self.texts.get(quote, ()))
            self._add_spans(self._starts, quote, ids)
        return sorted(ids)

    def _add_spans(self, ends: Sequence[int], lead: str, ids: set[int]) -> None:
        src = self.source
        for end in ends:
            for j in range(end + 1, min(len(src), end + MAX_TOKEN_CHARS) + 1):
                found = self.texts.get(lead + src[end:j])
                if found:
                    ids.update(found)

    def __call__(self, text: str, logits: Any) -> Any:
        if self.beta == 0 or not self.source:
            return logits
        value, opening = _scan(text)
        if value is None and not opening:
            return logits
        ids = self.token_ids(value) if value is not None else self.opening_ids()
        if not ids:
            return logits
        biased = logits.clone()
        biased[ids] += self.beta
        return biased
