"""The alert rules and the dashboard that ship in deploy/ (docs/observability.md#alerts, #dashboard):
``promtool check rules`` and ``promtool test rules`` pass, and every metric the rules and the
dashboard's queries name is one a live node exports on ``/metrics`` (which in turn exports only
families the documented table lists)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import urllib3
import yaml

from molens.web.metrics import catalogue

from .conftest import wait_for
from .recording_receiver import RecordingReceiver
from .rest import call, one_task_node

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "alerts.yaml"
RULES_TEST = ROOT / "deploy" / "prometheus" / "alerts_test.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "molens.json"
_METRIC = re.compile(r"\bmolens_[a-z0-9_]+")


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not installed: it comes with Debian's prometheus package "
                    "(apt-get install --no-install-recommends prometheus; scripts/test installs it)")
    return path


def test_the_alert_rules_pass_promtool_check_and_their_unit_tests() -> None:
    promtool = _promtool()
    check = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 9 rules found" in check.stdout
    unit = subprocess.run([promtool, "test", "rules", RULES_TEST.name], capture_output=True, text=True,
                          timeout=120, cwd=RULES_TEST.parent)
    assert unit.returncode == 0, unit.stdout + unit.stderr
    tested = {t["alertname"] for case in yaml.safe_load(RULES_TEST.read_text())["tests"]
              for t in case["alert_rule_test"]}
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    assert tested == alerts  # every alert has a unit test


def _queries() -> dict[str, str]:
    """Every PromQL expression of the rules and the dashboard, by where it is."""
    out = {f"rule {r['alert']}": r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    for p in json.loads(DASHBOARD.read_text())["panels"]:
        for t in p["targets"]:
            out[f"panel {p['title']!r} {t['refId']}"] = t["expr"]
    return out


@pytest.mark.timeout(120)
def test_every_metric_the_rules_and_the_dashboard_name_exists_on_a_live_node(
        tmp_path: Path, receiver: RecordingReceiver) -> None:
    with one_task_node(tmp_path) as n:
        flow = f"127.0.0.1:{receiver.port}"
        st, _ = call(n, "PUT", f"/api/v1/flows/{flow}", {"rate_per_s": 100})  # a flow with a rate limit
        assert st == 200
        st, t = call(n, "POST", "/api/v1/tasks", {"type": "delayed", "interval_ms": 10,
                                                  "callback_url": receiver.url("/ok/live")})
        assert st == 201, t
        wait_for(lambda: receiver.by_tag("live"), 30, "the callback")

        queries = _queries()
        named = set().union(*(_METRIC.findall(q) for q in queries.values()))
        seen: list[set[str]] = [set()]

        def scraped() -> bool:
            # the fire's counters and histograms reach the registry a moment after the callback
            r = urllib3.request("GET", n.http_url + "/metrics", retries=False, timeout=10)
            seen[0] = {line.split("{")[0].split(" ")[0] for line in r.data.decode().splitlines()
                       if line and not line.startswith("#")}
            return named <= seen[0]

        wait_for(scraped, 30, "every metric the rules and the dashboard name on /metrics", interval=0.2)
        names = seen[0]
        missing = {where: sorted(set(_METRIC.findall(q)) - names) for where, q in queries.items()}
        assert {k: v for k, v in missing.items() if v} == {}
        assert all(_METRIC.search(q) for q in _queries().values())  # every query names a metric

        documented = {f.name for f in catalogue()}
        assert not [x for x in names if x.endswith("_created")]  # no creation-time series beside counters
        bases = {re.sub(r"_(bucket|count|sum)$", "", x) for x in names}
        undocumented = {b for b in bases if b not in documented and f"{b}_total" not in documented}
        assert undocumented == set()  # docs/observability.md's table lists every family a node exports
