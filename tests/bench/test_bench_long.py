"""``spectool bench --long``: the long run beside the main job, its preset and a small run end to end.

The end-to-end runs use the benchmark's own main model — the replay of BFCL's ground truth and
of τ²'s gold actions on τ²'s real tools and database — with a fast clock and one task per
category, so the whole path (both sections, every arm, CIs, ``same``) runs in seconds; the
preset itself (64 BFCL tasks, every τ² test task, ≈ 40 min) is checked by what it selects.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

from spectool import ToolCache
from spectool_bench.bfcl._splits import split_of_id
from spectool_bench.harness import _sweep
from spectool_bench.harness._cli import add_arguments, build_plans, run
from spectool_bench.workloads._catalog import split_tasks

FAST = ["--prefill-rate", "1e6", "--decode-rate", "4000", "--overhead", "0.01", "--latencies", "0.02"]


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_long_preset_selects_64_clean_bfcl_tasks_and_every_tau2_test_task():
    bfcl, tau2 = build_plans(_args("--long"))
    picked = _sweep._select_tasks(bfcl)
    assert len(picked) >= 64 and all(split_of_id(t.id) == "test" for t in picked)
    assert bfcl.tasks_per_agent == 0 and bfcl.agents == (1,)  # 0: every selected task, once
    every = [t.id for c in ("tau2_airline", "tau2_retail") for t in split_tasks(c, "test")]
    assert [t.id for t in _sweep._select_tasks(tau2)] == every
    for plan in (bfcl, tau2):
        assert plan.main == "replay" and plan.eager_arm and plan.eager_alone and plan.samples == (1,)
        assert plan.drafters[:2] == ("history", "learning+train") and len(plan.drafters) == 3
    assert tau2.rates == _sweep.tau2_plan().rates and bfcl.rates == _sweep.headline_plan().rates
    (only,) = build_plans(_args("--long", "--workload", "tau2", "--domains", "retail"))
    assert only.section == "long_tau2" and only.categories == ("tau2_retail",)
    (half,) = build_plans(_args("--long", "--workload", "bfcl", "--tasks-per-category", "2"))
    assert half.section == "long_bfcl" and half.tasks_per_category == 2


def test_the_quick_tau2_section_uses_the_best_mining_drafter():
    _, tau2, _ = build_plans(_args("--quick"))
    assert tau2.drafters == ("learning+train",) and tau2.eager_arm  # drafter arms dispatch eagerly
    assert not tau2.eager_alone and tau2.tasks_per_category == 6  # eager alone: only the long run


def test_a_small_long_run_writes_both_sections_with_cis_and_same(tmp_path, capsys):
    out = tmp_path / "long"
    argv = ["--long", "--tasks-per-category", "2", "--categories", "simple_python"]
    argv += ["--domains", "airline", "--drafters", "history,learning", "--no-plots", "--no-progress"]
    assert run(_args(*argv, *FAST, "--out", str(out))) == 0
    results = json.loads((out / "results.json").read_text())
    sections = {"long_bfcl": results, "long_tau2": results["long_tau2"]}
    assert set(results["section_wall_s"]) == set(sections)
    for name, section in sections.items():
        n = len(section["tasks"])
        assert n == 2  # every selected task, once (a CI needs two)
        arms = [(r["config"], r["drafter"]) for r in section["runs"]]
        assert [a[0] for a in arms] == ["baseline", "eager", "client+eager", "client+eager"]
        assert arms[2][1] == "history" and arms[3][1].startswith("learning")
        for r in section["runs"]:
            assert r["tasks_n"] == n and r["time_saved_ci95"] is not None
            assert r["same"] is True, (name, r["drafter"])
    assert all(r["same_world_state"] is True for r in results["long_tau2"]["runs"])
    printed = capsys.readouterr().out
    assert "Long run: BFCL" in printed and "Long run: τ²-bench" in printed
    assert "long run wall time" in printed


class _WrongOutputCache(ToolCache):
    """Broken on purpose: every run it makes (early or not) hands back the output of the run
    before it, the kind of mix-up ``same`` exists to catch."""

    _last = None

    async def _execute(self, call, spec, *, speculative):
        outcome = await super()._execute(call, spec, speculative=speculative)
        last, self._last = self._last, outcome
        return last if last is not None else outcome


def test_same_in_the_long_run_says_no_when_a_drafter_arm_breaks_its_cache(tmp_path, monkeypatch):
    """Negative control: the same small τ² run with a broken cache planted in the drafter arms."""

    @dataclasses.dataclass
    class BrokenArms(_sweep.Setup):
        def __post_init__(self) -> None:
            if self.drafter is not None:
                self.cache = _WrongOutputCache

    monkeypatch.setattr(_sweep, "Setup", BrokenArms)
    argv = ["--long", "--workload", "tau2", "--domains", "airline", "--tasks-per-category", "1"]
    argv += ["--drafters", "history", "--no-plots", "--no-progress", "--out", str(tmp_path)]
    run(_args(*argv, *FAST))
    rows = {r["config"]: r for r in json.loads((tmp_path / "results.json").read_text())["runs"]}
    assert rows["baseline"]["same"] is True and rows["eager"]["same"] is True
    assert rows["client+eager"]["same_transcripts"] is False and rows["client+eager"]["same"] is False


@pytest.mark.parametrize("bad", [["--long", "--main", "embedded"], ["--long", "--main", "endpoint"]])
def test_the_long_run_refuses_another_main_model(bad):
    from spectool.errors import ConfigError

    with pytest.raises(ConfigError, match="replay"):
        build_plans(_args(*bad))
