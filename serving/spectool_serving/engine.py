"""The engine: ``step()`` = schedule -> run -> accept -> emit, plus the thread that drives it.

One step admits and prefills newly arrived sequences (each alone, then joined to the batch),
then runs ONE batched forward for every running sequence: each row feeds its pending tokens
(one sampled token, or an O3 tool-result append) plus any O2 draft, and the verifier keeps the
accepted prefix. The HTTP layer talks to :meth:`Engine.submit`, which returns an async
iterator of events; the model runs on the engine's own thread so the event loop stays free.
"""

from __future__ import annotations

import asyncio
import atexit
import threading
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from typing import Any

import torch

from .grammar import CallGrammar
from .kv import BatchKV
from .memory import HeapTrimmer
from .prompts import TokenMemo
from .rounds import RoundContext, advance, begin_round, enter_call_if_started, propose_draft
from .runner import Runner
from .sampling import probs_from_logits
from .scheduler import Scheduler
from .sequence import Phase, Sequence
from .store import ToolOutputStore
from .toolcalls import PromptFormat
from .tree.accept import greedy_tree_accept
from .verify import accept_greedy, accept_sampled

__all__ = ["Engine", "EngineStats"]

#: Engines whose thread runs. At exit each is stopped and joined: a daemon thread killed in
#: the middle of a step (a forward on torch's thread pool) aborted the interpreter with
#: "terminate called without an active exception" (rc 134) when a script ended right after a
#: response finished, its step still running.
_RUNNING: weakref.WeakSet[Engine] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for engine in list(_RUNNING):
        engine.stop()


@dataclass
class EngineStats:
    """Counters (monotonic). ``reprefilled_tokens``: prompt tokens that repeat a finished
    request's prompt and output (the history a client re-sends after a tool call)."""

    requests: int = 0
    prefill_tokens: int = 0
    reprefilled_tokens: int = 0
    decode_steps: int = 0
    decode_rows: int = 0
    generated_tokens: int = 0
    left_batch: int = 0
    preemptions: int = 0
    o2_drafted: int = 0
    o2_accepted: int = 0
    o3_hits: int = 0
    o3_misses: int = 0
    appended_tokens: int = 0
    #: requests ended with an error event (their own prefill failed, or a batched step did)
    failed_requests: int = 0


class Engine:
    def __init__(
        self,
        runner: Runner,
        tokenizer: Any,
        fmt: PromptFormat,
        *,
        store: ToolOutputStore | None = None,
        scheduler: Scheduler | None = None,
        model_name: str = "model",
        decoding: Any = None,
    ) -> None:
        self.runner, self.tokenizer, self.fmt, self.model_name = runner, tokenizer, fmt, model_name
        self.decoding = decoding  # tree.policy.DecodingPolicy for ordinary text, or None
        self.store = store
        self.scheduler = scheduler or Scheduler()
        self.kv = BatchKV()
        self.stats = EngineStats()
        self.memo = TokenMemo()
        eos = tokenizer.convert_tokens_to_ids(fmt.eos)
        self.eos_id = eos if isinstance(eos, int) and eos >= 0 else tokenizer.eos_token_id
        vocab = runner.model.config.vocab_size
        self.ctx = RoundContext(
            tokenizer, self.eos_id, CallGrammar(tokenizer, vocab, self.eos_id), store, self.memo, self.stats
        )
        self._recent: deque[tuple[tuple[int, ...], int]] = deque(maxlen=64)
        self._inbox: deque[Sequence] = deque()
        self._cancelled: set[str] = set()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stop = False
        self.error: BaseException | None = None
        self._heap = HeapTrimmer()

    # -- one step ---------------------------------------------------------------------------------
    def step(self) -> None:
        self._drain_inbox()
        for seq in self.scheduler.admit(self.kv.width):
            try:
                self._prefill(seq)
            except Exception as exc:  # this request's own prompt broke: fail it, not the batch
                self._fail(seq, exc)
                continue
            if seq.finish_reason is not None:  # done on its first token (EOS, max_tokens=1)
                self._retire(seq)
        batch = [s for s in self.scheduler.running if s.n_cached > 0]
        if batch:
            self._decode(batch)

    def _drain_inbox(self) -> None:
        with self._wake:
            while self._inbox:
                self.scheduler.add(self._inbox.popleft())
            cancelled, self._cancelled = self._cancelled, set()
        for seq in [*self.scheduler.running, *self.scheduler.waiting]:
            if seq.response_id in cancelled:
                seq.finish_reason = "cancelled"
                self._retire(seq)

    def _prefill(self, seq: Sequence) -> None:
        self.stats.prefill_tokens += len(seq.tokens)
        self.stats.reprefilled_tokens += self._history_overlap(seq.tokens)
        logits, cache = self.runner.prefill(seq.tokens)
        self.kv.join(seq.seq_id, cache)
        seq.n_cached = len(seq.tokens)
        self._accept(seq, logits[None], [])

    def _history_overlap(self, tokens: list[int]) -> int:
        best = 0
        for old, prompt_len in self._recent:
            if len(tokens) > prompt_len and tuple(tokens[:prompt_len]) == old[:prompt_len]:
                n = prompt_len
                while n < min(len(old), len(tokens)) and old[n] == tokens[n]:
                    n += 1
                best = max(best, n)
        return best

    def _decode(self, batch: list[Sequence]) -> None:
        by_id = {s.seq_id: s for s in batch}
        drafts = {s.seq_id: propose_draft(s, self.ctx) for s in batch}
        text = {
            i
            for i, d in drafts.items()
            if not d and self.decoding is not None and by_id[i].phase is Phase.TEXT and by_id[i].pending
        }
        trees = self._text_drafts([by_id[i] for i in text], drafts, len(batch))
        rows = [by_id[i] for i in self.kv.rows]
        counts = [len(s.pending) + len(drafts[s.seq_id]) for s in rows]
        g = max(counts)
        evicted = self.scheduler.preempt(len(rows) * (self.kv.width + g), self.kv.width + g)
        if evicted:
            for seq in evicted:
                self._evict(seq)
            return self._decode([s for s in batch if s not in evicted])
        ids = torch.zeros(len(rows), g, dtype=torch.long)
        for b, s in enumerate(rows):
            ids[b, : counts[b]] = torch.tensor(s.pending + drafts[s.seq_id])
        parents = [trees[s.seq_id].parents if s.seq_id in trees else None for s in rows]
        positions, mask = self.kv.step_inputs(counts, self.runner.dtype, parents)
        t_fwd = time.perf_counter()
        logits = self.runner.forward(ids, positions, mask, self.kv.cache)
        t_fwd = time.perf_counter() - t_fwd
        self.stats.decode_steps += 1
        self.stats.decode_rows += len(rows)
        kept = []
        for b, s in enumerate(rows):
            if s.seq_id in trees:
                kept.append(self._accept_tree(s, trees[s.seq_id], logits[b], t_fwd))
                continue
            p, draft = len(s.pending), drafts[s.seq_id]
            fed = [s.tokens[s.n_cached + p - 1], *draft]  # root (last pending) + draft
            n_acc = self._accept(
                s, logits[b, p - 1 : p + len(draft)], draft, pending=p, o2=s.seq_id not in text
            )
            kept.append(list(range(p + n_acc)))
            if s.seq_id in text:
                self.decoding.observe(s.seq_id, fed, logits[b, p - 1 : p + len(draft)], n_acc, t_fwd)
        self.kv.commit(kept, g)
        for s in rows:
            if s.finish_reason is not None:
                self._retire(s)

    def _text_drafts(self, seqs: list[Sequence], drafts: dict[int, list[int]], batch: int) -> dict[int, Any]:
        """Text drafts for rows O2 left without one (filled into ``drafts``): a tree rooted at
        the pending token for greedy rows, the best chain otherwise. Returns the trees by
        sequence id, cut to the one width that pays for the whole step."""
        trees = {}
        for seq in seqs:
            i = seq.seq_id
            if seq.params.greedy and len(seq.pending) == 1:
                tree = self.decoding.draft_tree(i, seq.tokens, batch)
                if tree is not None and len(tree) > 1:
                    trees[i] = tree
            else:
                drafts[i] = self.decoding.draft(i, seq.tokens, batch)
        fitted = self.decoding.fit_batch(list(trees.values())) if trees else []
        for i, tree in zip(list(trees), fitted):
            drafts[i] = tree.tokens[1:]
            if len(tree) > 1:
                trees[i] = tree
            else:  # plain decoding for this row serves the batch better
                del trees[i]
        return trees

    def _accept(
        self, seq: Sequence, logits: torch.Tensor, draft: list[int], pending: int = 0, o2: bool = True
    ) -> int:
        """Verify ``draft`` against logits [d+1, V], advance the sequence; returns #accepted.
        ``o2=False`` for text drafts, which the decoding policy counts instead."""
        logits = logits.cpu()  # the d+1 rows sampling reads; the rest stays on the device
        if seq.phase is Phase.CALL:
            allowed, k = self.ctx.grammar.masks(seq.matcher, draft)
            draft, logits = draft[:k], logits[: k + 1].masked_fill(~allowed, float("-inf"))
        if seq.params.greedy:
            n_acc, nxt = accept_greedy(logits, draft)
        else:
            probs = probs_from_logits(logits, seq.params.temperature, seq.params.top_p)
            n_acc, nxt = accept_sampled(probs, draft, seq.generator)
        if o2:
            self.stats.o2_drafted += len(draft)
            self.stats.o2_accepted += n_acc
        seq.n_cached += pending  # pending tokens are in the KV now (prefill set it already)
        for tok in [*draft[:n_acc], nxt]:
            self.stats.generated_tokens += 1
            if not advance(seq, tok, self.ctx):
                seq.n_cached = min(seq.n_cached + n_acc, len(seq.tokens))
                return n_acc
        seq.n_cached += n_acc
        return n_acc

    def _accept_tree(self, seq: Sequence, tree: Any, logits: torch.Tensor, t_fwd: float) -> list[int]:
        """Greedy tree row: follow the argmax path, then advance along it like a chain draft
        (stops and limits apply token by token). Returns the new slots to keep."""
        path, _ = greedy_tree_accept(tree.parents, tree.tokens, logits[: len(tree)].argmax(-1).tolist())
        n_acc = self._accept(seq, logits[path], [tree.tokens[i] for i in path[1:]], pending=1, o2=False)
        self.decoding.observe_tree(seq.seq_id, tree, logits[: len(tree)], path, t_fwd)
        return path[: 1 + n_acc]

    def _evict(self, seq: Sequence) -> None:
        self.kv.leave({seq.seq_id})
        self.stats.preemptions += 1
        self.stats.left_batch += 1
        self._recent.append((tuple(seq.tokens), seq.prompt_len))
        seq.n_cached = 0

    def _fail(self, seq: Sequence, exc: BaseException) -> None:
        """End one sequence with an error event; the others keep their rows and go on."""
        if seq.seq_id in self.kv.rows:
            self.kv.leave({seq.seq_id})
        self.scheduler.finish(seq)
        if self.decoding is not None:
            self.decoding.forget(seq.seq_id)
        self.stats.failed_requests += 1
        seq.emit({"type": "error", "message": f"engine failure: {exc!r}"})

    def _retire(self, seq: Sequence) -> None:
        if seq.seq_id in self.kv.rows:
            self.kv.leave({seq.seq_id})
            self.stats.left_batch += 1
        self.scheduler.finish(seq)
        if self.decoding is not None:
            self.decoding.forget(seq.seq_id)
        self._recent.append((tuple(seq.tokens), seq.prompt_len))
        seq.emit(
            {
                "type": "finish",
                "reason": seq.finish_reason,
                "content": seq.content,
                "tool_call": seq.final_call,
                "resolved": list(seq.resolved),
                "usage": {"prompt_tokens": seq.prompt_len + seq.appended, "completion_tokens": seq.generated},
            }
        )

    # -- the thread and the async bridge ------------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        """Queue a sequence (any thread). Its first round starts here."""
        begin_round(seq)
        if seq.forced_ids:
            enter_call_if_started(seq, self.ctx, self.tokenizer.decode(seq.forced_ids))
        with self._wake:
            self.stats.requests += 1
            self._inbox.append(seq)
            self._wake.notify()

    def cancel(self, response_id: str) -> None:
        with self._wake:
            self._cancelled.add(response_id)
            self._wake.notify()

    def run_until_idle(self) -> None:
        """Drive steps on the calling thread until nothing is queued or running (tests)."""
        self._drain_inbox()
        while self.scheduler.has_work() or self._inbox:
            self.step()

    def start(self) -> None:
        if self._thread is None:
            self._stop = False
            self._thread = threading.Thread(target=self._loop, name="spectool-engine", daemon=True)
            self._thread.start()
            _RUNNING.add(self)

    def stop(self) -> None:
        with self._wake:
            self._stop = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        _RUNNING.discard(self)

    def _loop(self) -> None:
        while True:
            with self._wake:
                while (
                    not self._stop
                    and not self._inbox
                    and not self._cancelled
                    and not self.scheduler.has_work()
                ):
                    self._wake.wait()
                if self._stop:
                    return
            try:
                self.step()
                self._heap.maybe_trim()
            except BaseException as exc:  # a broken step must fail the requests, not hang them
                self.error = exc
                # a batched forward cannot say whose row broke it: fail the batch, keep serving
                for seq in [*self.scheduler.running, *self.scheduler.waiting]:
                    self.stats.failed_requests += 1
                    self.scheduler.finish(seq)
                    try:
                        seq.emit({"type": "error", "message": f"engine failure: {exc!r}"})
                    except Exception:  # noqa: BLE001 - a listener that is gone must not kill the loop
                        pass
                self.kv = BatchKV()

    async def stream(self, seqs: list[Sequence]) -> AsyncIterator[tuple[int, dict]]:
        """Queue sequences whose ``emit`` is unset and yield ``(choice index, event)`` until
        each has finished."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        for s in seqs:
            s.emit = _emitter(loop, queue, s.index)
        for s in seqs:
            self.add(s)
        open_ = len(seqs)
        while open_:
            index, event = await queue.get()
            if event["type"] in ("finish", "error"):
                open_ -= 1
            yield index, event

    def counters(self) -> dict[str, int]:
        return asdict(self.stats)


def _emitter(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue, index: int):
    """``emit`` for one sequence: hands events to the request's event loop. If that loop has
    closed (the HTTP server was stopped under a running request), nobody listens any more:
    the event is dropped instead of raising in the engine thread, which serves everyone."""

    def emit(event: dict) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, (index, event))
        except RuntimeError:  # "Event loop is closed"
            pass

    return emit
