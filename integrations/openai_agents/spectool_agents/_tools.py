"""Function tools of an Agents SDK agent as spectool tools, and the invoker that serves them.

The SDK has no hook that can substitute a tool's result (``RunHooks`` only observe), so each
declared tool is copied with its ``on_invoke_tool`` wrapped: a call the drafts already ran is
served from the session cache; anything else runs the SDK's own invoker, exactly as before.
An early run goes through the same invoker (argument parsing, the tool's failure handling),
so its output is what the real run would have returned.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from agents import FunctionTool
from agents.tool_context import ToolContext
from agents.tracing import custom_span

from spectool import ConfigError, Effect, Speculator, ToolCall, ToolDefinitionError, ToolSpec

__all__ = ["SpeculativeInvoker", "declared_options", "gated", "tool_spec_of"]

Invoker = Callable[[ToolContext[Any], str], Awaitable[Any]]
_OPTIONS = {"effect", "scope", "ttl", "max_concurrency"}


def declared_options(name: str, declaration: Any) -> dict[str, Any]:
    """ToolSpec options from a user's declaration: an effect name / Effect, or a mapping."""
    if declaration is None:
        return {"effect": Effect.MUTATING}
    if isinstance(declaration, (str, Effect)):
        declaration = {"effect": declaration}
    if not isinstance(declaration, Mapping) or set(declaration) - _OPTIONS:
        raise ConfigError(f"tool {name!r}: declare an effect, or a mapping of {sorted(_OPTIONS)}")
    options = dict(declaration)
    try:
        options["effect"] = Effect(options.get("effect", Effect.MUTATING))
    except ValueError as exc:
        allowed = ", ".join(e.value for e in Effect)
        raise ConfigError(f"tool {name!r}: effect must be one of {allowed}") from exc
    return options


def _takes_context(tool: FunctionTool) -> bool:
    """True when the tool's function receives the run context (its result may depend on it)."""
    fn = getattr(tool, "__wrapped__", None)
    if not callable(fn):
        return False
    from agents.function_schema import function_schema

    try:
        return bool(function_schema(fn).takes_context)
    except Exception:  # noqa: BLE001 - unknown shape: assume it does (conservative)
        return True


def gated(tool: FunctionTool) -> bool:
    """True when the SDK stops the call before it runs: ``needs_approval`` (True or a policy
    function, which may say yes) or tool input guardrails (which may reject it). Such a tool
    never runs early: that would do what the approval or guardrail is there to stop."""
    return getattr(tool, "needs_approval", False) is not False or bool(
        getattr(tool, "tool_input_guardrails", None)
    )


def tool_spec_of(tool: FunctionTool, invoker: Invoker, declaration: Any) -> ToolSpec:
    """The spectool spec of a function tool; its early runs go through ``invoker``."""
    options = declared_options(tool.name, declaration)
    options["gated"] = gated(tool)
    if options["effect"].speculable and not options["gated"] and _takes_context(tool):
        raise ToolDefinitionError(
            f"tool {tool.name!r} reads the run context: it cannot run before the model asks for it",
            tool=tool.name,
        )

    async def run_early(**arguments: Any) -> Any:
        raw = json.dumps(arguments, ensure_ascii=False)
        ctx = ToolContext(
            context=None, tool_name=tool.name, tool_call_id=f"spectool-{uuid.uuid4().hex}", tool_arguments=raw
        )
        return await invoker(ctx, raw)

    return ToolSpec(
        name=tool.name,
        description=tool.description,
        parameters=tool.params_json_schema,
        fn=run_early,
        **options,
    )


class SpeculativeInvoker:
    """Stands in for a FunctionTool's ``on_invoke_tool``: cached outcome if the drafts ran the
    call, else the SDK's invoker; mutating tools bump their scope (early reads go stale)."""

    def __init__(self, inner: Invoker, speculator: Speculator, spec: ToolSpec) -> None:
        self._inner, self._speculator, self._spec = inner, speculator, spec

    def __getattr__(self, name: str) -> Any:  # the SDK's markers and prepare_arguments
        return getattr(self._inner, name)

    def __agents_bind_function_tool__(self, function_tool: FunctionTool) -> SpeculativeInvoker:
        bind = getattr(self._inner, "__agents_bind_function_tool__", None)
        inner = bind(function_tool) if callable(bind) else self._inner
        return SpeculativeInvoker(inner, self._speculator, self._spec)

    async def __call__(self, ctx: ToolContext[Any], input: str) -> Any:
        spec = self._spec
        if not spec.speculable:
            self._speculator.invalidate(spec.scope)
            try:
                return await self._inner(ctx, input)
            finally:
                self._speculator.invalidate(spec.scope)
        try:
            arguments = json.loads(input) if input else {}
        except ValueError:
            arguments = None
        if isinstance(arguments, dict) and self._speculator.cache.is_open:
            outcome = await self._speculator.lookup(ToolCall(spec.name, arguments))
            if outcome is not None:
                # in the SDK's trace, under this call's function span (which lasts ~0 ms)
                ran = round(max(0.0, outcome.finished - outcome.started), 6)
                data = {"tool": spec.name, "early_run_s": ran}
                with custom_span("spectool.hit", data):
                    return outcome.unwrap()
        return await self._inner(ctx, input)
