"""Suite-wide pytest hooks."""

from __future__ import annotations

import pytest

pytest_plugins = ("tests.carrier",)  # the `carrier` fixture: a delivery through urllib3 or the loop engine


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the browser tests last.

    Playwright's sync API keeps an event loop running in the main thread for as long as its
    session-scoped fixture lives; any later test calling ``asyncio.run`` (the checkpoint suite does)
    would fail with "cannot be called from a running event loop".
    """
    items.sort(key=lambda it: "tests/browser/" in it.nodeid.replace("\\", "/"))
