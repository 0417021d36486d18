"""Where a decode row ends early: a string value that is full, a call written twice.

Both stand in for limits a grammar could express only at a price (:mod:`._decode`): a
``maxLength`` compiles as a bounded repetition (~0.2 s per tool set at 64 characters), and no
JSON schema can say "no repeated items" for a small model that loops.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ._copy import open_string_value

__all__ = ["StringGuard", "complete_items", "repeats_a_call"]


@dataclass(frozen=True)
class StringGuard:
    """Ends a string value at ``limit`` characters by feeding the closing quote."""

    limit: int
    quote: int

    @classmethod
    def make(cls, tokenizer: Any, limit: int | None) -> StringGuard | None:
        ids = tokenizer('"', add_special_tokens=False)["input_ids"] if limit else []
        return cls(int(limit), int(ids[0])) if limit and len(ids) == 1 else None

    def closes(self, text: str, row: Any) -> bool:
        """True when the open value is full and the grammar takes a bare quote now."""
        value = open_string_value(text)
        if value is None or len(value) < self.limit or value.endswith("\\"):
            return False
        if not row.matcher.accept_token(self.quote):
            return False
        row.matcher.rollback(1)  # the caller feeds it like any chosen token
        return True


def repeats_a_call(tokenizer: Any, new: list[int], feed: list[int]) -> bool:
    """True when the calls ``new`` has completed end with one equal to an earlier one.

    A small model that should close the array sometimes writes its last call again; the rest
    of the row would be the same call over and over, so the row ends here (the caller reads a
    truncated array up to its last complete call). Only a step whose tokens close a brace can
    complete a call; jump-forward often feeds the next call's opening with it.
    """
    if "}" not in tokenizer.decode(feed):
        return False
    calls = complete_items(tokenizer.decode(new))
    return len(calls) > 1 and calls[-1] in calls[:-1]


def complete_items(text: str) -> list[Any]:
    """The complete items of a JSON array that may be cut anywhere after them."""
    decoder, items = json.JSONDecoder(), []
    at = text.find("[") + 1
    while 0 < at < len(text):
        while at < len(text) and text[at] in " ,\n":
            at += 1
        try:
            item, at = decoder.raw_decode(text, at)
        except ValueError:
            break
        items.append(item)
    return items
