"""The time-saved confidence interval: a paired percentile bootstrap over tasks (pure math)."""

from __future__ import annotations

import itertools
import random

import pytest

from spectool_bench.report._ci import bootstrap_saved_ci, saved_pct
from spectool_bench.report._section import tasks_for_half_width


def test_saved_pct_weights_tasks_by_their_baseline_time():
    assert saved_pct([10.0, 30.0], [5.0, 30.0]) == pytest.approx(12.5)  # 5 s of 40 s
    assert saved_pct([], []) == 0.0


def test_a_constant_saving_has_a_zero_width_interval():
    base = [random.Random(1).uniform(1, 5) for _ in range(12)]
    assert bootstrap_saved_ci(base, [0.8 * b for b in base]) == pytest.approx((20.0, 20.0))


def test_the_interval_matches_the_exact_bootstrap_distribution():
    """Three tasks: all 27 resamples are equally likely; the percentiles of many draws must
    approach the exact ones (computed by enumeration), and contain the point estimate."""
    base, spec = [10.0, 10.0, 10.0], [9.0, 7.0, 10.0]
    exact = sorted(
        saved_pct([base[i] for i in idx], [spec[i] for i in idx])
        for idx in itertools.product(range(3), repeat=3)
    )
    lo, hi = bootstrap_saved_ci(base, spec, resamples=20000, seed=3)
    # exact 2.5th/97.5th percentiles of the 27-point distribution
    assert lo == pytest.approx(exact[0], abs=1e-9) or lo == pytest.approx(exact[1], abs=1e-9)
    assert hi == pytest.approx(exact[-1], abs=1e-9) or hi == pytest.approx(exact[-2], abs=1e-9)
    assert lo < saved_pct(base, spec) < hi


def test_more_tasks_narrow_the_interval_and_the_pairing_matters():
    rng = random.Random(7)
    base = [rng.uniform(2, 6) for _ in range(400)]
    spec = [b * rng.uniform(0.7, 1.0) for b in base]
    narrow = bootstrap_saved_ci(base, spec)
    wide = bootstrap_saved_ci(base[:20], spec[:20])
    assert narrow[1] - narrow[0] < wide[1] - wide[0]
    # shuffling spec against base breaks the pairs: the interval must widen
    shuffled = spec[:]
    rng.shuffle(shuffled)
    broken = bootstrap_saved_ci(base, shuffled)
    assert broken[1] - broken[0] > narrow[1] - narrow[0]


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="paired"):
        bootstrap_saved_ci([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="level"):
        bootstrap_saved_ci([1.0], [1.0], level=1.5)


def test_tasks_needed_for_a_three_point_half_width_scales_with_the_square():
    assert tasks_for_half_width(10, 6.0) == 40
    assert tasks_for_half_width(10, 2.0) == 10


def test_a_row_resamples_distinct_tasks_and_needs_two_of_them():
    """An assignment that wraps around runs a task twice: it is one unit, not two."""
    from spectool_bench.harness._agents import AgentResult
    from spectool_bench.harness._metrics import _ci, per_task, run_row

    def agent(walls, ids):
        return AgentResult(agent=0, wall_s=sum(walls), task_walls=walls, task_ids=ids)

    base = [agent([4.0, 2.0, 4.0, 2.0], ["a", "b", "a", "b"])]
    spec = [agent([3.0, 2.0, 3.0, 2.0], ["a", "b", "a", "b"])]
    assert per_task(base) == {"a": 8.0, "b": 4.0}
    row = run_row({"config": "client"}, base, spec, truth=base)
    assert row["tasks_n"] == 2 and row["time_saved_ci95"] == _ci(base, spec)
    lo, hi = row["time_saved_ci95"]
    assert lo == pytest.approx(0.0) and hi == pytest.approx(25.0)  # resamples: {b,b} … {a,a}
    one = [agent([4.0], ["a"])]
    assert _ci(one, [agent([3.0], ["a"])]) is None
