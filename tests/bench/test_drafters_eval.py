"""`spectool drafters eval`: the scoring math, the ground-truth replay and the command."""

import json

import pytest

from spectool import ToolCall
from spectool.cli import main
from spectool.drafters._common import tool_schemas
from spectool_bench.bfcl._tasks import load_tasks
from spectool_bench.drafters._metrics import percentile, score_step, summarize, wilson_interval
from spectool_bench.workloads._replay import replay_steps


def fn(name, props, required=None):
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": "",
            "parameters": {
                "type": "object",
                "properties": props,
                "required": list(props) if required is None else required,
            },
        },
    }


SCHEMAS = tool_schemas(
    [
        fn("ls", {"path": {"type": "string"}}),
        fn("add", {"a": {"type": "number"}, "b": {"type": "number"}}),
        fn("rm", {"path": {"type": "string"}}),
        fn("weather", {"city": {"type": "string"}, "unit": {"type": "string", "default": "c"}}, ["city"]),
    ]
)
SPEC = {"ls", "add", "weather"}  # rm is mutating


def test_a_hit_needs_the_canonical_call_of_a_speculable_tool():
    s = score_step(
        [ToolCall("add", {"a": 1, "b": 2.0})], [ToolCall("add", {"a": 1.0, "b": 2})], SPEC, SCHEMAS, 0.1
    )
    assert (s.calls, s.speculable, s.predicted, s.hits, s.wasted) == (1, 1, 1, 1, 0)
    # a filled default is the same call (the cache's key)
    s = score_step(
        [ToolCall("weather", {"city": "Oslo"})],
        [ToolCall("weather", {"city": "Oslo", "unit": "c"})],
        SPEC,
        SCHEMAS,
        0.1,
    )
    assert s.hits == 1
    # a right guess of a mutating call is not a hit and never a run: it is refused (and right)
    s = score_step([ToolCall("rm", {"path": "x"})], [ToolCall("rm", {"path": "x"})], SPEC, SCHEMAS, 0.1)
    assert (s.speculable, s.predicted, s.hits, s.wasted) == (0, 1, 0, 0)
    assert (s.refused, s.refused_right) == (1, 1)


def test_wasted_runs_count_distinct_speculable_misses_only():
    proposals = [
        ToolCall("ls", {"path": "a"}),
        ToolCall("ls", {"path": "a"}),  # λ rows agree: one run
        ToolCall("ls", {"path": "b"}),
        ToolCall("rm", {"path": "a"}),  # rm never runs early
        ToolCall("nope", {}),
    ]  # not offered: dropped
    s = score_step(proposals, [ToolCall("ls", {"path": "a"})], SPEC, SCHEMAS, 0.2)
    assert (s.hits, s.wasted) == (1, 1)
    # one proposal serves one call: two equal calls need... one hit, the second is a miss
    s = score_step([ToolCall("ls", {"path": "a"})], [ToolCall("ls", {"path": "a"})] * 2, SPEC, SCHEMAS, 0.0)
    assert (s.calls, s.hits, s.wasted) == (2, 1, 0)


def test_refused_proposals_have_their_own_column_not_hits_nor_waste():
    from spectool import Toolbox, tool
    from spectool_bench.drafters._metrics import admitted_tools

    @tool(effect="read_only", external=True)
    async def weather(city: str, unit: str = "c") -> str:
        """A third party's API: run early only if the session opts in."""
        return city

    @tool(effect="read_only")
    async def ls(path: str) -> str:
        return path

    @tool  # mutating
    async def rm(path: str) -> str:
        return path

    box = Toolbox([weather, ls, rm])
    admitted = admitted_tools(box)
    assert admitted == {"ls"} and admitted_tools(box, speculate_external=True) == {"ls", "weather"}
    proposals = [
        ToolCall("weather", {"city": "Oslo"}),  # external read, wrong: refused, not a wasted run
        ToolCall("rm", {"path": "a"}),  # mutating and right: refused, not a right prediction's hit
        ToolCall("rm", {"path": "a"}),  # the λ samples agree: one refusal
        ToolCall("ls", {"path": "z"}),  # admitted and wrong: a wasted run
    ]
    s = score_step(proposals, [ToolCall("rm", {"path": "a"})], admitted, SCHEMAS, 0.1)
    assert (s.hits, s.wasted, s.refused, s.refused_right) == (0, 1, 2, 1)
    # the same proposals with externals opted in: the wrong weather read becomes a wasted run
    s = score_step(proposals, [ToolCall("rm", {"path": "a"})], admitted | {"weather"}, SCHEMAS, 0.1)
    assert (s.hits, s.wasted, s.refused, s.refused_right) == (0, 2, 1, 1)
    row = summarize([s, s])
    assert (row["refused"], row["refused_right"], row["wasted_runs"]) == (2, 2, 4)


def test_wilson_interval_matches_the_closed_forms_and_stays_in_0_1():
    z2 = 1.96**2
    assert wilson_interval(0, 10) == pytest.approx((0.0, z2 / (10 + z2)))  # all misses: [0, z²/(n+z²)]
    assert wilson_interval(10, 10) == pytest.approx((10 / (10 + z2), 1.0))
    lo, hi = wilson_interval(8, 12)
    assert lo == pytest.approx(0.3906, abs=1e-3) and hi == pytest.approx(0.8619, abs=1e-3)
    assert wilson_interval(80, 120)[1] - wilson_interval(80, 120)[0] < hi - lo  # more calls, narrower
    assert wilson_interval(0, 0) is None


def test_summary_ratios_ceiling_and_no_call_categories():
    steps = [
        score_step(
            [ToolCall("ls", {"path": "a"})],
            [ToolCall("ls", {"path": "a"}), ToolCall("rm", {"path": "a"})],
            SPEC,
            SCHEMAS,
            1.0,
        ),
        score_step(
            [ToolCall("ls", {"path": "z"}), ToolCall("add", {"a": 1, "b": 1})],
            [ToolCall("add", {"a": 2, "b": 2})],
            SPEC,
            SCHEMAS,
            3.0,
        ),
    ]
    row = summarize(steps)
    assert row["n_calls"] == 3 and row["n_speculable"] == 2 and row["hits"] == 1
    assert row["alpha_speculable"] == pytest.approx(0.5)
    assert row["alpha_speculable_ci95"] == pytest.approx(wilson_interval(1, 2))
    assert row["alpha_all"] == pytest.approx(1 / 3)
    assert row["ceiling"] == pytest.approx(2 / 3)
    assert row["wasted_runs"] == 2 and row["wasted_per_hit"] == pytest.approx(2.0)
    assert row["g_median_s"] == pytest.approx(2.0) and row["g_p90_s"] == pytest.approx(2.8)
    empty = summarize([score_step([ToolCall("ls", {"path": "a"})], [], SPEC, SCHEMAS, 0.5)])
    assert empty["ceiling"] == 0.0 and empty["alpha_all"] is None and empty["alpha_speculable"] is None
    assert empty["alpha_speculable_ci95"] is None
    assert empty["wasted_runs"] == 1 and empty["wasted_per_hit"] is None
    assert percentile([], 50) is None and percentile([4.0], 90) == 4.0


def test_multi_turn_replay_gives_the_true_history_before_each_call():
    task = load_tasks("multi_turn_base", limit=1)[0]
    steps, speculable = replay_steps(task)
    truth = [c for turn in task.ground_truth for c in turn]
    assert [s.calls[0] for s in steps if s.calls] == truth
    for step in steps[1:]:
        last = step.messages[-1]
        assert last["role"] in ("tool", "user")  # the previous call's real output, or a new turn
    made = [
        c["function"]["name"]
        for m in steps[-1].messages
        if m.get("role") == "assistant"
        for c in m.get("tool_calls") or ()
    ]
    assert made == [c.name for c in truth[:-1]]  # never the drafter's guesses, never the future
    assert "ls" in speculable and "mv" not in speculable  # the bench's effect table


def test_miss_func_holds_tools_back_until_their_turn():
    task = load_tasks("multi_turn_miss_func", limit=1)[0]
    held = next(iter(task.held_back))
    steps, _ = replay_steps(task)
    first_turn = task.held_back[held]
    names_at = [{t["function"]["name"] for t in s.tools} for s in steps]
    n_user = [sum(m["role"] == "user" for m in s.messages) for s in steps]
    assert any(held not in names for names in names_at)
    for names, users in zip(names_at, n_user):
        if held in names:
            assert users >= 1
    assert len(task.tools_at(0)) == len(task.tools) - len(task.held_back)
    assert len(task.tools_at(first_turn)) == len(task.tools)


def test_cli_eval_writes_rows_for_every_drafter_category_and_lambda(tmp_path, capsys):
    rc = main(
        [
            "drafters",
            "eval",
            "--categories",
            "simple_python,multi_turn_base,irrelevance",
            "--split",
            "test",
            "--drafters",
            "history,mined",
            "--samples",
            "1,3",
            "--limit",
            "2",
            "--out",
            str(tmp_path),
            "--no-progress",
        ]
    )
    assert rc == 0
    data = json.loads((tmp_path / "results.json").read_text())
    rows = data["rows"]
    assert len(rows) == 3 * 2 * 2
    for field in (
        "drafter",
        "category",
        "split",
        "samples",
        "alpha_speculable",
        "alpha_all",
        "ceiling",
        "g_median_s",
        "g_p90_s",
        "wasted_per_hit",
        "n_calls",
    ):
        assert all(field in r for r in rows)
    by = {(r["drafter"], r["category"], r["samples"]): r for r in rows}
    assert by[("history", "simple_python", 1)]["ceiling"] == 1.0
    assert 0 < by[("history", "multi_turn_base", 3)]["ceiling"] < 1
    irr = by[("history", "irrelevance", 1)]
    assert irr["n_calls"] == 0 and irr["ceiling"] == 0.0 and irr["alpha_all"] is None
    assert (tmp_path / "drafter_eval.png").stat().st_size > 10_000
    out = capsys.readouterr().out
    assert "α spec" in out and "n/a" in out


def test_cli_rejects_unknown_names_clearly(capsys):
    assert main(["drafters", "eval", "--drafters", "psychic", "--limit", "1"]) == 1
    assert "unknown drafter" in capsys.readouterr().err
    assert main(["drafters", "eval", "--categories", "simple_cobol", "--limit", "1"]) == 1
    assert "unknown BFCL categor" in capsys.readouterr().err
    assert main(["drafters", "eval", "--adapter", "x", "--drafters", "history", "--limit", "1"]) == 1
    assert "--adapter is for the tuned drafters" in capsys.readouterr().err


def test_adapter_option_reaches_the_tuned_drafters(tmp_path):
    from spectool_bench.drafters._cli import _check_drafters

    (tmp_path / "manifest.json").write_text('{"compact_format_version": 2}')
    made = _check_drafters(("tuned", "tuned+mined", "history"), tmp_path)
    assert made["tuned"]("").adapter == tmp_path
    assert made["tuned+mined"]("simple_python").drafters[1].adapter == tmp_path


def test_model_option_reaches_the_model_drafters_and_no_other(tmp_path, capsys):
    from spectool_bench.drafters._cli import _check_drafters

    (tmp_path / "manifest.json").write_text('{"compact_format_version": 3}')
    made = _check_drafters(("tuned", "local", "history"), tmp_path, "some/model.gguf")
    assert made["tuned"]("")._source == "some/model.gguf" and made["local"]("")._source == "some/model.gguf"
    assert made["tuned"]("").adapter == tmp_path
    assert main(["drafters", "eval", "--model", "m.gguf", "--drafters", "history", "--limit", "1"]) == 1
    assert "--model is for the model drafters" in capsys.readouterr().err


@pytest.mark.parametrize("category", __import__("spectool_bench.bfcl._tasks", fromlist=["x"]).ALL_CATEGORIES)
def test_every_category_in_the_wheel_replays(category):
    from spectool_bench.bfcl._tasks import NO_CALL_CATEGORIES

    tasks = load_tasks(category, limit=2)
    assert tasks and all(t.tools for t in tasks)
    for task in tasks:
        steps, _ = replay_steps(task)
        assert steps and sum(len(s.calls) for s in steps) == task.calls
        assert (task.calls == 0) == (category in NO_CALL_CATEGORIES)
