"""The analysis the effect table of :mod:`._effects` is declared from: every ground-truth call
of the multi-turn categories run on fresh instances, the owning instance's state compared before
and after (``tests/bench/test_bench_bfcl.py`` checks the table against it).

    python -m spectool_bench.bfcl._measure_effects
"""

from __future__ import annotations

from collections import defaultdict

from ._effects import effect_of, snapshot
from ._executable import STATELESS, Environment
from ._tasks import MULTI_TURN_CATEGORIES, load_tasks

__all__ = ["measure_effects"]


def measure_effects(categories: tuple[str, ...] = MULTI_TURN_CATEGORIES) -> dict[str, dict[str, list[int]]]:
    """class -> method -> [calls, calls that changed state], over all ground-truth calls."""
    seen: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for category in categories:
        for task in load_tasks(category):
            env = Environment(list(task.classes), task.initial_config, task.long_context)
            for turn in task.ground_truth:
                for call in turn:
                    cls = env.owner(call.name)
                    before = snapshot(env.instances[cls])
                    env.call(call)
                    counts = seen[cls][call.name]
                    counts[0] += 1
                    counts[1] += snapshot(env.instances[cls]) != before
    return {c: dict(m) for c, m in seen.items()}


def _main() -> None:
    measured = measure_effects()
    for cls in sorted(measured):
        for method, (calls, mutated) in sorted(measured[cls].items()):
            kind = "pure (stateless)" if cls in STATELESS else ("mutating" if mutated else "read_only")
            print(
                f"{cls:18} {method:40} calls={calls:4d} mutated={mutated:4d} -> {kind:18} "
                f"declared={effect_of(cls, method).value}"
            )


if __name__ == "__main__":
    _main()
