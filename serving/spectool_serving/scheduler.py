"""Continuous batching: who runs this step.

Sequences join the running batch at step boundaries (after their prefill) and leave when they
finish. Admission is bounded by a batch size and a KV budget in token slots (rows x width of
the batched cache). Under memory pressure the newest running sequence is preempted: its KV is
dropped and it goes back to the front of the queue to be prefilled again later — the normal
path, never an error (hard pins deadlock engines).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .sequence import Sequence, Status

__all__ = ["Scheduler"]


@dataclass
class Scheduler:
    max_batch: int = 16
    max_slots: int = 65536  # KV budget in token slots
    prefills_per_step: int = 1  # a long prompt must not stall everyone's decode for long

    def __post_init__(self) -> None:
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def admit(self, width: int) -> list[Sequence]:
        """Waiting sequences that fit now (they must be prefilled before they decode)."""
        admitted: list[Sequence] = []
        while self.waiting and len(admitted) < self.prefills_per_step and len(self.running) < self.max_batch:
            seq = self.waiting[0]
            rows = len(self.running) + 1
            need = rows * max(width, len(seq.tokens) + 1)
            if self.running and need > self.max_slots:
                break
            self.waiting.popleft()
            seq.status = Status.RUNNING
            self.running.append(seq)
            admitted.append(seq)
        return admitted

    def preempt(self, slots_after_step: int, width_after_step: int) -> list[Sequence]:
        """Running sequences to evict so the next step fits the budget (newest first)."""
        evicted: list[Sequence] = []
        rows = len(self.running)
        while rows > 1 and slots_after_step > self.max_slots:
            seq = self.running.pop()
            seq.status = Status.WAITING
            self.waiting.appendleft(seq)
            evicted.append(seq)
            rows -= 1
            slots_after_step = rows * width_after_step
        return evicted

    def finish(self, seq: Sequence) -> None:
        seq.status = Status.FINISHED
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
