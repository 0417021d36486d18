"""Grammar-constrained beam search: λ distinct guesses, ranked by sequence log-probability.

The i.i.d. rows of :mod:`._decode` spend λ on re-drawing the same likely answer; forks spend
it on one step each. A beam of width λ keeps the λ most likely partial answers the grammar
allows at every step and returns the λ most likely *distinct* complete ones. Scores are
log-probabilities under the grammar mask (renormalized over the allowed tokens), so a token the
schema forces costs nothing and is fed without a forward (jump-forward), as in the row decoder.

All hypotheses share the one prefix KV cache: before a hypothesis is expanded the cache is
cropped back to the longest prefix it shares with what the cache holds, and the rest of its
tokens are fed in one forward (hypotheses are visited in token order, so siblings re-feed only
their tails). That costs up to λ small forwards per step instead of one batched one; simple,
and exact for any cache the model supports.

Two guesses are the same when ``key`` maps their texts to the same string (the caller passes
the canonical key of the parsed calls); partial hypotheses with the same text (another
tokenization of it) are merged, keeping the more likely. torch is imported lazily.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._decode import (
    DecodeInputs,
    DecodeStats,
    PrefixCache,
    _forced,
    _forward,
    _only_stop,
    _Row,
    _Stopped,
    common_prefix,
)
from ._row_limits import StringGuard

__all__ = ["beam_rows"]


@dataclass
class _Hyp:
    tokens: list[int]
    logp: float
    row: _Row
    logits: Any = None
    #: The grammar can only end here: a complete answer, no forward needed.
    complete: bool = False


def beam_rows(
    inputs: DecodeInputs, *, width: int, key: Callable[[str], str | None] | None = None
) -> list[list[int]]:
    """Up to ``width`` distinct answers to ``prompt`` under ``grammar``, most likely first.

    ``key(text)`` names a guess (None: unparseable, dropped); the default is the text itself.
    Their log-probabilities are left in ``stats.row_logps`` in the same order. A set ``stop``
    ends the search before its next forward (``[]``).
    """
    model, tokenizer, grammar, xgr, prompt, prefix, stop, max_new_tokens, stop_ids, vocab = inputs[:10]
    stats = inputs.stats if inputs.stats is not None else DecodeStats()
    stops = {int(s) for s in stop_ids}
    guard = StringGuard.make(tokenizer, inputs.max_string_length)
    done: dict[str, tuple[float, list[int]]] = {}
    try:
        first = prefix.prefill(model, prompt, stop, stats, reuse=inputs.reuse)
        if hasattr(grammar, "result"):
            grammar = grammar.result()
        live = [_Hyp([], 0.0, _Row(xgr, grammar, vocab), first)]
        while live:
            for hyp in sorted(live, key=lambda h: h.tokens):
                if hyp.logits is None:
                    hyp.logits = _bring(model, prefix, len(prompt), hyp.tokens, stop, stats)
            candidates = [c for hyp in live for c in _expand(hyp, width, guard, tokenizer)]
            candidates.sort(key=lambda c: -c[0])
            live = []
            partial: set[str] = set()
            for logp, hyp, token in candidates:
                if len(live) >= width:
                    break
                if token in stops:
                    _finish(done, hyp.tokens, logp, tokenizer, key)
                    continue
                grown = _grow(hyp, token, logp, inputs, stops, stats)
                if grown is None:
                    continue
                if grown.complete:
                    _finish(done, grown.tokens, logp, tokenizer, key)
                    continue
                text = tokenizer.decode(grown.tokens)
                if text not in partial and len(grown.tokens) < max_new_tokens:
                    partial.add(text)
                    live.append(grown)
            best = sorted((v[0] for v in done.values()), reverse=True)
            # scores only fall as a hypothesis grows: once λ answers beat every live one, stop
            if len(best) >= width and (not live or max(h.logp for h in live) <= best[width - 1]):
                break
    except _Stopped:
        return []
    finally:
        if prefix.cache is not None:
            prefix.rewind(len(prompt))
    ranked = sorted(done.values(), key=lambda v: -v[0])[:width]
    stats.row_logps = [lp for lp, _ in ranked]
    return [tokens for _, tokens in ranked]


def _bring(
    model: Any,
    prefix: PrefixCache,
    prompt_len: int,
    tokens: list[int],
    stop: threading.Event,
    stats: DecodeStats,
) -> Any:
    """The model's logits after ``tokens``: crop the cache to what it shares, feed the rest."""
    keep = min(common_prefix(prefix.ids[prompt_len:], tokens), len(tokens) - 1)
    prefix.rewind(prompt_len + keep)
    if stop.is_set():
        raise _Stopped
    feed = tokens[keep:]
    logits = _forward(model, prefix.cache, feed, stats)
    prefix.ids.extend(feed)
    return logits


def _expand(
    hyp: _Hyp, width: int, guard: StringGuard | None, tokenizer: Any
) -> list[tuple[float, _Hyp, int]]:
    """The ``width`` best next tokens the grammar allows, as (sequence log-prob, hyp, token)."""
    import torch

    if guard is not None and guard.closes(tokenizer.decode(hyp.tokens), hyp.row):
        return [(hyp.logp, hyp, guard.quote)]  # a full string value is closed, at no cost
    logp = torch.log_softmax(hyp.row.masked(hyp.logits), dim=-1)
    top = torch.topk(logp, min(width, logp.shape[-1]))
    return [
        (hyp.logp + float(v), hyp, int(t))
        for v, t in zip(top.values, top.indices, strict=True)
        if bool(v.isfinite())
    ]


def _grow(
    hyp: _Hyp, token: int, logp: float, inputs: DecodeInputs, stops: set[int], stats: DecodeStats
) -> _Hyp | None:
    """``hyp`` + ``token`` (+ the tokens the schema then forces); None if the grammar refuses."""
    row = hyp.row.fork()
    if not row.matcher.accept_token(token):
        return None
    stats.sampled_tokens += 1
    budget = inputs.max_new_tokens - len(hyp.tokens) - 1
    forced = _forced(inputs.tokenizer, row, budget, stops, inputs.vocab) if inputs.jump_forward else []
    stats.forced_tokens += len(forced)
    grown = _Hyp(hyp.tokens + [token] + forced, logp, row)
    grown.complete = row.matcher.is_terminated() or _only_stop(row, stops, inputs.vocab)
    return grown


def _finish(
    done: dict[str, tuple[float, list[int]]],
    tokens: list[int],
    logp: float,
    tokenizer: Any,
    key: Callable[[str], str | None] | None,
) -> None:
    text = tokenizer.decode(tokens)
    name = key(text) if key is not None else text
    if name is not None and (name not in done or done[name][0] < logp):
        done[name] = (logp, tokens)
