"""Drafters by name (``"history"``, ``"learning"``, ``"learning:<scope>"``, ``"local"``,
``"tuned"``), resolved in one place for every entry point that accepts a drafter, and the
one-line hint of which drafter fits this machine. ``"learning"`` is the process's one
:class:`~._learning.LearningDrafter` for its scope (``"default"``, or the agent / tenant after
the colon), so every session that names it learns from the ones before.

A name whose drafter cannot run here fails at once with the missing extra named: it never
turns into a session whose every draft fails.
"""

from __future__ import annotations

import glob
import importlib.util
import logging
import os
import shutil
import sys
from collections.abc import Callable

from .._options import did_you_mean
from .._types import Drafter
from ..errors import ConfigError, missing_extra

__all__ = ["DRAFTER_NAMES", "drafter_hint", "machine", "resolve_drafter"]

log = logging.getLogger("spectool.drafters")

#: below this many cores a local model competes with the agent for the CPU (docs/drafters.md)
LOCAL_MIN_CORES = 8
_hinted = False


def _history() -> Drafter:
    from .history._history import HistoryDrafter

    return HistoryDrafter()


def _learning(scope: str = "default") -> Drafter:
    from .history._learning import learning_drafter

    return learning_drafter(scope)  # one per scope for the process: sessions learn into it


def _local() -> Drafter:
    _require("torch", "transformers")
    from .local._local import LocalDrafter

    return LocalDrafter()


def _tuned() -> Drafter:
    _require("torch", "transformers", "peft")
    from .local._adapter import shipped_adapter_path
    from .local._local import LocalDrafter

    return LocalDrafter(adapter=shipped_adapter_path())


DRAFTER_NAMES: dict[str, Callable[[], Drafter]] = {
    "history": _history,
    "learning": _learning,
    "local": _local,
    "tuned": _tuned,
}


def _require(*modules: str) -> None:
    for module in modules:
        if importlib.util.find_spec(module) is None:
            raise missing_extra(module, "local")


def resolve_drafter(drafter: Drafter | str | None) -> Drafter | None:
    """A drafter object, one of spectool's by name, or None (no drafts). Anything else, an
    unknown name, or a named drafter whose dependencies are missing is a ConfigError. The
    first call in a process logs (INFO) which drafter fits this machine."""
    _hint_once()
    if drafter is None:
        return None
    if isinstance(drafter, str):
        head, sep, scope = drafter.partition(":")
        if head == "learning" and sep:  # "learning:<agent or tenant>": that scope's patterns
            return _learning(scope)
        make = DRAFTER_NAMES.get(drafter)
        if make is None:
            raise ConfigError(
                f"unknown drafter name {drafter!r}{did_you_mean(drafter, DRAFTER_NAMES)}; "
                f"spectool's drafters: {', '.join(DRAFTER_NAMES)}"
            )
        return make()
    if not callable(getattr(drafter, "propose", None)):
        raise ConfigError(
            f"drafter must be a Drafter (an object with async propose(request)) or one of "
            f"{', '.join(map(repr, DRAFTER_NAMES))}; got {type(drafter).__name__}"
        )
    return drafter


def machine() -> tuple[int, bool]:
    """(usable CPU cores, whether a GPU is visible), without importing torch."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    torch = sys.modules.get("torch")
    if torch is not None:  # already loaded by the application: ask it
        gpu = bool(torch.cuda.is_available()) or bool(
            getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()
        )
    else:
        gpu = bool(glob.glob("/dev/nvidia[0-9]*")) or shutil.which("nvidia-smi") is not None
    return cores, gpu


def drafter_hint(cores: int, gpu: bool) -> str:
    """Which drafter fits a machine with ``cores`` and a GPU or not (docs/drafters.md)."""
    if gpu:
        return (
            f"spectool: a GPU is visible ({cores} CPU cores): a model drafter fits "
            "('tuned', 'local', or an EndpointDrafter); 'history' costs nothing beside it"
        )
    if cores >= LOCAL_MIN_CORES:
        return (
            f"spectool: {cores} CPU cores, no GPU visible: 'history' fits; 'local'/'tuned' may "
            "pay if the agent leaves cores idle (measure with spectool drafters eval)"
        )
    return (
        f"spectool: {cores} CPU cores, no GPU visible: use the 'history' drafter (or an "
        "EndpointDrafter elsewhere); 'local'/'tuned' compete with the agent for the cores and "
        "slow it down"
    )


def _hint_once() -> None:
    global _hinted
    if not _hinted:
        _hinted = True
        log.info(drafter_hint(*machine()))
