"""The type-checking bar of pyproject.toml (issue 28.8): mypy checks the bodies of unannotated
functions too, and at most five modules are exempt, each under a comment that says why.

``make lint`` runs mypy itself; this holds the configuration, so that the bar cannot be lowered
quietly (a long ignore list, ``check_untyped_defs`` off again, a module without its reason)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_IGNORED = 5


def ignored_modules(config: dict[str, Any]) -> list[str]:
    """Every module a ``[[tool.mypy.overrides]]`` section exempts with ``ignore_errors``."""
    out: list[str] = []
    for section in config.get("tool", {}).get("mypy", {}).get("overrides", []):
        if section.get("ignore_errors"):
            modules = section["module"]
            out += [modules] if isinstance(modules, str) else modules
    return out


def problems(text: str) -> list[str]:
    """What is wrong with a pyproject's mypy settings, by the bar above; [] when none."""
    config = tomllib.loads(text)
    found = []
    if config["tool"]["mypy"].get("check_untyped_defs") is not True:
        found.append("check_untyped_defs is not on")
    ignored = ignored_modules(config)
    if len(ignored) > MAX_IGNORED:
        found.append(f"{len(ignored)} modules ignored (at most {MAX_IGNORED}): {ignored}")
    lines = text.splitlines()
    for name in ignored:
        at = next(i for i, line in enumerate(lines) if f'"{name}"' in line)
        before = lines[max(0, at - 3) : at]  # its reason: a comment just above its entry
        if not any(line.strip().startswith("#") for line in before):
            found.append(f"{name} is ignored without a reason comment")
    return found


def test_the_projects_mypy_settings_meet_the_bar() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert problems(text) == []


_BASE = """
[tool.mypy]
check_untyped_defs = {flag}

[[tool.mypy.overrides]]
module = [
{modules}
]
ignore_errors = true
"""


@pytest.mark.parametrize(
    ("flag", "modules", "complaint"),
    [
        ("false", '    # reason\n    "a",', "check_untyped_defs"),
        ("true", "\n".join(f'    # reason {i}\n    "m{i}",' for i in range(6)), "6 modules ignored"),
        ("true", '    # reason\n    "a",\n    "b",\n    "c",\n    "d",', "d is ignored without a reason"),
    ],
)
def test_a_lowered_bar_is_caught(flag: str, modules: str, complaint: str) -> None:
    """Negative controls: each way of lowering the bar gives its own complaint."""
    found = problems(_BASE.format(flag=flag, modules=modules))
    assert any(complaint in p for p in found), found


def test_a_config_that_meets_the_bar_has_no_complaint() -> None:
    assert problems(_BASE.format(flag="true", modules='    # reason\n    "a",\n    "b",')) == []
