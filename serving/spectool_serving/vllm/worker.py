"""Worker-side RPC methods (``--worker-extension-cls``) that feed the O2 proposer.

vLLM mixes this class into its worker class and checks for name clashes itself; the endpoint
calls these through ``engine_client.collective_rpc`` — the route vLLM's endpoint-plugin
contract prescribes for engine-side behaviour. Every method is harmless without the proposer.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ToolCacheWorkerExtension"]


class ToolCacheWorkerExtension:
    model_runner: Any  # provided by vLLM's worker class that this is mixed into

    def _spectool_proposer(self) -> Any:
        from .proposer import ToolCacheProposer

        drafter = getattr(getattr(self, "model_runner", None), "drafter", None)
        return drafter if isinstance(drafter, ToolCacheProposer) else None

    def spectool_attach(self, format_name: str | None = None) -> bool:
        """Give the proposer its runner (for row -> request id); True if O2 is active."""
        p = self._spectool_proposer()
        if p is not None:
            p.attach(self.model_runner, format_name)
        return p is not None

    def spectool_open(self, tag: str, response_id: str, engine_ids: list[str]) -> None:
        """Start a scope ``(tenant tag, response id)`` and register its exact engine ids."""
        p = self._spectool_proposer()
        if p is not None:
            p.mirror.open((tag, response_id), engine_ids)

    def spectool_put(self, items: list[tuple[str, str, str, str, float]]) -> int:
        """Mirror entries ``(tenant tag, response id, name, arguments text, expires wall time)``."""
        p = self._spectool_proposer()
        if p is None:
            return 0
        for tag, rid, name, args, expires in items:
            p.mirror.put((tag, rid), name, args, expires)
        return len(items)

    def spectool_drop(self, tag: str, response_id: str) -> None:
        p = self._spectool_proposer()
        if p is not None:
            p.mirror.drop((tag, response_id))

    def spectool_stats(self, tag: str | None = None) -> dict:
        """Counters; rejected-draft texts only of the asking tenant's (``tag``) rows."""
        p = self._spectool_proposer()
        return (
            {"o2": False}
            if p is None
            else {"o2": True, "mirrored_responses": len(p.mirror), **p.counters.as_dict(tag)}
        )
