"""One agent's τ² world: the domain's own tools on a fresh copy of its database.

Effects come from τ²'s tool types (``@is_tool(ToolType.…)``):

* ``READ``    → ``read_only``, scope = the domain: valid until a write of the same domain runs;
* ``WRITE``   → ``mutating``: never run early;
* ``THINK``   → ``pure``: τ²'s ``think`` reads and writes nothing and answers a constant;
* ``GENERIC`` → ``mutating``: τ² puts tools it does not classify there — ``calculate`` is pure
  but ``transfer_to_human_agents`` hands the customer to a person — and an effect the type does
  not state is never guessed safe (the rule the BFCL table follows for unobserved methods).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import pickle
import threading
from collections.abc import Mapping
from typing import Any

from spectool import Effect, ToolCall
from spectool.errors import ConfigError, ToolNotFoundError

from ._wheel import domain_data, tau2_root

__all__ = ["EFFECT_OF_TYPE", "Tau2World", "template"]

EFFECT_OF_TYPE = {
    "read": Effect.READ_ONLY,
    "write": Effect.MUTATING,
    "think": Effect.PURE,
    "generic": Effect.MUTATING,
}
_lock = threading.Lock()


class _Template:
    """A domain's environment loaded once; its database pickled, so a fresh copy is one load."""

    def __init__(self, domain: str) -> None:
        domain_data(domain)  # ConfigError for an unknown domain
        tau2_root()
        try:
            from loguru import logger

            logger.disable("tau2")  # τ² logs every write at WARNING; the bench reports what it needs
            self.module = importlib.import_module(f"tau2.domains.{domain}.environment")
            env = self.module.get_environment()
        except ImportError as exc:
            raise ConfigError(f"cannot import τ²'s {domain} tools: {exc} (install spectool-bench)") from exc
        self.domain = domain
        self.db = pickle.dumps(env.tools.db, protocol=pickle.HIGHEST_PROTOCOL)
        self.tools = [t.openai_schema for t in env.get_tools()]
        self.types = {name: env.tools.tool_type(name).value for name in env.tools.tools}


@functools.cache
def _template(domain: str) -> _Template:
    return _Template(domain)


def template(domain: str) -> _Template:
    with _lock:  # one load per domain even when agents start together
        return _template(domain)


class Tau2World:
    """Fresh τ² environment of one task: ``call`` runs a tool, ``state`` digests the database."""

    def __init__(self, domain: str, initial_state: Mapping[str, Any] | None = None) -> None:
        t = template(domain)
        self.domain, self._types = domain, t.types
        self.env = t.module.get_environment(db=pickle.loads(t.db))
        if initial_state:
            self._initialize(initial_state)

    def _initialize(self, state: Mapping[str, Any]) -> None:
        # tau2 is the extracted wheel on sys.path (no distribution): imported by name, like its domains
        models = importlib.import_module("tau2.data_model.tasks")
        InitializationData, EnvFunctionCall = models.InitializationData, models.EnvFunctionCall
        data = state.get("initialization_data")
        actions = state.get("initialization_actions")
        self.env.set_state(
            InitializationData.model_validate(data) if data else None,
            [EnvFunctionCall.model_validate(a) for a in actions] if actions else None,
            [],
        )

    def effect(self, name: str) -> Effect:
        try:
            return EFFECT_OF_TYPE[self._types[name]]
        except KeyError:
            raise ToolNotFoundError(f"no τ² {self.domain} tool named {name!r}", tool=name) from None

    def scope(self, name: str) -> str:
        return f"tau2:{self.domain}"

    def call(self, call: ToolCall) -> str:
        """Run one call; errors come back as text, as τ² reports them to the agent."""
        try:
            out = self.env.use_tool(call.name, **dict(call.arguments))
            self.env.sync_tools()
        except Exception as exc:  # noqa: BLE001 - tool errors are observations for the model
            return f"Error: {exc}"
        return str(self.env.to_json_str(out))

    def state(self) -> str:
        """sha256 of the agent's (and the user's, where the domain has one) database."""
        dbs = [self.env.tools.db.model_dump(mode="json")]
        if getattr(self.env, "user_tools", None) is not None:
            dbs.append(self.env.user_tools.db.model_dump(mode="json"))
        return hashlib.sha256(json.dumps(dbs, sort_keys=True, default=str).encode()).hexdigest()
