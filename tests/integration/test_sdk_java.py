"""The Java SDK (``sdk/java``): built with ``javac --release 8`` by ``sdk/java/build.sh``, its JUnit 4
tests run on the installed JDK against real nodes started here (see ``sdk_nodes``)."""

from __future__ import annotations

import re
import shutil
import zipfile
from pathlib import Path

import pytest

from tests.integration.conftest import ROOT
from tests.integration.sdk_nodes import run_runner, sdk_nodes

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SDK = ROOT / "sdk" / "java"


@pytest.mark.timeout(300)
def test_java_sdk_builds_for_jdk8_and_passes_its_tests_against_a_real_node_and_a_3_node_cluster(
    tmp_path: Path,
) -> None:
    assert shutil.which("javac"), "javac is missing: scripts/test installs Debian's default-jdk-headless"
    env_build = {"MOLENS_JAVA_BUILD": str(tmp_path / "build")}
    with sdk_nodes(tmp_path / "nodes") as env:
        out = run_runner([str(SDK / "build.sh"), "test"], SDK, {**env, **env_build}, 280)
    m = re.search(r"^OK \((\d+) tests\)$", out, re.MULTILINE)
    assert m, f"JUnit did not report OK:\n{out[-5000:]}"
    assert int(m.group(1)) >= 24, out[-2000:]  # FlowsTest, DeadLettersTest, TenancyTest and the task-fields test included
    assert "tasks, each exactly once" in out
    with zipfile.ZipFile(tmp_path / "build" / "molens-client.jar") as jar:
        head = jar.read("dev/molens/client/MolensClient.class")[:8]
    assert head[:4] == b"\xca\xfe\xba\xbe" and int.from_bytes(head[6:8], "big") == 52, "not Java 8 class files"
