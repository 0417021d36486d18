"""Prompt token ids, tokenized where generation starts and ends.

An engine that generated an assistant message holds the model's own token ids for it; a
client that sends the same message back holds only its text, and re-tokenizing text need not
give the same ids. :class:`TokenMemo` remembers the ids of bodies this server generated, so
the next request's prompt is token-for-token what the engine would have held had it kept the
sequence (that is what makes the engine path and the plain path comparable, and lossless).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from .toolcalls import PromptFormat, render_segments

__all__ = ["TokenMemo", "encode_prompt"]


class TokenMemo:
    """Bounded map: generated assistant body text -> the token ids that produced it."""

    def __init__(self, capacity: int = 4096) -> None:
        self._items: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def put(self, text: str, ids: Sequence[int]) -> None:
        with self._lock:
            self._items[text] = tuple(ids)
            self._items.move_to_end(text)
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)

    def get(self, text: str) -> tuple[int, ...] | None:
        with self._lock:
            return self._items.get(text)


def encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []


def encode_prompt(
    tokenizer: Any,
    fmt: PromptFormat,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] = (),
    *,
    forced_prefix: str = "",
    memo: TokenMemo | None = None,
) -> list[int]:
    """Token ids of a chat prompt ending with the generation prompt (and ``forced_prefix``)."""
    ids: list[int] = []
    for text, is_body in render_segments(fmt, messages, tools, forced_prefix=forced_prefix):
        known = memo.get(text) if (is_body and memo is not None) else None
        ids.extend(known if known is not None else encode(tokenizer, text))
    return ids
