"""Shared fixtures, kept light: async tests run on asyncio via anyio's pytest plugin.

Helpers add their own fixtures in their test modules (or a conftest in a subfolder).

Hypothesis profiles: ``ci`` (the default, short and derandomized, so a run is reproducible: a
red CI run is red again on rerun) and ``long`` for a deep random search, chosen with
``SPECTOOL_HYPOTHESIS=long`` or ``pytest --hypothesis-profile=long``. Tests that pin their own
``max_examples`` keep it; the property suites of issue 18 take theirs from the profile.
"""

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=40,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile(
    "long",
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile(os.environ.get("SPECTOOL_HYPOTHESIS", "ci"))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _no_exec(monkeypatch: pytest.MonkeyPatch) -> None:
    """``spectool serve --backend vllm`` replaces its process with vLLM's (``os.execve``). Called
    in-process by a test that meant to pass ``--print-command``, it replaced pytest itself: the
    run ended with vLLM's exit status and no report. Here such a slip fails one test instead."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a test tried to replace the pytest process (exec {args[:2]!r})")

    for name in ("execv", "execve", "execvp", "execvpe", "execl", "execle", "execlp", "execlpe"):
        monkeypatch.setattr(os, name, refuse)
