"""One settings object for every SPECTOOL_* variable, and one documented table of them."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from spectool.errors import ConfigError
from spectool.settings import settings

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_and_environment(monkeypatch):
    monkeypatch.delenv("SPECTOOL_PACK_MAX_GB", raising=False)
    monkeypatch.delenv("SPECTOOL_LEAN_FORWARD", raising=False)
    assert settings().pack_max_gb == 4.0 and settings().lean_forward is True
    monkeypatch.setenv("SPECTOOL_PACK_MAX_GB", "1.5")
    monkeypatch.setenv("SPECTOOL_LEAN_FORWARD", "0")
    assert settings().pack_max_gb == 1.5 and settings().lean_forward is False  # seen after import


def test_bad_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("SPECTOOL_VLLM_MAX_HOPS", "many")
    with pytest.raises(ConfigError, match="SPECTOOL_VLLM_MAX_HOPS"):
        settings()


def test_every_variable_in_the_code_is_a_field_and_in_the_table():
    found = subprocess.run(
        ["grep", "-rhoE", r"SPECTOOL_[A-Z0-9_]+", "--include=*.py", "spectool", "serving", "integrations"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout
    names = set(found.split()) - {"SPECTOOL_"}
    fields = {"SPECTOOL_" + f.upper() for f in type(settings()).model_fields}
    table = set(
        re.findall(r"^\| `(SPECTOOL_[A-Z0-9_]+)`", (ROOT / "docs" / "configuration.md").read_text(), re.M)
    )
    assert names <= fields, names - fields
    assert fields == table
