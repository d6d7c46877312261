"""The flow routes over a single-node context (docs/api.md#flows): settings are validated with a
400 naming the field and nothing half-applied, replaced whole by PUT, paused/resumed without
touching the limits, listed, deleted; a task's flow_key is validated and patchable."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.api_server import Served, delayed, serve

pytestmark = pytest.mark.integration

F = "/api/v1/flows"


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Served]:
    with serve(tmp_path) as s:
        yield s


def _settings(body: dict[str, Any]) -> dict[str, Any]:
    return {k: body[k] for k in ("rate_per_s", "burst", "concurrency", "paused", "adaptive", "configured")}


def test_put_get_list_pause_resume_delete_a_flow(api: Served) -> None:
    st, _, body = api.call("PUT", f"{F}/api.example.com:443", {"rate_per_s": 20, "burst": 20, "concurrency": 3})
    assert st == 200, body
    assert _settings(body) == {
        "rate_per_s": 20, "burst": 20, "concurrency": 3, "paused": False, "adaptive": False, "configured": True,
    }
    assert body["updated_at"] > 0
    st, _, body = api.call("POST", f"{F}/api.example.com:443/pause")
    assert st == 200 and body["paused"] is True and body["rate_per_s"] == 20 and body["concurrency"] == 3
    st, _, body = api.call("GET", f"{F}/api.example.com:443")
    assert st == 200 and body["paused"] is True
    st, _, body = api.call("POST", f"{F}/api.example.com:443/resume")
    assert st == 200 and body["paused"] is False and body["burst"] == 20
    api.call("PUT", f"{F}/other", {"paused": True})
    st, _, body = api.call("GET", F)
    assert st == 200
    assert [i["key"] for i in body["items"]] == ["api.example.com:443", "other"]
    assert all(i["live"] is False and i["in_flight"] is None for i in body["items"])  # no scheduler here
    st, _, body = api.call("PUT", f"{F}/api.example.com:443", {"concurrency": 1})  # replaced whole
    assert _settings(body)["rate_per_s"] is None and body["concurrency"] == 1
    st, _, body = api.call("DELETE", f"{F}/api.example.com:443")
    assert st == 200 and body["configured"] is False
    assert api.call("GET", f"{F}/api.example.com:443")[0] == 404
    assert api.call("DELETE", f"{F}/api.example.com:443")[0] == 404
    st, _, body = api.call("POST", f"{F}/fresh/pause")  # pausing a flow without settings gives it some
    assert st == 200 and body["paused"] is True and body["configured"] is True
    st, _, body = api.call("POST", f"{F}/never-set/resume")  # resuming one writes nothing
    assert st == 200 and body["paused"] is False and body["configured"] is False
    assert api.call("GET", f"{F}/never-set")[0] == 404


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"rate_per_s": 0}, "rate_per_s", "rate_per_s must be a number > 0.0"),
        ({"rate_per_s": -1}, "rate_per_s", "rate_per_s must be a number > 0.0"),
        ({"rate_per_s": "20"}, "rate_per_s", "rate_per_s must be a number or null, got a string"),
        ({"rate_per_s": 2_000_000}, "rate_per_s", "rate_per_s must be a number <= 1000000.0"),
        ({"rate_per_s": 5, "burst": 0}, "burst", "burst must be an integer >= 1"),
        ({"rate_per_s": 5, "burst": 1.5}, "burst", "burst must be an integer or null, got a number"),
        ({"burst": 5}, "burst", "burst needs rate_per_s"),
        ({"concurrency": 0}, "concurrency", "concurrency must be an integer >= 1"),
        ({"concurrency": True}, "concurrency", "concurrency must be an integer or null, got true or false"),
        ({"paused": 1}, "paused", "paused must be true or false, got an integer"),
        ({"paused": "yes"}, "paused", "paused must be true or false, got a string"),
        ({"adaptive": True}, "adaptive", None),
        ({"rate": 5}, "rate", "unknown field 'rate'; a flow has rate_per_s, burst, concurrency, paused, adaptive"),
        ([1, 2], "body", "the body must be a JSON object of flow limits"),
    ],
)
def test_a_bad_flow_body_is_a_400_naming_the_field_and_changes_nothing(
    api: Served, body: Any, field: str, message: str | None
) -> None:
    api.call("PUT", f"{F}/k", {"rate_per_s": 7})
    st, _, err = api.call("PUT", f"{F}/k", body)
    assert st == 400, err
    assert err["error"]["field"] == field
    if message is not None:  # in the API's words, not the decoder's
        assert err["error"]["message"] == message
    assert api.call("GET", f"{F}/k")[2]["rate_per_s"] == 7


def test_a_bad_flow_key_or_body_is_refused(api: Served) -> None:
    st, _, err = api.call("PUT", f"{F}/" + "a" * 129, {"rate_per_s": 1})
    assert st == 400 and err["error"]["field"] == "key"
    st, _, err = api.call("PUT", f"{F}/a%20b", {"rate_per_s": 1})
    assert st == 400 and err["error"]["field"] == "key"
    st, _, err = api.call("PUT", f"{F}/k", raw=b"{not json", headers={"Content-Type": "application/json"})
    assert st == 400 and err["error"]["field"] == "body"
    assert api.call("GET", F)[2]["items"] == []


def test_a_task_names_its_flow_and_a_patch_moves_it(api: Served) -> None:
    st, _, t = api.call("POST", "/api/v1/tasks", delayed(flow_key="payments"))
    assert st == 201 and t["flow_key"] == "payments"
    st, _, t2 = api.call("PATCH", f"/api/v1/tasks/{t['id']}", {"flow_key": "refunds"})
    assert st == 200 and t2["flow_key"] == "refunds"
    st, _, t3 = api.call("PATCH", f"/api/v1/tasks/{t['id']}", {"flow_key": None})
    assert st == 200 and t3["flow_key"] is None
    st, _, err = api.call("POST", "/api/v1/tasks", delayed(flow_key="no spaces"))
    assert st == 400 and err["error"]["field"] == "flow_key"
    st, _, err = api.call("POST", "/api/v1/tasks", delayed(flow_key="x" * 129))
    assert st == 400 and err["error"]["field"] == "flow_key"


def test_the_python_client_sets_lists_pauses_resumes_and_deletes_flows(api: Served) -> None:
    from molens.client import BadRequestError, MolensClient, TaskNotFoundError

    with MolensClient(api.url) as c:
        got = c.set_flow("[::1]:8080", rate_per_s=5, concurrency=2)
        assert (got["key"], got["rate_per_s"], got["concurrency"]) == ("[::1]:8080", 5, 2)
        assert c.pause_flow("[::1]:8080")["paused"] is True
        assert c.flow("[::1]:8080")["paused"] is True
        assert c.resume_flow("[::1]:8080")["rate_per_s"] == 5
        assert [f["key"] for f in c.flows()] == ["[::1]:8080"]
        with pytest.raises(BadRequestError) as ei:
            c.set_flow("k", burst=3)
        assert ei.value.field == "burst"
        assert c.delete_flow("[::1]:8080")["configured"] is False
        with pytest.raises(TaskNotFoundError):
            c.flow("[::1]:8080")
