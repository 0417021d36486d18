"""vLLM loads ``vllm.general_plugins`` in every process of an installation: outside the
supported range spectool's plugin must warn and stay off, never raise.

A fake ``vllm`` module stands in for vLLM (it lives in ``.venv-vllm``, not in the test venv,
and a real out-of-range vLLM cannot be installed beside the supported one). It carries only
what ``register`` reads: ``__version__`` and ``vllm.logger.init_logger``.
"""

from __future__ import annotations

import logging
import sys
import types

import pytest

from spectool_serving.vllm import register


@pytest.fixture
def fake_vllm(monkeypatch):
    def install(version: str) -> None:
        vllm = types.ModuleType("vllm")
        vllm.__version__ = version
        logger = types.ModuleType("vllm.logger")
        logger.init_logger = logging.getLogger
        vllm.logger = logger
        monkeypatch.setitem(sys.modules, "vllm", vllm)
        monkeypatch.setitem(sys.modules, "vllm.logger", logger)

    monkeypatch.delenv("SPECTOOL_VLLM_ALLOW_ANY_VERSION", raising=False)
    return install


@pytest.mark.parametrize("version", ["0.40.1", "0.31.0", "1.0.0"])
def test_out_of_range_warns_and_stays_off(fake_vllm, caplog, version):
    fake_vllm(version)
    with caplog.at_level(logging.WARNING, logger="vllm.spectool"):
        assert register() is False
    assert any(
        r.levelno == logging.WARNING and "stays off" in r.getMessage() and version in r.getMessage()
        for r in caplog.records
    )


def test_supported_version_turns_on(fake_vllm, caplog):
    fake_vllm("0.32.0")
    with caplog.at_level(logging.INFO, logger="vllm.spectool"):
        assert register() is True
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_override_turns_on_outside_the_range(fake_vllm, monkeypatch):
    fake_vllm("0.40.1")
    monkeypatch.setenv("SPECTOOL_VLLM_ALLOW_ANY_VERSION", "1")
    assert register() is True
