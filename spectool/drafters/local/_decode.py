"""The local drafter's fast decode loop: prefix KV reuse, grammar jump-forward, early stop.

``transformers.generate`` costs the drafter three ways: it prefills the whole prompt on every
call, it runs one forward per token even where the JSON schema leaves one choice
(``[{"name": "``, ``", "arguments": {"``, ``}}]``), and it checks for cancellation only through
a stopping criterion. :class:`PrefixCache` keeps one KV cache per loaded model and re-feeds only
the tokens after the longest common prefix with the previous prompt; :func:`decode_rows` asks
xgrammar for the string the schema forces (``find_jump_forward_string``) and feeds it in one
forward, stops a row as soon as the grammar can only end, and checks a stop flag before every
forward. λ rows decode one after the other from the same prompt cache (one prefill): with
jump-forward a row takes a handful of forwards, so rows need not be batched.
torch is imported lazily (callers hold the model's lock).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ...hf_compat import cache_keyword
from ._row_limits import StringGuard, repeats_a_call

__all__ = ["DecodeInputs", "DecodeStats", "PrefixCache", "decode_rows"]

#: Prompt tokens fed per forward while prefilling, so a cancelled draft stops within one chunk.
PREFILL_CHUNK = 128


class _Stopped(Exception):
    """The stop flag was set between two forwards."""


@dataclass
class DecodeStats:
    """What the last draft cost: tokens re-used vs fed, forwards, tokens forced by the schema."""

    prompt_tokens: int = 0
    reused_tokens: int = 0
    forwards: int = 0
    forced_tokens: int = 0
    sampled_tokens: int = 0
    #: Sequence log-probability (under the grammar mask) of each row decoded from the prompt,
    #: in row order; a fork's row is not scored (it shares row 0's head). The confidence gate
    #: reads the best of these.
    row_logps: list[float] = field(default_factory=list)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass
class PrefixCache:
    """One model's KV cache and the token ids it holds (the last prompt)."""

    ids: list[int] = field(default_factory=list)
    cache: Any = None

    def reset(self) -> None:
        self.ids, self.cache = [], None

    def prefill(
        self, model: Any, ids: Sequence[int], stop: threading.Event, stats: DecodeStats, reuse: bool = True
    ) -> Any:
        """Bring the cache to ``ids`` and return the logits after the last prompt token."""
        from transformers import DynamicCache

        keep = common_prefix(self.ids, ids) if reuse and self.cache is not None else 0
        keep = min(keep, len(ids) - 1)  # the last prompt token is always fed: its logits are needed
        if keep == 0 or self.cache is None:
            # full layers everywhere: a sliding-window layer (Gemma 3) cannot be cropped once past
            # its window, and the model's own masks apply the window either way
            self.cache, keep = DynamicCache(), 0
        else:
            _crop(self.cache, keep)
        self.ids = list(ids[:keep])
        stats.prompt_tokens, stats.reused_tokens = len(ids), keep
        logits = None
        try:
            for start in range(keep, len(ids), PREFILL_CHUNK):
                if stop.is_set():
                    raise _Stopped
                chunk = list(ids[start : start + PREFILL_CHUNK])
                logits = _forward(model, self.cache, chunk, stats)
                self.ids.extend(chunk)
        except BaseException:
            self.reset()  # a half-fed cache must not be trusted by the next draft
            raise
        return logits

    def rewind(self, length: int) -> None:
        """Drop what a row appended after the prompt (the next row starts from the prompt)."""
        _crop(self.cache, length)
        del self.ids[length:]


def _crop(cache: Any, length: int) -> None:
    """Keep the first ``length`` positions (transformers 5 crops by a negative count)."""
    drop = cache.get_seq_length() - length
    if drop > 0:
        cache.crop(-drop)


def _forward(model: Any, cache: Any, tokens: list[int], stats: DecodeStats) -> Any:
    import torch

    out = model(
        input_ids=torch.tensor([tokens]), **{cache_keyword(model): cache}, use_cache=True, logits_to_keep=1
    )
    stats.forwards += 1
    return out.logits[0, -1].float()


class DecodeInputs(NamedTuple):
    """What every row decoder (:func:`decode_rows`, ``_beam.beam_rows``) decodes from: the
    model and its tokenizer, the compiled grammar (or a future of one, or None) with its
    xgrammar module, the prompt ids, the model's prefix cache, the flag that stops a draft,
    and the limits both decoders share (see :func:`decode_rows`); ``stats`` collects the cost."""

    model: Any
    tokenizer: Any
    grammar: Any
    xgr: Any
    prompt: Sequence[int]
    prefix: PrefixCache
    stop: threading.Event
    max_new_tokens: int
    stop_ids: Sequence[int]
    vocab: int
    jump_forward: bool = True
    reuse: bool = True
    stats: DecodeStats | None = None
    max_string_length: int | None = None


class _Row:
    """One row's grammar state: xgrammar matcher + a bitmask, applied to a logits vector."""

    def __init__(self, xgr: Any, grammar: Any, vocab: int, matcher: Any = None) -> None:
        self.xgr = xgr
        self.matcher = matcher if matcher is not None else xgr.GrammarMatcher(grammar)
        self.mask = xgr.allocate_token_bitmask(1, vocab)

    def fork(self) -> _Row:
        """A row in the same grammar state that goes on independently (beam search)."""
        twin = object.__new__(_Row)
        twin.xgr, twin.matcher, twin.mask = self.xgr, self.matcher.fork(), self.mask
        return twin

    def masked(self, logits: Any) -> Any:
        self.matcher.fill_next_token_bitmask(self.mask, 0)
        scores = logits.clone()[None]
        self.xgr.apply_token_bitmask_inplace(scores, self.mask)
        return scores[0]


def _pick(scores: Any, temperature: float, top_p: float, generator: Any) -> int:
    import torch

    if temperature <= 0:
        return int(scores.argmax())
    probs = torch.softmax(scores / temperature, dim=-1)
    ordered, index = probs.sort(descending=True)
    cut = int((ordered.cumsum(0) < top_p).sum()) + 1  # smallest set whose mass reaches top_p
    ordered = ordered[:cut]
    choice = torch.multinomial(ordered / ordered.sum(), 1, generator=generator)
    return int(index[int(choice)])


def decode_rows(
    inputs: DecodeInputs,
    *,
    rows: int,
    temperature: float = 0.0,
    top_p: float = 1.0,
    greedy_first: bool = True,
    seed: int | None = None,
    branch: bool = False,
    bias: Callable[[str, Any], Any] | None = None,
) -> list[list[int]]:
    """Decode ``rows`` answers for ``prompt`` under ``grammar``; returns each row's new ids.

    Row 0 is greedy when ``greedy_first`` (or when ``temperature`` is 0); the others sample,
    or with ``branch`` fork off row 0 where it was least sure (:func:`_branch_rows`). A set
    ``stop`` ends the draft before its next forward (``[]`` is returned).
    ``grammar`` None decodes without a constraint (then jump-forward does nothing); a
    ``concurrent.futures.Future`` of one is awaited after the prefill, so a new tool set's
    grammar compiles on the other core while the prompt is prefilled. ``bias(text, logits)``
    reshapes each sampled step's logits from the row's text so far (:class:`._copy.CopyBias`).
    ``max_string_length`` closes a string value once it holds that many characters (the last
    token may carry it a little past): the same bound as a grammar ``maxLength``, which xgrammar
    compiles as a bounded repetition costing ~0.2 s per new tool set at 64, for ~free.
    """
    import torch

    grammar, prompt, prefix = inputs.grammar, inputs.prompt, inputs.prefix
    stats = inputs.stats if inputs.stats is not None else DecodeStats()
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    guard = StringGuard.make(inputs.tokenizer, inputs.max_string_length) if grammar is not None else None
    decode = functools.partial(_decode_one, inputs, stats, top_p, generator, bias, guard)
    try:
        first = prefix.prefill(inputs.model, prompt, inputs.stop, stats, reuse=inputs.reuse)
        if hasattr(grammar, "result"):
            grammar = grammar.result()
        if branch and rows > 1:
            return _branch_rows(decode, grammar, first, len(prompt), prefix, rows)
        out: list[list[int]] = []
        for r in range(rows):
            temp = 0.0 if (r == 0 and greedy_first) else temperature
            try:
                out.append(decode(grammar, first, temp))
            finally:
                if prefix.cache is not None:
                    prefix.rewind(len(prompt))
        return out
    except _Stopped:
        return []


def _branch_rows(
    decode: Any, grammar: Any, logits: Any, prompt_len: int, prefix: PrefixCache, rows: int
) -> list[list[int]]:
    """Row 0 greedy; each other row takes the runner-up token at one of the ``rows - 1`` steps
    where row 0 was least sure (smallest log-prob margin), then continues greedily.

    Forks are decoded latest first, so each one only crops the cache back to its fork point:
    everything before a sampled token of row 0 was fed, and an earlier fork's prefix is a prefix
    of a later one's.
    """
    forks: list[tuple[float, int, int]] = []  # (margin, index in row 0, runner-up token)
    try:
        out = [decode(grammar, logits, 0.0, forks=forks)]
        chosen = sorted(sorted(forks)[: rows - 1], key=lambda f: -f[1])
        for _, index, token in chosen:
            prefix.rewind(prompt_len + index)
            out.append(decode(grammar, None, 0.0, start=(out[0][:index], token)))
        return out
    finally:
        if prefix.cache is not None:
            prefix.rewind(prompt_len)


def _decode_one(
    inputs: DecodeInputs,
    stats: DecodeStats,
    top_p: float,
    generator: Any,
    bias: Callable[[str, Any], Any] | None,
    guard: StringGuard | None,
    grammar: Any,
    logits: Any,
    temperature: float,
    *,
    forks: list[tuple[float, int, int]] | None = None,
    start: tuple[list[int], int] | None = None,
) -> list[int]:
    """One row. ``forks`` collects, per sampled step, the runner-up token and its log-prob
    margin; ``start`` = (tokens already in the cache, the token to take next) resumes a fork."""
    import torch

    tokenizer, prefix, vocab = inputs.tokenizer, inputs.prefix, inputs.vocab
    max_new_tokens = inputs.max_new_tokens
    stops = {int(s) for s in inputs.stop_ids}
    row = _Row(inputs.xgr, grammar, vocab) if grammar is not None else None
    new: list[int] = []
    forced_next: int | None = None
    logp = 0.0
    if start is not None:
        new, forced_next = list(start[0]), start[1]
        if row is not None and not all(row.matcher.accept_token(t) for t in new):
            return []  # cannot happen for row 0's own tokens; a fork never breaks the main path
    while len(new) < max_new_tokens:
        text = tokenizer.decode(new) if (bias is not None or guard is not None) else ""
        if forced_next is None and guard is not None and row is not None and guard.closes(text, row):
            forced_next = guard.quote
        if forced_next is not None:
            scores, token, forced_next = None, forced_next, None
        else:
            if bias is not None:
                logits = bias(text, logits)
            scores = row.masked(logits) if row is not None else logits
            token = _pick(scores, temperature, top_p, generator)
            if not bool(scores[token].isfinite()):
                break
            logp += float(torch.log_softmax(scores.detach(), dim=-1)[token])  # ending is a choice too
            if token in stops:
                break
            if forks is not None:
                _note_fork(forks, scores, token, len(new), stops)
        stats.sampled_tokens += 1
        feed = [token]
        if row is not None:
            if not row.matcher.accept_token(token):
                break
            feed += (
                _forced(tokenizer, row, max_new_tokens - len(new) - 1, stops, vocab)
                if inputs.jump_forward
                else []
            )
            stats.forced_tokens += len(feed) - 1
            if row.matcher.is_terminated() or _only_stop(row, stops, vocab):
                new.extend(feed)  # the grammar can only end here: no forward needed
                break
        new.extend(feed)
        if len(new) >= max_new_tokens or (row is not None and repeats_a_call(tokenizer, new, feed)):
            break
        if inputs.stop.is_set():
            raise _Stopped
        logits = _forward(inputs.model, prefix.cache, feed, stats)
        prefix.ids.extend(feed)
    if start is None:
        stats.row_logps.append(logp)
    return new


def _note_fork(
    forks: list[tuple[float, int, int]], scores: Any, token: int, index: int, stops: set[int]
) -> None:
    """Record the allowed runner-up of a greedy step and how far below the chosen token it is."""
    import torch

    logp = torch.log_softmax(scores, dim=-1)
    top = torch.topk(logp, 2)
    if int(top.indices[0]) != token:
        return
    runner_up = int(top.indices[1])
    if runner_up in stops or not bool(top.values[1].isfinite()):
        return
    forks.append((float(top.values[0] - top.values[1]), index, runner_up))


def _forced(tokenizer: Any, row: _Row, budget: int, stops: set[int], vocab: int) -> list[int]:
    """Tokens of the string the schema forces next, accepted into the matcher.

    The string is tokenized on its own, so its last token is held back unless it completes the
    answer: the model would often merge it with what follows (``": "`` then ``-3`` is written
    ``":`` `` -`` ``3``), and forcing the split spelling derails a small model. A token the
    matcher rejects ends the jump there and the model decodes the rest itself.
    """
    text = row.matcher.find_jump_forward_string()
    if not text or budget <= 0:
        return []
    forced: list[int] = []
    for token in tokenizer(text, add_special_tokens=False)["input_ids"][:budget]:
        if not row.matcher.accept_token(int(token)):
            break
        forced.append(int(token))
    if forced and not _only_stop(row, stops, vocab):
        row.matcher.rollback(1)
        forced.pop()
    return forced


def _only_stop(row: _Row, stops: set[int], vocab: int) -> bool:
    """True when the grammar allows nothing but a stop token next (the answer is complete)."""
    import torch

    if not row.matcher.is_completed():
        return False
    scores = row.masked(torch.zeros(vocab))
    allowed = torch.isfinite(scores).nonzero().flatten().tolist()
    return bool(allowed) and all(int(a) in stops for a in allowed)
