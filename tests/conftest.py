"""Shared fixtures, kept light: async tests run on asyncio via anyio's pytest plugin.

Helpers add their own fixtures in their test modules (or a conftest in a subfolder).
"""

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
