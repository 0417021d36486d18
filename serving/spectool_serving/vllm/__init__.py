"""spectool on a stock vLLM: the tool cache endpoint, O2 drafting and O3 continuation as plugins.

Nothing here imports vLLM until vLLM itself loads a piece (entry points, ``custom_class``
proposer, worker extension), so ``import spectool_serving.vllm`` is safe without vLLM.

Pieces and where vLLM loads them:

* ``vllm.endpoint_plugins`` entry ``spectool`` → :func:`endpoint_plugin` (API server
  process): ``POST /cache-tool-output/{response_id}``, ``GET /spectool/stats`` and a
  replacement ``POST /v1/chat/completions`` that continues cached tool calls (O3). Opt-in:
  loaded only when ``VLLM_PLUGINS`` names ``spectool``.
* ``vllm.general_plugins`` entry ``spectool`` → :func:`register` (every vLLM process): checks
  the version pin and logs that no vLLM code is patched. vLLM loads general plugins in every
  process of any installation that has spectool beside it, so outside the supported range it
  logs a warning and stays off: it never breaks a vLLM it was not made for.
* ``--worker-extension-cls spectool_serving.vllm.worker.ToolCacheWorkerExtension``: the
  worker-side RPC methods the endpoint calls to mirror cached calls next to the proposer.
* ``--speculative-config '{"method": "custom_class", "model":
  "spectool_serving.vllm.proposer.ToolCacheProposer", ...}'``: O2.

:func:`serve` (``spectool serve --backend vllm``) starts vLLM's OpenAI server with all four;
whether O2 is among them is decided at start by :func:`choose_o2` (``--o2 auto|on|off``).
"""

from __future__ import annotations

from typing import Any

from spectool.errors import ConfigError

from . import _o2choice
from ._compat import SUPPORTED_VLLM, check_vllm_version
from ._o2choice import *  # noqa: F403  (the O2 start-time choice, as its __all__ names it)

__all__ = ["SUPPORTED_VLLM", "check_vllm_version", "endpoint_plugin", "register", "serve"]
__all__ += _o2choice.__all__


def register() -> bool:
    """``vllm.general_plugins`` hook: version gate; spectool patches nothing in vLLM.

    Returns whether the plugin is on: outside :data:`SUPPORTED_VLLM` (and without
    ``SPECTOOL_VLLM_ALLOW_ANY_VERSION=1``) it logs a warning and does nothing else."""
    import vllm
    from vllm.logger import init_logger

    log = init_logger("vllm.spectool")
    try:
        version = check_vllm_version(vllm.__version__)
    except ConfigError as exc:
        log.warning("spectool plugin stays off: %s", exc)
        return False
    log.info(
        "spectool plugin loaded on vLLM %s; "
        "vLLM patches applied: none (endpoint plugin, custom_class "
        "proposer and worker extension use vLLM's own extension points)",
        version,
    )
    return True


def endpoint_plugin() -> Any:
    """``vllm.endpoint_plugins`` factory."""
    from ._endpoint import SpectoolEndpoint

    check_vllm_version()
    return SpectoolEndpoint()


def serve(args: Any) -> int:
    """``spectool serve --backend vllm``: run vLLM's OpenAI server with spectool loaded."""
    from .serve import run

    return run(args)
