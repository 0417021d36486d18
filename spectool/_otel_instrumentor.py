"""``SpectoolInstrumentor``: spectool's tracing as an OpenTelemetry instrumentor.

Registered under the ``opentelemetry_instrumentor`` entry point, so ``opentelemetry-instrument
python app.py`` turns it on with the global providers; in code,
``SpectoolInstrumentor().instrument(tracer_provider=…, meter_provider=…)``. Importing this
module needs ``opentelemetry-instrumentation`` (``pip install 'spectool[tracing]'``); the core
never imports it.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from . import __version__
from ._tracing import instrument, uninstrument

__all__ = ["SpectoolInstrumentor", "__version__"]


class SpectoolInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Spans and metrics for every spectool session (see docs/tracing.md)."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return (f"spectool >= {__version__}",)

    def _instrument(self, **kwargs: Any) -> None:
        instrument(
            kwargs.get("tracer_provider"),
            meter_provider=kwargs.get("meter_provider"),
            capture_content=kwargs.get("capture_content"),
        )

    def _uninstrument(self, **kwargs: Any) -> None:
        uninstrument()
