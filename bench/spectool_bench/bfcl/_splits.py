"""Deterministic train / dev / test splits of BFCL tasks, by task id.

One rule for every command that tunes or reports (drafter eval, tuning, the main job): a task's
split depends only on its id, so a figure reported on ``test`` never saw a task that tuning used.
The bucket is the first 8 hex digits of sha256(id) modulo 100: 0–59 train, 60–69 dev, 70–99 test.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Literal, TypeVar

__all__ = ["SPLITS", "Split", "in_split", "split_of"]

Split = Literal["train", "dev", "test"]
SPLITS: tuple[Split, ...] = ("train", "dev", "test")
_BOUNDS = ((60, "train"), (70, "dev"), (100, "test"))

T = TypeVar("T")


def split_of(task_id: str) -> Split:
    """The split a task id belongs to (stable across runs, machines and Python versions)."""
    bucket = int(hashlib.sha256(task_id.encode()).hexdigest()[:8], 16) % 100
    for bound, name in _BOUNDS:
        if bucket < bound:
            return name  # type: ignore[return-value]
    raise AssertionError("unreachable")


def in_split(items: Iterable[T], split: str, *, key=lambda t: t.id) -> list[T]:
    """The items whose id falls in ``split`` (``"all"`` keeps every item)."""
    if split == "all":
        return list(items)
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)} or 'all'")
    return [t for t in items if split_of(key(t)) == split]
