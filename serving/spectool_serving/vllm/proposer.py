"""O2 on vLLM: a ``custom_class`` proposer that drafts a cached tool call's remaining tokens.

vLLM calls ``propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu, ...)`` once per
step with one row per running request. For a row whose response has cached entries, the text
the model wrote since the last call-start marker (``<tool_call>`` for hermes/ChatML) is
completed from the newest entry of that tool by the shared
:func:`spectool_serving.toolcalls.draft_cached_call` (nothing until the name is written);
the completion is tokenized and proposed, up to ``num_speculative_tokens`` per step. Rows
without a tool draft get the fallback's proposal (vLLM's n-gram proposer when
``SPECTOOL_VLLM_FALLBACK=ngram:N``) or none. vLLM's rejection sampler verifies every draft,
so outputs are those of plain decoding.

The proposer interface passes no request ids; the worker extension hands the proposer its
model runner once (:meth:`attach`), whose input batch maps rows to request ids.
"""

from __future__ import annotations

import copy
import logging
from collections import deque
from typing import Any

from spectool.settings import settings

from ..toolcalls import FORMATS, PromptFormat, draft_cached_call
from ._compat import response_id_of
from ._mirror import DraftMirror, ProposerCounters

__all__ = ["ToolCacheProposer"]

log = logging.getLogger("vllm.spectool")  # under "vllm": vLLM's handlers print it
_TAIL = 384  # output tokens decoded to find the open call (a call longer than this gets no draft)
_REJECTION_SAMPLES = 8


class ToolCacheProposer:
    """vLLM ``custom_class`` proposer (see module docs)."""

    def __init__(self, vllm_config: Any) -> None:
        spec = vllm_config.speculative_config
        self.k = int(spec.num_speculative_tokens)
        self.mirror = DraftMirror()
        self.counters = ProposerCounters()
        self.fmt: PromptFormat = FORMATS[settings().vllm_format]
        self._runner: Any = None
        self._last: dict[str, tuple[str, list[int]]] = {}  # req id -> (kind, tokens proposed last step)
        #: The last few tool drafts the model did not take in full, as text (drafted vs written):
        #: why O2 acceptance is below 100 % is read here (``/spectool/stats``), not guessed.
        self.counters.extra["tool_rejections"] = deque(maxlen=_REJECTION_SAMPLES)
        self._tokenizer = _load_tokenizer(vllm_config)
        self._fallback = _make_fallback(vllm_config, settings().vllm_fallback)

    # -- wiring -----------------------------------------------------------------------------
    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """Called by the model runner; the proposer has no model of its own."""

    def attach(self, runner: Any, format_name: str | None = None) -> None:
        self._runner = runner
        if format_name:
            self.fmt = FORMATS[format_name]

    # -- the step ----------------------------------------------------------------------------
    def propose(
        self, sampled_token_ids: list[list[int]], num_tokens_no_spec: Any, token_ids_cpu: Any, **kwargs: Any
    ) -> list[list[int]]:
        n = len(sampled_token_ids)
        drafts: list[list[int]] = [[] for _ in range(n)]
        if self._fallback is None and not self._last and self.mirror.empty():
            return drafts  # nothing cached anywhere, no draft to score: no per-row work
        req_ids = self._req_ids(n)
        self._count_accepted(req_ids, sampled_token_ids)
        kinds: list[str] = [""] * n
        for i in range(n):
            if req_ids is None or not sampled_token_ids[i]:
                continue
            try:
                draft = self._tool_draft(i, req_ids[i], num_tokens_no_spec, token_ids_cpu)
            except Exception:  # a drafting bug must never break decoding
                log.exception("spectool: tool draft failed; proposing nothing for this row")
                draft = []
            if draft:
                drafts[i], kinds[i] = draft, "tool"
        if self._fallback is not None:
            try:
                more = self._fallback.propose(self.k, sampled_token_ids, num_tokens_no_spec, token_ids_cpu)
                for i in range(n):
                    if not drafts[i] and more[i]:
                        drafts[i], kinds[i] = list(more[i]), "text"
            except Exception:
                log.exception("spectool: fallback proposer failed; disabled")
                self._fallback = None
        self._record(req_ids, drafts, kinds)
        return drafts

    def _req_ids(self, n: int) -> list[str] | None:
        batch = getattr(self._runner, "input_batch", None)
        ids = list(batch.req_ids) if batch is not None else []
        return ids if len(ids) == n else None

    def _tool_draft(self, i: int, req_id: str, num_tokens_no_spec: Any, token_ids: Any) -> list[int]:
        entries = self.mirror.entries(response_id_of(req_id))
        if not entries:
            return []
        end = int(num_tokens_no_spec[i])
        start = max(int(self._runner.input_batch.num_prompt_tokens[i]), end - _TAIL)
        text = self._tokenizer.decode(token_ids[i, start:end].tolist())
        at = text.rfind(self.fmt.call_start)
        if at < 0 or (
            self.fmt.start_only_at_message_start
            and start != int(self._runner.input_batch.num_prompt_tokens[i])
        ):
            return []
        rest = draft_cached_call(self.fmt, text[at + len(self.fmt.call_start) :], entries)
        if not rest:
            return []
        return list(self._tokenizer.encode(rest, add_special_tokens=False))[: self.k]

    # -- acceptance, tool drafts apart from text drafts --------------------------------------
    def _count_accepted(self, req_ids: list[str] | None, sampled: list[list[int]]) -> None:
        if req_ids is None:
            return
        for rid, toks in zip(req_ids, sampled):
            last = self._last.pop(rid, None)
            if last is None or not toks:
                continue
            kind, draft = last
            accepted = min(len(draft), len(toks) - 1)
            self.counters.add(kind, accepted=accepted)
            if kind == "tool" and accepted < len(draft):
                self._sample_rejection(rid, draft, toks)

    def _sample_rejection(self, req_id: str, draft: list[int], sampled: list[int]) -> None:
        try:
            scope = self.mirror.scope_of(response_id_of(req_id))
            self.counters.extra["tool_rejections"].append(
                (
                    scope[0] if scope else None,  # shown only to this tenant (/spectool/stats)
                    {"drafted": self._tokenizer.decode(draft), "wrote": self._tokenizer.decode(sampled)},
                )
            )
        except Exception:  # diagnostics only: never break decoding
            log.debug("spectool: could not record a rejected draft", exc_info=True)

    def _record(self, req_ids: list[str] | None, drafts: list[list[int]], kinds: list[str]) -> None:
        if req_ids is None:
            return
        for rid, d, kind in zip(req_ids, drafts, kinds):
            if d:
                self._last[rid] = (kind, list(d))
                self.counters.add(kind, drafts=1, proposed=len(d))


def _load_tokenizer(vllm_config: Any) -> Any:
    from transformers import AutoTokenizer

    mc = vllm_config.model_config
    return AutoTokenizer.from_pretrained(mc.tokenizer, revision=getattr(mc, "tokenizer_revision", None))


def _make_fallback(vllm_config: Any, spec: str) -> Any:
    """``ngram:N`` -> vLLM's own n-gram proposer (lookup length N) for rows with no tool draft."""
    if not spec:
        return None
    kind, _, n = spec.partition(":")
    if kind != "ngram":
        raise ValueError(f"SPECTOOL_VLLM_FALLBACK must be 'ngram:N', got {spec!r}")
    from vllm.v1.spec_decode.ngram_proposer import NgramProposer

    cfg = copy.copy(vllm_config)
    cfg.speculative_config = copy.copy(vllm_config.speculative_config)
    cfg.speculative_config.prompt_lookup_min = cfg.speculative_config.prompt_lookup_max = int(n or 3)
    return NgramProposer(cfg)
