"""BFCL from the wheel: loading, Gorilla → OpenAI conversion, executable classes, effects."""

import pytest

from spectool import ConfigError, Effect, ToolCall
from spectool_bench.bfcl._effects import EFFECTS, effect_of
from spectool_bench.bfcl._executable import STATELESS, Environment, load_class
from spectool_bench.bfcl._measure_effects import measure_effects
from spectool_bench.bfcl._tasks import _single_truth, load_tasks, openai_tool, parse_call, tool_name


def test_categories_load_with_ground_truth():
    tasks = load_tasks("multi_turn_base")
    assert len(tasks) == 200
    assert sum(t.calls for t in tasks) == 1142
    assert all(len(t.turns) == len(t.ground_truth) for t in tasks)
    simple = load_tasks("simple_python", limit=5)
    assert [t.id for t in simple][:2] == ["simple_python_0", "simple_python_1"]
    assert simple[1].ground_truth == [[ToolCall("math_factorial", {"number": 5})]]
    assert simple[1].names == {"math_factorial": "math.factorial"}
    with pytest.raises(ConfigError, match="unknown BFCL category"):
        load_tasks("no_such_category")


def test_ground_truth_resolves_nested_option_lists():
    # BFCL writes a dict argument's acceptable values one level down, per key ("" = may be
    # omitted); the truth must be plain data, not the option lists (it once was)
    answer = [
        {
            "ThinQ.Connect": {
                "body": [{"mode": ["AIR_DRY"], "wind": ["", "MID"], "saving": ["", False], "eco": [""]}],
                "boxes": [[{"x": [60.2], "y": [12.3, 12]}]],
                "tags": [["a", "b"], ["b", "a"]],
                "unit": ["", "km"],
                "note": [""],
            }
        }
    ]
    (call,) = _single_truth(answer)
    assert call == ToolCall(
        "ThinQ_Connect",
        {
            "body": {"mode": "AIR_DRY", "wind": "MID", "saving": False},
            "boxes": [{"x": 60.2, "y": 12.3}],
            "tags": ["a", "b"],
            "unit": "km",
        },
    )
    (thinq,) = next(t for t in load_tasks("live_simple") if t.id == "live_simple_41-17-1").ground_truth[0]
    assert thinq.arguments["body"]["airConJobMode"] == "AIR_DRY"


def test_gorilla_schema_becomes_openai():
    doc = {
        "name": "geo.distance",
        "description": "d",
        "parameters": {
            "type": "dict",
            "properties": {
                "a": {"type": "float"},
                "p": {"type": "tuple", "items": {"type": "float"}},
                "o": {"type": "dict", "properties": {"x": {"type": "any"}}},
                "l": {"type": "list"},
            },
            "required": ["a"],
        },
        "response": {"type": "dict"},
    }
    fn = openai_tool(doc)["function"]
    assert fn["name"] == "geo_distance" == tool_name("geo.distance")
    props = fn["parameters"]["properties"]
    assert fn["parameters"]["type"] == "object"
    assert props["a"] == {"type": "number"}
    assert props["p"] == {"type": "array", "items": {"type": "number"}}
    assert props["o"]["type"] == "object" and props["o"]["properties"]["x"] == {}
    assert props["l"] == {"type": "array", "items": {}}
    assert "response" not in fn


def test_ground_truth_calls_parse_positional_and_keyword():
    assert parse_call("sort('f.pdf')", {"sort": ["file_name"]}) == ToolCall("sort", {"file_name": "f.pdf"})
    assert parse_call("ls(a=True)", {}) == ToolCall("ls", {"a": True})
    with pytest.raises(ConfigError):
        parse_call("os.system('x') + 1", {})


def test_executable_classes_run_every_ground_truth_call():
    for task in load_tasks("multi_turn_base", limit=40):
        env = Environment(task.classes, task.initial_config)
        for turn in task.ground_truth:
            for call in turn:
                assert not env.call(call).startswith("Error during execution"), (task.id, call)
    assert load_class("MathAPI")().add(a=1, b=2) == {"result": 3}


def test_environments_are_independent_per_agent():
    task = load_tasks("multi_turn_base", limit=1)[0]
    a, b = Environment(task.classes, task.initial_config), Environment(task.classes, task.initial_config)
    a.call(ToolCall("cd", {"folder": "document"}))
    assert a.call(ToolCall("pwd", {})) != b.call(ToolCall("pwd", {}))


def test_effects_table_matches_the_measured_analysis():
    measured = measure_effects()
    for cls, methods in measured.items():
        for method, (calls, mutated) in methods.items():
            declared = effect_of(cls, method)
            if mutated:
                assert declared is Effect.MUTATING, f"{cls}.{method} changed state in {mutated}/{calls} calls"
            elif cls in STATELESS:
                assert declared is Effect.PURE, f"{cls}.{method}"
            else:
                assert declared is Effect.READ_ONLY, f"{cls}.{method} never changed state: declare read_only"
    # nothing is declared safe without evidence: every speculable method was observed
    # (a stateless class loads no scenario and holds only a constant description: all pure)
    for cls, methods in EFFECTS.items():
        for method in methods:
            assert callable(getattr(load_class(cls), method))
            if cls in STATELESS:
                assert not hasattr(load_class(cls), "_load_scenario")
                assert all(isinstance(v, str) for v in vars(load_class(cls)()).values())
            else:
                assert method in measured.get(cls, {}), f"{cls}.{method} declared safe but never exercised"
    assert effect_of("GorillaFileSystem", "cd") is Effect.MUTATING
    assert effect_of("GorillaFileSystem", "ls") is Effect.READ_ONLY
