"""Suite-wide pytest hooks."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest_plugins = ("tests.carrier",)  # the `carrier` fixture: a delivery through urllib3 or the loop engine

# Tests that build the product in the repository tree (`python -m build`/`pip wheel`/`pip install` of the
# checkout write build/ and molens.egg-info there; the container tests also start the one Docker engine and
# the compose cluster of fixed names and ports): never two of them at once, so under pytest-xdist they form
# one unit of work that a single worker runs in turn.
IN_TREE_BUILDS = (
    "tests/container/",
    "tests/integration/test_dist.py",
    "tests/integration/test_cli_install.py",
    "tests/integration/test_client_install.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the browser tests last.

    Playwright's sync API keeps an event loop running in the main thread for as long as its
    session-scoped fixture lives; any later test calling ``asyncio.run`` (the checkpoint suite does)
    would fail with "cannot be called from a running event loop".
    """
    items.sort(key=lambda it: "tests/browser/" in it.nodeid.replace("\\", "/"))


_CALL_STARTED = pytest.StashKey[float]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    item.stash[_CALL_STARTED] = time.time()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    """A failed test that ran molens nodes (tests/integration/conftest.py's ``NodeProc``) shows the
    tail of each node log written while it ran, in a report section of its own: a failure seen once
    under a full run's load can then be read, not guessed."""
    outcome = yield
    rep = outcome.get_result()
    if rep.when != "call" or not rep.failed:
        return
    nodes = sys.modules.get("tests.integration.conftest")
    t0 = item.stash.get(_CALL_STARTED, None)
    if nodes is None or t0 is None:
        return
    text = nodes.node_logs_since(t0)
    if text:
        rep.sections.append(("molens node logs (last lines of each written during the test)", text))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``-n N`` (scripts/test): one unit of work per test file, so a module's shared fixtures
    (``cluster3``, a module's node or servers) start once; the in-tree builds are one unit. Units go to
    the workers in collection order (not largest first), so each worker still runs its browser tests
    after everything else (see above)."""
    from xdist.scheduler import LoadFileScheduling

    class FileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "in-tree builds" if path.startswith(IN_TREE_BUILDS) else path

    config.option.loadscopereorder = False
    return FileScheduling(config, log)


@pytest.fixture(autouse=True)
def _cpus_left_as_they_were() -> Iterator[None]:
    """A test leaves the test process on the CPUs and the scheduling policy it had: a node started
    in this process pins it (``node.cpus: auto``) unless its config says ``all``, and sets the
    policy ``node.os_scheduling`` names for it; every later test of the worker would run so. The test
    that did it errors here, and the CPUs and the policy are given back."""
    before, policy = os.sched_getaffinity(0), os.sched_getscheduler(0)
    yield
    after, policy_after = os.sched_getaffinity(0), os.sched_getscheduler(0)
    if after != before:
        os.sched_setaffinity(0, before)
        pytest.fail(f"the test left the test process on CPUs {sorted(after)} (it had {sorted(before)}): "
                    "a node run in the test process needs node.cpus: all")
    if policy_after != policy:
        os.sched_setscheduler(0, policy, os.sched_param(0))
        pytest.fail(f"the test left the test process under scheduling policy {policy_after} (it had {policy})")
