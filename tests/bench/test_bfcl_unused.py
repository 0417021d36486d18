"""BFCL's unused exec sets as extra training data: parsed from the wheel, training-only, and
never holding a twin of a dev or test task (issue 25, item 5)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from spectool.errors import ConfigError
from spectool_bench.bfcl._splits import in_split, touches_held_out
from spectool_bench.bfcl._tasks import ALL_CATEGORIES, load_tasks
from spectool_bench.bfcl._twins import trace_twins
from spectool_bench.bfcl._unused import UNUSED_CATEGORIES, load_unused, parse_exec_call, unused_split
from spectool_bench.workloads._catalog import is_known, split_tasks
from spectool_bench.workloads._traces import task_examples


def test_every_exec_set_loads_with_its_calls():
    sizes = {c: len(load_unused(c)) for c in UNUSED_CATEGORIES}
    assert sizes == {
        "exec_simple": 100,
        "exec_multiple": 50,
        "exec_parallel": 50,
        "exec_parallel_multiple": 40,
    }
    for c in UNUSED_CATEGORIES:
        for task in load_unused(c):
            offered = {t["function"]["name"] for t in task.tools}
            assert task.ground_truth[0] and {call.name for call in task.ground_truth[0]} <= offered
    parallel = load_unused("exec_parallel")
    assert max(len(t.ground_truth[0]) for t in parallel) >= 2


def test_exec_calls_parse_keywords_positions_and_arithmetic():
    call = parse_exec_call("calc(n=20, k=5, p=1/6)", {})
    assert call.name == "calc" and call.arguments == {"n": 20, "k": 5, "p": pytest.approx(1 / 6)}
    assert parse_exec_call("area([[1, 2]], 'cm')", {"area": ["vertices", "unit"]}).arguments == {
        "vertices": [[1, 2]],
        "unit": "cm",
    }
    for bad in (
        "os.system('x')",
        "f(x=__import__('os'))",
        "f(x='a' * 3)",
        "f(x={1, 2})",
        "not a call",
        "f(1)",
    ):
        with pytest.raises(ConfigError, match="cannot parse BFCL exec"):
            parse_exec_call(bad, {})


def test_exec_sets_are_training_data_only():
    assert all(is_known(c) for c in UNUSED_CATEGORIES)
    assert not set(UNUSED_CATEGORIES) & set(ALL_CATEGORIES)  # they never move a scored split
    for split in ("dev", "test"):
        with pytest.raises(ConfigError, match="training data only"):
            split_tasks("exec_simple", split)
    assert len(split_tasks("exec_simple", "all")) == 100
    assert split_tasks("exec_simple", "train") == unused_split("exec_simple", "train")


def test_a_twin_of_a_held_out_task_is_left_out_and_a_train_twin_is_kept():
    exec_task = load_unused("exec_simple")[0]
    assert not touches_held_out(exec_task)
    test_task = in_split(load_tasks("simple_python"), "test")[0]
    train_task = in_split(load_tasks("simple_python"), "train")[0]
    # the same opening question as a test task, under an exec id with exec tools and calls
    assert touches_held_out(replace(exec_task, turns=test_task.turns))
    # the same gold calls as a test task
    assert touches_held_out(replace(exec_task, ground_truth=test_task.ground_truth))
    assert not touches_held_out(replace(exec_task, turns=train_task.turns))


def test_no_exec_training_example_is_a_twin_of_any_test_task():
    held_out = [t for c in ALL_CATEGORIES for t in in_split(load_tasks(c), "test")]
    examples = [ex for c in UNUSED_CATEGORIES for t in split_tasks(c, "train") for ex in task_examples(t)]
    assert len(examples) >= 240
    assert trace_twins(held_out, examples) == []
    # control: the check sees a test task's examples put among them
    planted = examples + list(task_examples(held_out[0]))
    assert trace_twins(held_out, planted)


def test_tuples_in_exec_calls_become_json_lists():
    assert parse_exec_call("f(x=(1, (2, 3)))", {}).arguments == {"x": [1, [2, 3]]}


def test_first_step_only_keeps_every_call_of_a_world_task_and_cuts_single_turn_follow_ons():
    """τ² tasks replay one call per response on a real world, like BFCL multi-turn: every call
    is a first step. A single-turn parallel answer keeps only its step 0 (the whole answer)."""
    from spectool_bench.workloads._traces import bfcl_examples

    def count(category, first_step_only):
        return sum(1 for _ in bfcl_examples([category], "train", limit=3, first_step_only=first_step_only))

    assert count("tau2_retail", True) == count("tau2_retail", False) > 3
    assert count("exec_parallel", True) == 3 < count("exec_parallel", False)
