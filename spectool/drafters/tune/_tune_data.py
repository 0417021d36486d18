"""The tuning data: which trace examples a run trains on, and each one encoded as it is drafted.

Each trace example (:mod:`spectool._traces`) is rendered in the compact drafter format
(:mod:`._compact`) — the very prompt the drafter later sees — followed by the calls as the
grammar lets the drafter write them; the prompt tokens are labelled -100 (no loss). A trace file
is chosen from and encoded one example at a time: it can be far larger than memory.
"""

from __future__ import annotations

import collections
import hashlib
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..._traces import TraceExample, iter_traces
from ..local._compact import compact_prompt_ids, compact_target

__all__ = [
    "IGNORE",
    "Encoded",
    "encode_example",
    "encode_fitting",
    "select_indices",
    "training_examples",
]

IGNORE = -100


@dataclass(frozen=True)
class Encoded:
    """One training example: token ids and labels (-100 on the prompt)."""

    input_ids: list[int]
    labels: list[int]

    @property
    def prompt_tokens(self) -> int:
        return sum(1 for x in self.labels if x == IGNORE)


def encode_example(tokenizer: Any, example: TraceExample) -> Encoded:
    """Prompt (compact format, exactly as drafting renders it) + target, prompt masked."""
    prompt = compact_prompt_ids(tokenizer, example.request)
    eos = tokenizer.eos_token or ""
    target = list(
        tokenizer(compact_target(example.calls, example.request.tools, eos), add_special_tokens=False)[
            "input_ids"
        ]
    )
    return Encoded(prompt + target, [IGNORE] * len(prompt) + target)


def select_indices(
    categories: Sequence[str],
    *,
    max_examples: int | None = None,
    max_per_category: int | None = None,
    seed: int = 0,
) -> list[int]:
    """Which examples (by their ``meta.category``) a seeded shuffle keeps: at most
    ``max_per_category`` per category, then ``max_examples`` in all (categories interleaved by
    the shuffle). Positions, so a trace file can be chosen from without holding its examples."""
    rng = random.Random(seed)
    pool = list(range(len(categories)))
    rng.shuffle(pool)
    if max_per_category:
        seen: collections.Counter[str] = collections.Counter()
        kept = []
        for i in pool:
            if seen[categories[i]] < max_per_category:
                seen[categories[i]] += 1
                kept.append(i)
        pool = kept
    return pool[:max_examples] if max_examples else pool


def training_examples(
    path: str, *, max_examples: int | None = None, max_per_category: int | None = None, seed: int = 0
) -> tuple[Iterator[TraceExample], dict[str, Any]]:
    """The chosen examples of a trace file, streamed, and the data summary for the manifest.

    Two passes over the file, one line in memory at a time: the first reads each line's
    category (and split) to choose, the second yields the chosen examples in file order. A
    trace file can be far larger than memory (``drafters tune`` once held every example of
    10 MB lines at once)."""
    seen = [
        (str(ex.meta.get("category", "")), str(ex.meta.get("split", "?")), str(ex.meta.get("content") or ""))
        for ex in iter_traces(path)
    ]
    chosen = set(
        select_indices(
            [c for c, _, _ in seen], max_examples=max_examples, max_per_category=max_per_category, seed=seed
        )
    )
    cats = collections.Counter(seen[i][0] or "?" for i in chosen)
    summary = {
        "traces": str(path),
        "sha256_16": _file_digest(path),
        "examples_by_category": dict(sorted(cats.items())),
        "splits": sorted({seen[i][1] for i in chosen}),
        # the content digest of every example trained on (traces that record one), so a leakage
        # check can hold the shipped traces against any held-out set
        "content_hashes": sorted({seen[i][2] for i in chosen if seen[i][2]}),
    }
    return (ex for i, ex in enumerate(iter_traces(path)) if i in chosen), summary


def _file_digest(path: str) -> str | None:
    if not Path(path).is_file():
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def encode_fitting(
    tokenizer: Any, examples: Iterable[TraceExample], max_tokens: int
) -> tuple[list[Encoded], int]:
    """Encode examples as they come, keeping those of at most ``max_tokens`` tokens; returns
    them and how many were dropped. Holds one example at a time beside what it keeps."""
    kept, dropped = [], 0
    for ex in examples:
        enc = encode_example(tokenizer, ex)
        if len(enc.input_ids) > max_tokens:
            dropped += 1
        else:
            kept.append(enc)
    return kept, dropped
