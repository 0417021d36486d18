"""The ORACLE drafter: knows the ground truth; hits with probability α after a delay g.

For validating the performance model only — it reads the answers, so every output that used it
says ``drafter: "oracle(α=…, g=…)"``. Whether a turn is a hit is drawn from a generator seeded
by (seed, task, step), so paired and repeated runs see the same hits. On a miss it proposes,
with ``miss="wrong"``, a call of the same tool with altered arguments (a wasted speculative run
if the tool is speculable), or nothing with ``miss="none"``.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence

import anyio

from spectool import DraftRequest, ToolCall
from spectool.errors import ConfigError

from ..bfcl._tasks import Task
from ._replay import ReplayModel, next_step

__all__ = ["OracleDrafter"]


class OracleDrafter:
    """A :class:`spectool.Drafter` that returns the ground-truth next call (labelled oracle)."""

    def __init__(
        self, tasks: Sequence[Task], alpha: float, delay: float = 0.0, seed: int = 0, miss: str = "wrong"
    ) -> None:
        if not 0.0 <= alpha <= 1.0:
            raise ConfigError(f"oracle alpha must be in [0, 1], got {alpha}")
        if delay < 0 or miss not in ("wrong", "none"):
            raise ConfigError("oracle delay must be ≥ 0 and miss 'wrong' or 'none'")
        self.alpha, self.delay, self.seed, self.miss = alpha, delay, seed, miss
        self._index = ReplayModel(tasks)  # only for its conversation → task lookup
        self.calls = 0

    @property
    def label(self) -> str:
        return f"oracle(α={self.alpha:g}, g={self.delay:g}s)"

    def hit(self, task_id: str, step: int) -> bool:
        digest = hashlib.sha256(f"{self.seed}\x00{task_id}\x00{step}".encode()).digest()
        return random.Random(int.from_bytes(digest[:8], "big")).random() < self.alpha

    async def propose(self, request: DraftRequest) -> list[ToolCall]:
        self.calls += 1
        await anyio.sleep(self.delay)
        task = self._index.task_for(request.messages)
        nxt = next_step(task, request.messages)
        if not isinstance(nxt, list):
            return []
        step = sum(1 for m in request.messages if m.get("role") == "assistant")
        if self.hit(task.id, step):
            return list(nxt)
        if self.miss == "none":
            return []
        out = []
        for c in nxt:
            wrong = {k: (f"{v}_x" if isinstance(v, str) else v) for k, v in c.arguments.items()}
            wrong["__oracle_miss__"] = step  # guarantees a different key even without string args
            out.append(ToolCall(c.name, wrong))
        return out
