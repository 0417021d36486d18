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
import contextlib
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
from .plan import Accepted, Kind, RowPlan, StepPlan, choose, verify
from .prompts import TokenMemo
from .rounds import RoundContext, advance, begin_round, propose_draft
from .runner import Runner
from .scheduler import Scheduler
from .sequence import Error, Event, Finish, Phase, RoundEvent, Sequence
from .store import ToolOutputStore
from .toolcalls import PromptFormat

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

    def count(self, seq: Sequence, kept: int, accepted: Accepted | None = None) -> None:
        """A sequence advanced by ``kept`` tokens (of ``accepted``, a verified row; None after
        a prefill), and the round events it recorded meanwhile. Text drafts (chains and trees)
        are the decoding policy's to count."""
        self.generated_tokens += kept
        if accepted is not None and accepted.kind is Kind.O2:
            self.o2_drafted += accepted.drafted
            self.o2_accepted += accepted.n_draft
        for event, n in seq.round_events:
            if event is RoundEvent.O3_HIT:
                self.o3_hits += 1
                self.appended_tokens += n
            else:
                self.o3_misses += 1
        seq.round_events.clear()


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
        grammar = CallGrammar(tokenizer, vocab, self.eos_id)
        self.ctx = RoundContext(tokenizer, self.eos_id, grammar, store, self.memo)
        self._recent: deque[tuple[tuple[int, ...], int]] = deque(maxlen=64)
        self._inbox: deque[Sequence] = deque()
        self._cancelled: set[str] = set()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stop = False
        self.error: BaseException | None = None
        self._heap = HeapTrimmer()

    # -- one step: schedule -> plan -> run -> postprocess --------------------------------------
    def step(self) -> None:
        self._drain_inbox()
        self._admit()
        batch = self._schedule()
        if not batch:
            return
        t_step = time.perf_counter()
        plan = self._plan(batch)
        logits, t_fwd = self._run(plan)
        self._postprocess(plan, logits, t_fwd, t_step)

    def _admit(self) -> None:
        for seq in self.scheduler.admit(self.kv.width):
            try:
                self._prefill(seq)
            except Exception as exc:  # this request's own prompt broke: fail it, not the batch
                self._fail(seq, exc)
                continue
            if seq.finish_reason is not None:  # done on its first token (EOS, max_tokens=1)
                self._retire(seq)

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
        keep = min(self.decoding.warm_rows, len(seq.tokens)) if self.decoding is not None else 1
        logits, cache = self.runner.prefill(seq.tokens, keep=keep)
        if keep > 1:  # the prompt's last positions seed the decoding policy's store
            self.decoding.warm(seq.tokens, logits)
            logits = logits[-1]
        self.kv.join(seq.seq_id, cache)
        seq.n_cached = len(seq.tokens)
        _, nxt, _ = choose(seq, logits[None], [], self.ctx.grammar)
        self.stats.count(seq, advance(seq, [nxt], self.ctx))

    def _history_overlap(self, tokens: list[int]) -> int:
        best = 0
        for old, prompt_len in self._recent:
            if len(tokens) > prompt_len and tuple(tokens[:prompt_len]) == old[:prompt_len]:
                n = prompt_len
                while n < min(len(old), len(tokens)) and old[n] == tokens[n]:
                    n += 1
                best = max(best, n)
        return best

    def _schedule(self) -> list[Sequence]:
        """The rows that decode this step. Preemption is decided here, on the tokens each row
        must feed, before anything is drafted: drafts are then cut to the room left."""
        batch = [s for s in self.scheduler.running if s.n_cached > 0]
        if not batch:
            return []
        need = self.kv.width + max(len(s.pending) for s in batch)
        for seq in self.scheduler.preempt(len(batch) * need, need):
            self._evict(seq)
        return [s for s in self.scheduler.running if s.n_cached > 0]

    def _plan(self, batch: list[Sequence]) -> StepPlan:
        """Drafts for the scheduled rows, each within the budget's room: O2 first (a cached
        call being written), then the decoding policy for text rows."""
        room = self.scheduler.max_slots // len(batch) - self.kv.width  # step width that fits
        by_id = {s.seq_id: s for s in batch}
        rows = [RowPlan(by_id[i] if i is not None else None) for i in self.kv.rows]
        text = []
        for row in rows:
            seq = row.seq
            if seq is None:
                continue
            row.draft = propose_draft(seq, self.ctx, room - len(seq.pending))
            if row.draft:
                row.kind = Kind.O2
            elif self.decoding is not None and seq.phase is Phase.TEXT and seq.pending:
                row.kind = Kind.TEXT  # the policy drafts it (maybe nothing) and learns from it
                text.append(row)
        if text and self.decoding.should_draft():
            self._text_drafts(text, len(batch), room)
        return StepPlan(rows)

    def _text_drafts(self, rows: list[RowPlan], batch: int, room: int) -> None:
        """Text drafts: a tree rooted at the pending token for greedy rows, the best chain
        otherwise; the trees cut to the one width that pays for the whole step."""
        trees = []
        for row in rows:
            seq = row.seq
            assert seq is not None
            if seq.params.greedy and len(seq.pending) == 1:
                tree = self.decoding.draft_tree(seq.seq_id, seq.tokens, batch)
                if tree is not None and len(tree) > 1:
                    trees.append((row, tree.top(room)))
            else:
                row.draft = self.decoding.draft(seq.seq_id, seq.tokens, batch)[: room - len(seq.pending)]
        fitted = self.decoding.fit_batch([t for _, t in trees]) if trees else []
        for (row, _), tree in zip(trees, fitted):
            if len(tree) > 1:  # else plain decoding for this row serves the batch better
                row.tree, row.draft, row.kind = tree, tree.tokens[1:], Kind.TREE

    def _run(self, plan: StepPlan) -> tuple[torch.Tensor, float]:
        """The step's one forward: logits [B, G, V] on the model's device, and its time."""
        parents = [r.parents for r in plan.rows]
        positions, mask = self.kv.step_inputs(
            plan.counts, self.runner.dtype, parents, window=self.runner.window
        )
        t_fwd = time.perf_counter()
        logits = self.runner.forward(plan.input_ids(), positions, mask, self.kv.cache)
        self.stats.decode_steps += 1
        self.stats.decode_rows += sum(r.seq is not None for r in plan.rows)
        return logits, time.perf_counter() - t_fwd

    def _postprocess(self, plan: StepPlan, logits: torch.Tensor, t_fwd: float, t_step: float) -> None:
        """Verify every row, advance its sequence, keep the accepted slots, retire the done;
        the decoding policy learns from its text rows and from the step's wall time."""
        kept: list[list[int]] = []
        text_tokens = 0
        for b, row in enumerate(plan.rows):
            seq = row.seq
            if seq is None:
                kept.append([])
                continue
            p, root, prev = len(seq.pending), seq.pending[-1:], seq.tokens[-2]
            accepted = verify(row, logits[b], self.ctx.grammar)
            kept.append(self._apply(seq, accepted, p))
            if row.kind is Kind.TREE:
                tree = row.tree
                self.decoding.observe_tree(prev, tree, logits[b, : len(tree)], accepted.path, t_fwd)
            elif row.kind is Kind.TEXT:
                d = len(row.draft or ())
                fed = [*root, *(row.draft or ())]
                self.decoding.observe(prev, fed, logits[b, p - 1 : p + d], accepted.n_draft, t_fwd)
            text_tokens += len(accepted.tokens) if row.kind in (Kind.TREE, Kind.TEXT) else 0
        self.kv.commit(kept, plan.width)
        if self.decoding is not None:
            self.decoding.end_step(text_tokens, time.perf_counter() - t_step, t_fwd)
        for row in plan.rows:
            if row.seq is not None and row.seq.finish_reason is not None:
                self._retire(row.seq)

    def _apply(self, seq: Sequence, accepted: Accepted, pending: int) -> list[int]:
        """Advance ``seq`` by the accepted tokens; returns the new KV slots to keep (the
        pending tokens and the accepted draft tokens the sequence kept)."""
        kept = advance(seq, accepted.tokens, self.ctx)
        self.stats.count(seq, kept, accepted)
        cached = min(accepted.n_draft, kept)  # the bonus token has no KV yet
        seq.n_cached = min(seq.n_cached + pending + cached, len(seq.tokens))
        return accepted.path[: 1 + cached] if accepted.path is not None else list(range(pending + cached))

    def _evict(self, seq: Sequence) -> None:
        self.kv.leave({seq.seq_id})
        self.stats.preemptions += 1
        self.stats.left_batch += 1
        self._recent.append((tuple(seq.tokens), seq.prompt_len))
        seq.n_cached = 0

    def _release(self, seq: Sequence) -> bool:
        """Take ``seq`` out of the batch, the scheduler and the decoding policy; True when it
        held a row of the batch."""
        held = seq.seq_id in self.kv.rows
        if held:
            self.kv.leave({seq.seq_id})
        self.scheduler.finish(seq)
        if self.decoding is not None:
            self.decoding.forget(seq.seq_id)
        return held

    def _fail(self, seq: Sequence, exc: BaseException) -> None:
        """End one sequence with an error event; the others keep their rows and go on."""
        self._release(seq)
        self.stats.failed_requests += 1
        seq.emit(Error(f"engine failure: {exc!r}"))

    def _retire(self, seq: Sequence) -> None:
        if self._release(seq):
            self.stats.left_batch += 1
        self._recent.append((tuple(seq.tokens), seq.prompt_len))
        seq.emit(
            Finish(
                reason=seq.finish_reason,
                content=seq.content,
                tool_call=seq.final_call,
                resolved=list(seq.resolved),
                usage={"prompt_tokens": seq.prompt_len + seq.appended, "completion_tokens": seq.generated},
            )
        )

    # -- the thread and the async bridge ------------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        """Queue a sequence (any thread). Its first round starts here."""
        begin_round(seq, self.ctx)
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
        alive = False
        if self._thread is not None:
            self._thread.join(timeout=30)
            alive = self._thread.is_alive()
            self._thread = None
        _RUNNING.discard(self)
        if not alive:  # no step running: the captured graphs and their memory pool go
            self.runner.close()

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not (self._stop or self._inbox or self._cancelled or self.scheduler.has_work()):
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
                    with contextlib.suppress(Exception):  # a listener that is gone must not kill the loop
                        seq.emit(Error(f"engine failure: {exc!r}"))
                self.kv.reset()

    async def stream(self, seqs: list[Sequence]) -> AsyncIterator[tuple[int, Event]]:
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
            if isinstance(event, Finish | Error):
                open_ -= 1
            yield index, event

    def counters(self) -> dict[str, int]:
        return asdict(self.stats)

    def kv_memory(self) -> dict[str, int]:
        """The KV pool's bytes ``reserved`` and ``in_use`` (valid slots), and its shape
        (``rows`` x ``slots``): a gauge, read from any thread (a racy but harmless snapshot)."""
        return self.kv.memory()


def _emitter(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue, index: int):
    """``emit`` for one sequence: hands events to the request's event loop. If that loop has
    closed (the HTTP server was stopped under a running request), nobody listens any more:
    the event is dropped instead of raising in the engine thread, which serves everyone."""

    def emit(event: Event) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, (index, event))
        except RuntimeError:  # "Event loop is closed"
            pass

    return emit
