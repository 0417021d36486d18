"""What a value looks like: its shape, and the words around it where the user wrote it.

Pure functions the learning drafter (:mod:`._learning`) counts per (tool, parameter) over
finished conversations, so a candidate that does not look like the values a parameter took
(``"Reason"`` for a ``user_id`` shaped ``a_a_0{4}``) ranks below one that does:

* :func:`shape`: strings by character class — a run of upper-case letters ``A``, lower-case
  ``a``, a digit run with its length ``0{n}``, other characters as they are; ids written in
  upper-case letters and digits mixed (``4OG6T3``) as ``X{n}``; numbers and booleans by type.
  ``#W6729841`` → ``#A0{7}``, ``noah_ito_3850`` → ``a_a_0{4}``, ``Mei`` → ``Aa``, 3 and 3.5 → ``<num>``.
* :func:`anchors`: the words right before and after a value's occurrence in a text, a
  capitalized neighbour as ``<Cap>`` and a number as ``<num>`` (``"You are Mei Kovacs"``: Mei
  has ``are`` before and ``<Cap>`` after), so a parameter learns where its value is written.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any

__all__ = ["anchors", "shape", "spans"]

_RUN = re.compile(r"[A-Z]+|[a-z]+|[0-9]+|\s+|.", re.S)
_MIXED_ID = re.compile(r"(?=[A-Z0-9]*[A-Z])(?=[A-Z0-9]*[0-9])[A-Z0-9]{4,}")
_WORD = re.compile(r"[\w#@.+-]*\w")
#: tokens of the user's text a string value may be: words, ids, e-mail addresses
_SPAN = re.compile(r"[#\w][\w#@.+-]*\w|\w")


def shape(value: Any) -> str:
    """The value's shape (see the module doc); ``""`` for lists, objects and None."""
    return _string_shape(value) if isinstance(value, str) else _other_shape(value)


def _other_shape(value: Any) -> str:
    if isinstance(value, bool):
        return "<bool>"
    if isinstance(value, (int, float)):
        return "<num>"  # 108 and 108.0 are one shape: the schema says which to write
    return ""


@functools.lru_cache(maxsize=8192)
def _string_shape(value: str) -> str:
    if _MIXED_ID.fullmatch(value):
        return f"X{{{len(value)}}}"
    if value.isalpha() and value.isupper() and len(value) <= 8:  # codes: ORD, SDZQKO
        return f"A{{{len(value)}}}"
    out = []
    for run in _RUN.findall(value[:80]):
        if run[0].isdigit():
            out.append(f"0{{{len(run)}}}")
        elif run[0].isupper() and run.isalpha():
            out.append("A")
        elif run[0].islower() and run.isalpha():
            out.append("a")
        elif run.isspace():
            out.append(" ")
        else:
            out.append(run)
    return "".join(out)


def _neighbour(word: str | None) -> str:
    if not word:
        return "<none>"
    if word[0].isdigit():
        return "<num>"
    if word[0].isupper():
        return "<Cap>"
    return word.lower()


def anchors(text: str, value: Any) -> Iterator[str]:
    """``before:w`` and ``after:w`` of each whole-word occurrence of ``value`` in ``text``."""
    if not isinstance(value, (str, int, float)) or isinstance(value, bool) or not str(value):
        return
    needle = str(value)
    for m in re.finditer(rf"(?<![\w#]){re.escape(needle)}(?!\w)", text):
        before = _WORD.findall(text[max(0, m.start() - 40) : m.start()])
        after = _WORD.findall(text[m.end() : m.end() + 40])
        yield "before:" + _neighbour(before[-1] if before else None)
        yield "after:" + _neighbour(after[0] if after else None)


def spans(text: str) -> Iterator[tuple[int, str]]:
    """(position, token) of the words and ids in ``text``, trailing punctuation left off."""
    for m in _SPAN.finditer(text):
        yield m.start(), m.group().rstrip(".")
