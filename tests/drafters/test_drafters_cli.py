"""``spectool drafters``: the core registers ``tune`` (no measurement distribution needed) and
spectool-bench adds ``eval`` through the ``spectool.drafters.commands`` entry-point group."""

from __future__ import annotations

import argparse
import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from spectool import cli
from spectool.drafters import tune

ROOT = Path(__file__).resolve().parents[2]


def _help(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exc:
        cli.main(list(argv))
    assert exc.value.code == 0
    return capsys.readouterr().out


def _flags(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", text))


def _tune_flags() -> set[str]:
    parser = argparse.ArgumentParser()
    tune.add_arguments(parser)
    return {s for a in parser._actions for s in a.option_strings if s.startswith("--")}


def _no_plugins(monkeypatch) -> None:
    """As installed without spectool-bench: no entry point in any group."""
    monkeypatch.setattr(metadata, "entry_points", lambda **_: [])


@pytest.mark.parametrize("installed", [True, False], ids=["with-bench", "core-only"])
def test_tune_is_the_cores_with_the_same_arguments(capsys, monkeypatch, installed):
    if not installed:
        _no_plugins(monkeypatch)
    flags = _flags(_help(capsys, "drafters", "tune", "--help"))
    assert flags == _tune_flags()
    assert {"--traces", "--out", "--model", "--epochs", "--precision", "--max-minutes"} <= flags


def test_eval_comes_from_spectool_bench(capsys):
    """The control of the test above: another subcommand's help has other flags."""
    flags = _flags(_help(capsys, "drafters", "eval", "--help"))
    assert {"--workload", "--drafters", "--samples"} <= flags and "--traces" not in flags
    declared = tomllib.loads((ROOT / "bench" / "pyproject.toml").read_text())["project"]["entry-points"]
    assert declared["spectool.drafters.commands"] == {"eval": "spectool_bench.drafters._cli"}
    assert "drafters" not in declared["spectool.commands"] and "drafters" in cli.COMMANDS


def test_without_spectool_bench_eval_says_what_to_install(capsys, monkeypatch):
    _no_plugins(monkeypatch)
    assert cli.main(["drafters", "eval", "--workload", "tau2"]) == 1
    err = capsys.readouterr().err
    assert "spectool drafters: error:" in err and "pip install spectool-bench" in err
    listing = _help(capsys, "drafters", "--help")
    assert "tune" in listing and "not installed" in listing


def test_tune_runs_the_tuning_command(monkeypatch):
    seen = {}
    monkeypatch.setattr(tune, "run", lambda args: seen.update(vars(args)) or 7)
    assert cli.main(["drafters", "tune", "--traces", "t.jsonl", "--out", "o", "--epochs", "2"]) == 7
    assert [seen[k] for k in ("traces", "out", "epochs", "drafters_command")] == ["t.jsonl", "o", 2.0, "tune"]
    assert cli.main(["drafters"]) == 2  # no subcommand: the usage, nothing runs
    with pytest.raises(SystemExit):  # --out is required, as it was
        cli.main(["drafters", "tune", "--traces", "t"])
