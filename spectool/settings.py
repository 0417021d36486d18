"""Every ``SPECTOOL_*`` environment variable, read in one place (docs/configuration.md).

:func:`settings` reads the environment on each call, so a variable set after import (a test,
a launcher that exports before spawning) is seen; a bad value is a :class:`ConfigError`
naming the variable. ``import spectool`` does not import this module (nor pydantic-settings).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from .errors import ConfigError

__all__ = ["Settings", "settings"]


class Settings(BaseSettings):
    """One field per variable; the name is ``SPECTOOL_`` + the field name, upper case."""

    model_config = SettingsConfigDict(env_prefix="SPECTOOL_", extra="ignore", frozen=True)

    cache: Path | None = None
    tree_calibration: Path | None = None
    kernel_cache: Path | None = None
    cpu_kernels: bool = True
    lean_forward: bool = True
    packed_gemm: bool = True
    pack_max_gb: Annotated[float, Field(ge=0)] = 4.0  # 0: no packed weight copies
    toolcache_ttl: Annotated[float, Field(ge=0)] = 300.0
    vllm_allow_any_version: bool = False
    vllm_max_hops: Annotated[int, Field(ge=1)] = 8
    # the torch engine's default (spectool_serving.requests): one default on both backends
    vllm_default_max_tokens: Annotated[int, Field(ge=0)] = 256
    vllm_o3: bool = True
    vllm_format: str = "chatml"
    vllm_fallback: str = ""
    vllm_python: str | None = None
    vllm_flavour: Literal["cpu", "gpu"] = "cpu"
    vllm_shared_dir: Path | None = None
    vllm_advertise_url: str | None = None

    @field_validator(
        "cache",
        "tree_calibration",
        "kernel_cache",
        "vllm_python",
        "vllm_shared_dir",
        "vllm_advertise_url",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        # ``SPECTOOL_CACHE=`` is the variable unset, not Path("") (the working directory)
        return None if isinstance(value, str) and not value.strip() else value


_LAST: tuple[tuple[tuple[str, str], ...], Settings | None] = ((), None)


def settings() -> Settings:
    """The current ``SPECTOOL_*`` settings (frozen). Rebuilt only when one of the variables
    changed: hot paths (one read per forward) pay a scan of the environment."""
    global _LAST
    snapshot = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("SPECTOOL_")))
    cached = _LAST[1]
    if cached is not None and _LAST[0] == snapshot:
        return cached
    try:
        value = Settings()
    except ValidationError as exc:
        bad = ", ".join("SPECTOOL_" + str(e["loc"][0]).upper() for e in exc.errors())
        raise ConfigError(f"bad value in {bad}: {exc.errors()[0]['msg']}") from exc
    _LAST = (snapshot, value)
    return value
