"""What an MCP tool's ``ToolAnnotations`` let spectool do with it, decided conservatively.

MCP annotations are hints from the server, so only an explicit promise counts:

* ``readOnlyHint`` must be ``True`` for a tool to be read-only; missing or ``False`` is mutating.
* A read-only tool that is also ``destructiveHint=True`` contradicts itself: mutating.
* ``openWorldHint`` defaults to true in the MCP specification, so a read-only tool is taken to
  *reach outside* (a web search, a third-party API) unless it says ``openWorldHint=False``.
  An early run of such a tool tells an outside service about a call the model may never make,
  so it does not run early unless the user opts in (``allow_external=True``).
* ``idempotentHint`` says nothing about reads (a read-only tool is idempotent anyway) and a
  tool is never *pure* from annotations: read-only is not pure (reads depend on state).

Users override any of this per tool by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from spectool import ConfigError, Effect

__all__ = ["McpEffect", "by_name", "effect_from_annotations", "spec_options"]

_HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")


@dataclass(frozen=True)
class McpEffect:
    """The reading of one tool's annotations: its effect, whether it reaches outside, and why."""

    effect: Effect
    external: bool
    reason: str

    def early(self, allow_external: bool = False) -> bool:
        """May a call of this tool run before the model asks for it?"""
        return self.effect.speculable and (allow_external or not self.external)


def _hint(annotations: Any, name: str) -> Any:
    if isinstance(annotations, Mapping):
        return annotations.get(name)
    return getattr(annotations, name, None)


def effect_from_annotations(annotations: Any) -> McpEffect:
    """Map ``ToolAnnotations`` (the mcp type, a mapping of its fields, or None) to an effect."""
    if annotations is None or all(_hint(annotations, h) is None for h in _HINTS):
        return McpEffect(Effect.MUTATING, False, "no annotations: mutating")
    if _hint(annotations, "readOnlyHint") is not True:
        return McpEffect(Effect.MUTATING, False, "readOnlyHint is not true: mutating")
    if _hint(annotations, "destructiveHint") is True:
        return McpEffect(Effect.MUTATING, False, "read-only and destructive contradict: mutating")
    if _hint(annotations, "openWorldHint") is False:
        return McpEffect(Effect.READ_ONLY, False, "read-only, closed world")
    return McpEffect(Effect.READ_ONLY, True, "read-only, open world (the MCP default): reaches outside")


def spec_options(
    name: str,
    annotations: Any,
    *,
    scope: str,
    override: Any = None,
    allow_external: bool = False,
) -> dict[str, Any]:
    """``ToolSpec`` options (effect, scope, …) for a tool: its annotations read conservatively,
    then the user's override (an effect name / ``Effect``, or a mapping of ToolSpec options)."""
    mapped = effect_from_annotations(annotations)
    options: dict[str, Any] = {"effect": mapped.effect, "scope": scope}
    external = mapped.external
    if override is not None:
        if isinstance(override, (str, Effect)):
            override = {"effect": override}
        if not isinstance(override, Mapping):
            raise ConfigError(f"override for MCP tool {name!r} must be an effect or a mapping")
        override = dict(override)
        external = bool(override.pop("external", False if "effect" in override else external))
        if "effect" in override:
            try:
                override["effect"] = Effect(override["effect"])
            except ValueError as exc:
                allowed = ", ".join(e.value for e in Effect)
                raise ConfigError(f"MCP tool {name!r}: effect must be one of {allowed}") from exc
        options.update(override)
    if external and options["effect"].speculable and not allow_external:
        options["external"] = True  # not run early unless the session opts in
    return options


def by_name(
    overrides: Mapping[str, Any] | None, confirm: Iterable[str], names: set[str], missing: str
) -> tuple[dict[str, Any], set[str]]:
    """``overrides`` and ``confirm`` as a dict and a set, each naming only tools in ``names``:
    ConfigError ("... name tools {missing}: ...") otherwise, since a typo would do nothing."""
    overrides, confirm = dict(overrides or {}), set(confirm)
    for option, given in (("overrides", set(overrides)), ("confirm", confirm)):
        if unknown := given - names:
            raise ConfigError(f"{option} name tools {missing}: {', '.join(sorted(unknown))}")
    return overrides, confirm
