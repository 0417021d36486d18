"""BFCL splits by content: twins land in one split, and no test task has a train twin.

Runs over every category in the bfcl-eval wheel (read as a zip, as the workload does).
"""

from __future__ import annotations

import collections
import functools
import hashlib

import pytest

from spectool_bench.bfcl._splits import content_digest, in_split, split_of, split_of_id
from spectool_bench.bfcl._tasks import ALL_CATEGORIES, Task, load_tasks
from spectool_bench.bfcl._twins import trace_twins, twins
from spectool_bench.workloads._traces import task_examples

VARIANTS = ("multi_turn_long_context", "multi_turn_miss_param", "multi_turn_miss_func")


@functools.cache
def every_task() -> tuple[Task, ...]:
    return tuple(t for c in ALL_CATEGORIES for t in load_tasks(c))


def id_split(task: Task) -> str:
    """The old rule (sha256 of the id): the negative control."""
    bucket = int(hashlib.sha256(task.id.encode()).hexdigest()[:8], 16) % 100
    return "train" if bucket < 60 else "dev" if bucket < 70 else "test"


def cross_split_twins(split=split_of) -> list[tuple[str, str, str]]:
    tasks = every_task()
    return twins([t for t in tasks if split(t) == "test"], [t for t in tasks if split(t) == "train"])


def test_no_test_task_has_a_train_twin_in_any_category() -> None:
    assert cross_split_twins() == []


def test_an_id_split_fails_the_twin_check() -> None:
    found = cross_split_twins(id_split)
    pairs = {(a, b) for a, b, _ in found}
    assert ("simple_python_12", "multiple_98") in pairs  # the example
    assert any(a.startswith("multi_turn_long_context_") for a, _ in pairs)
    assert len(found) > 100, len(found)


def test_known_twins_share_a_split() -> None:
    for a, b in [
        ("simple_python_12", "multiple_98"),
        ("simple_python_20", "multiple_100"),
        ("simple_python_44", "multiple_106"),
        ("simple_python_172", "multiple_138"),  # quotes aside
        ("live_simple_33-10-0", "live_simple_32-9-0"),  # other tool description
        ("multi_turn_base_40", "multi_turn_base_43"),  # same opening request
    ]:
        assert split_of_id(a) == split_of_id(b), (a, b)


def test_every_multi_turn_variant_goes_with_its_base_and_shares_its_content() -> None:
    """The variant → base rule (same N) agrees with the content: the twin detector, which never
    reads ids, links each variant to its base."""
    base = {t.id: t for t in load_tasks("multi_turn_base")}
    for category in VARIANTS:
        for task in load_tasks(category):
            twin = base[f"multi_turn_base_{task.id.rsplit('_', 1)[1]}"]
            assert split_of(task) == split_of(twin), task.id
            assert twins([task], [twin]), task.id


def test_splits_keep_their_proportions() -> None:
    counts = collections.Counter(split_of(t) for t in every_task())
    share = {k: v / sum(counts.values()) for k, v in counts.items()}
    assert 0.55 <= share["train"] <= 0.65 and 0.08 <= share["dev"] <= 0.13 and 0.26 <= share["test"] <= 0.34


def test_content_digest_ignores_layout_but_not_content() -> None:
    tools = [
        {"type": "function", "function": {"name": "a", "parameters": {"type": "object", "properties": {}}}},
        {"type": "function", "function": {"name": "b", "description": "two  words"}},
    ]
    shuffled = [
        {"function": {"description": "two words", "name": "b"}, "type": "function"},
        {"function": {"parameters": {"properties": {}, "type": "object"}, "name": "a"}, "type": "function"},
    ]
    msgs = [{"role": "system", "content": "x"}, {"role": "user", "content": "Weather  in\nParis?"}]
    d = content_digest(msgs, tools)
    assert content_digest([{"role": "user", "content": " weather in paris? "}], shuffled) == d
    assert content_digest([{"role": "user", "content": "Weather in Rome?"}], tools) != d
    assert content_digest(msgs, tools[:1]) != d


def test_trace_check_reads_the_requests_and_catches_a_test_task() -> None:
    """Negative control for the shipped-traces check: examples of a test task are caught even
    with their metadata stripped."""
    tests = in_split(load_tasks("simple_python"), "test")
    examples = [ex for t in tests[:3] for ex in task_examples(t)]
    for ex in examples:
        ex.meta.clear()
    assert len(trace_twins(tests, examples)) == 3
    trains = in_split(load_tasks("simple_python"), "train")
    assert trace_twins(tests, [ex for t in trains for ex in task_examples(t)]) == []


def test_unknown_split_and_id_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="unknown split"):
        in_split([], "validation")
    with pytest.raises(ValueError, match="no BFCL task"):
        split_of_id("simple_python_99999")
    with pytest.raises(ValueError, match="names no BFCL category"):
        split_of_id("nothing_1")


def test_the_benchmark_guide_split_example_runs() -> None:
    """docs/benchmark.md's python blocks run as written (the one under "Splits by content")."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "benchmark.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", doc, re.S)
    assert any("split_of_id" in b for b in blocks)
    for block in blocks:
        exec(compile(block, "docs/benchmark.md", "exec"), {})
