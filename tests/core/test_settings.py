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


def test_settings_are_typed_and_the_only_reader_of_the_environment(monkeypatch):
    from spectool.settings import Settings

    assert isinstance(settings(), Settings)
    assert Settings.model_fields["vllm_max_hops"].annotation is int  # typed, not Any
    # no module reads a SPECTOOL_* variable straight from os.environ / os.getenv (measurement
    # aside: it is moving to its own package)
    found = subprocess.run(
        [
            "grep",
            "-rnE",
            r"(environ(\.get)?[\[(]|getenv\()\s*['\"]SPECTOOL_",
            "--include=*.py",
            "spectool",
            "serving",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    assert [line for line in found if "/bench" not in line.split(":")[0]] == []


def test_the_vllm_endpoint_reads_its_variables_through_settings(monkeypatch):
    from spectool_serving.vllm._endpoint import SpectoolEndpoint

    monkeypatch.setenv("SPECTOOL_VLLM_MAX_HOPS", "3")
    monkeypatch.setenv("SPECTOOL_VLLM_O3", "false")
    endpoint = SpectoolEndpoint()
    assert endpoint.max_hops == 3 and endpoint.o3 is False
    monkeypatch.setenv("SPECTOOL_VLLM_MAX_HOPS", "many")
    with pytest.raises(ConfigError, match="SPECTOOL_VLLM_MAX_HOPS"):  # was a bare ValueError
        SpectoolEndpoint()


# -- ranges and enums, checked where the variable is read ------------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("SPECTOOL_TOOLCACHE_TTL", "-5", "greater than or equal to 0"),
        ("SPECTOOL_VLLM_DEFAULT_MAX_TOKENS", "-1", "greater than or equal to 0"),
        ("SPECTOOL_VLLM_FLAVOUR", "tpu", "'cpu' or 'gpu'"),
        ("SPECTOOL_VLLM_MAX_HOPS", "0", "greater than or equal to 1"),
        ("SPECTOOL_PACK_MAX_GB", "-1", "greater than or equal to 0"),
    ],
)
def test_out_of_range_and_unknown_values_are_refused(monkeypatch, variable, value, says):
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError, match=variable) as caught:
        settings()
    assert says in str(caught.value)
    monkeypatch.delenv(variable)
    settings()  # control: the default is fine


def test_an_empty_cache_variable_is_unset_not_the_working_directory(monkeypatch, tmp_path):
    from spectool.embedded import cache_dir

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPECTOOL_CACHE", "")
    assert settings().cache is None
    assert Path(cache_dir()).resolve() != tmp_path.resolve()
    monkeypatch.setenv("SPECTOOL_CACHE", str(tmp_path / "models"))  # control: a path is used
    assert settings().cache == tmp_path / "models"
