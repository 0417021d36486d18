"""BFCL's executable multi-turn tool classes, imported from the wheel file (not installed).

The class modules import each other under ``bfcl_eval.eval_checker.multi_turn_eval.
func_source_code``; their package ``__init__`` files are empty. We register those packages
with ``__path__`` entries inside the wheel (zipimport reads them), so only the stdlib tool
sources (+ mpmath for MathAPI) are imported, none of bfcl-eval's pinned dependencies.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import importlib
import json
import sys
import threading
import types
from collections.abc import Mapping, Sequence
from typing import Any

from spectool import Effect, ToolCall
from spectool.errors import ConfigError, ToolNotFoundError

from ._effects import effect_of, snapshot
from ._tasks import bfcl_wheel

__all__ = ["STATELESS", "Environment", "load_class"]

_PKG = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"
MODULES = {
    "GorillaFileSystem": "gorilla_file_system",
    "MathAPI": "math_api",
    "MessageAPI": "message_api",
    "TwitterAPI": "posting_api",
    "TicketAPI": "ticket_api",
    "TradingBot": "trading_bot",
    "TravelAPI": "travel_booking",
    "VehicleControlAPI": "vehicle_control",
}
STATELESS = frozenset({"MathAPI"})
_lock = threading.Lock()


def _register_packages() -> None:
    if _PKG in sys.modules:
        return
    try:  # a real bfcl-eval installation is used as is
        importlib.import_module(_PKG)
        return
    except ImportError:
        pass
    root = str(bfcl_wheel())
    parts = _PKG.split(".")
    for i in range(1, len(parts) + 1):
        name = ".".join(parts[:i])
        if name not in sys.modules:
            mod = types.ModuleType(name)
            mod.__path__ = [f"{root}/{'/'.join(parts[:i])}"]
            sys.modules[name] = mod


def load_class(class_name: str) -> type:
    """The executable BFCL class (e.g. ``GorillaFileSystem``)."""
    if class_name not in MODULES:
        raise ConfigError(f"unknown BFCL class {class_name!r} (known: {', '.join(MODULES)})")
    with _lock:
        _register_packages()
        try:
            module = importlib.import_module(f"{_PKG}.{MODULES[class_name]}")
        except ImportError as exc:
            raise ConfigError(
                f"cannot import BFCL class {class_name}: {exc} "
                f"(MathAPI needs mpmath: pip install 'spectool[bench]')"
            ) from exc
    return getattr(module, class_name)


def _stringify(result: Any) -> str:
    # BFCL's own convention (multi_turn_utils): str as is, dict as JSON, else str().
    if isinstance(result, str):
        return result
    if isinstance(result, dict):
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            return str(result)
    return str(result)


class Environment:
    """One agent's instances of a task's BFCL classes, loaded from its initial config."""

    def __init__(
        self,
        classes: Sequence[str],
        initial_config: Mapping[str, Any],
        long_context: bool = False,
    ) -> None:
        self.instances: dict[str, Any] = {}
        self._owner: dict[str, str] = {}  # method name -> class name
        for name in classes:
            inst = load_class(name)()
            if name not in STATELESS:
                inst._load_scenario(
                    copy.deepcopy(dict(initial_config.get(name, {}))), long_context=long_context
                )
            self.instances[name] = inst
            for attr in dir(inst):
                if not attr.startswith("_") and callable(getattr(inst, attr)):
                    self._owner.setdefault(attr, name)

    def owner(self, method: str) -> str:
        try:
            return self._owner[method]
        except KeyError:
            raise ToolNotFoundError(
                f"no BFCL method named {method!r} in {list(self.instances)}", tool=method
            ) from None

    def effect(self, method: str) -> Effect:
        return effect_of(self.owner(method), method)

    def scope(self, method: str) -> str:
        return self.owner(method)

    def state(self) -> str:
        """sha256 of every instance's full state (seeded randomness included), wall-clock times
        aside: GorillaFileSystem stamps files with ``datetime.now()``, different in every run."""

        def plain(value: Any) -> str:
            return "<clock time>" if isinstance(value, datetime.datetime) else repr(value)

        text = json.dumps(snapshot(self.instances), sort_keys=True, default=plain)
        return hashlib.sha256(text.encode()).hexdigest()

    def call(self, call: ToolCall) -> str:
        """Run one call; errors come back as text, the way BFCL reports them to the model."""
        inst = self.instances[self.owner(call.name)]
        try:
            return _stringify(getattr(inst, call.name)(**dict(call.arguments)))
        except Exception as exc:  # noqa: BLE001 - tool errors are observations for the model
            return f"Error during execution: {exc}"
