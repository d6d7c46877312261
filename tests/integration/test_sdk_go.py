"""The Go SDK (``sdk/go``): ``go test ./...`` against real nodes started here (see ``sdk_nodes``),
offline (no module proxy; the SDK has no dependency), with its build cache under ``build/``."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from tests.integration.conftest import ROOT
from tests.integration.sdk_nodes import run_runner, sdk_nodes

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SDK = ROOT / "sdk" / "go"


def go_env() -> dict[str, str]:
    cache = ROOT / "build" / "go"
    return {
        "GOFLAGS": "-mod=mod",
        "GOPROXY": "off",
        "GOSUMDB": "off",
        "GOCACHE": str(cache / "cache"),
        "GOPATH": str(cache / "path"),
        "CGO_ENABLED": "0",
    }


@pytest.mark.timeout(300)
def test_go_sdk_passes_its_tests_against_a_real_node_and_a_3_node_cluster(tmp_path: Path) -> None:
    go = shutil.which("go")
    assert go, "go is missing: scripts/test installs Debian's golang-go"
    run_runner([go, "vet", "./..."], SDK, go_env(), 120)
    run_runner([go, "vet", "."], ROOT / "scripts" / "bench" / "sdk_go", go_env(), 120)  # the benchmark's program
    with sdk_nodes(tmp_path) as env:
        out = run_runner([go, "test", "-count=1", "-v", "-timeout", "240s", "./..."], SDK, {**go_env(), **env}, 280)
    skipped = re.findall(r"--- SKIP: (\S+)", out)
    assert not skipped, f"Go tests skipped with the nodes' addresses set: {skipped}"
    passed = re.findall(r"--- PASS: (\S+)", out)
    assert "TestKillingTheLeaderMidBatchLosesAndDuplicatesNothing" in passed
    for name in ("TestScheduleRetryAndFlowFieldsRoundTripThroughCreateGetAndUpdate", "TestFlowsSetPauseResumeListDelete",
                 "TestDeadLettersListGetRedriveAndDelete", "TestAStaleVersionAfterALostResponseIsAnUnknownOutcome",
                 "TestAnAdminMakesANamespaceAndAWriterKeyThatCreatesAndListsInIt",
                 "TestAReadersWriteIsForbiddenAndAQuotaIsQuotaExceeded"):
        assert name in passed, (name, passed)
    assert len(passed) >= 19, passed
    assert os.path.isdir(go_env()["GOCACHE"])
