"""Public accessor of spectool's ``SPECTOOL_*`` environment variables (one table:
docs/configuration.md)."""

from ._settings import settings

__all__ = ["settings"]
