"""drafters eval runs the learning drafters and scores the second half of a stream."""

from __future__ import annotations

import anyio

from spectool.drafters import LearningDrafter
from spectool_bench.drafters._eval import evaluate, prepare, run_grid
from spectool_bench.drafters._specs import DRAFTERS


def test_second_half_drafts_for_every_task_and_scores_only_the_second_half():
    prepared = prepare("multi_turn_base", "test", 4)
    seen: list[int] = []

    class Counting(LearningDrafter):
        def predict(self, request):  # type: ignore[no-untyped-def]
            seen.append(len(request.messages))
            return super().predict(request)

    steps = [len(p.steps) for p in prepared]
    drafter = Counting()
    scores = anyio.run(evaluate, drafter, prepared, 1, None, 2)
    assert len(seen) == sum(steps)  # drafted for all four tasks: it learnt from the first two
    assert len(scores) == sum(steps[2:])  # scored on the last two only
    assert drafter.patterns.sessions >= 3
    whole = anyio.run(evaluate, LearningDrafter(), prepared, 1)  # the control: everything scored
    assert len(whole) == sum(steps)
    rows = anyio.run(
        run_grid, {"learning": DRAFTERS["learning"]}, ["multi_turn_base"], "test", [1], 4, False, True
    )
    assert rows[0]["n_tasks"] == 2 and rows[0]["split"] == "test (2nd half)"


def test_learning_specs_build_from_nothing_and_from_the_train_split():
    assert DRAFTERS["learning"]("multi_turn_base").patterns.sessions == 0
    assert DRAFTERS["learning+train"]("multi_turn_base").patterns.sessions > 0
