"""Node config -> API settings, peer addresses -> URLs, Raft proposal failures -> API errors."""

from __future__ import annotations

from molens.actors.peer_errors import LeadershipLost, ProposalRefused
from molens.config import load_dict
from molens.model import ValidationError, check_url
from molens.node_context import from_proposal_error
from molens.raft.core import NotLeaderError
from molens.web.api_context import http_url, settings_from_config
from molens.web.errors import LeaderElsewhere, NoLeader, OutcomeUnknown, Unavailable


def test_settings_come_from_the_http_and_scheduler_sections() -> None:
    cfg = load_dict(
        {
            "node": {"id": "n7"},
            "http": {"auth_token": "tok", "max_body_bytes": 4096, "port": 18090},
            "scheduler": {
                "max_payload_bytes": 1024,
                "default_max_retries": 5,
                "callback_policy": {"deny_hosts": ["evil.example"], "allow_cidrs": ["127.0.0.0/8"]},
            },
        }
    )
    s = settings_from_config(cfg)
    assert (s.node_id, s.auth_token, s.max_body_bytes) == ("n7", "tok", 4096)
    assert (s.limits.max_payload_bytes, s.limits.default_max_retries) == (1024, 5)
    assert "metadata.google.internal" in s.policy.deny_hosts and "evil.example" in s.policy.deny_hosts
    assert "169.254.0.0/16" in s.policy.deny_cidrs
    check_url("http://127.0.0.1:9/x", "callback_url", s.policy, s.limits)
    for bad in ("http://evil.example/", "http://10.0.0.1/", "http://169.254.169.254/"):
        try:
            check_url(bad, "callback_url", s.policy, s.limits)
        except ValidationError:
            continue
        raise AssertionError(f"{bad} was accepted")
    assert (cfg.http.host, cfg.http.port, cfg.http.max_body_bytes) == ("127.0.0.1", 18090, 4096)


def test_http_url_of_a_peer_address() -> None:
    assert http_url("127.0.0.1:18082") == "http://127.0.0.1:18082"
    assert http_url("[::1]:18082") == "http://[::1]:18082"
    assert http_url("") is None


def test_proposal_failures_map_to_api_errors() -> None:
    urls = {"n2": "http://127.0.0.1:18082"}
    e = from_proposal_error(NotLeaderError("n2"), urls.get)
    assert isinstance(e, LeaderElsewhere) and e.leader_url == "http://127.0.0.1:18082" and e.leader_id == "n2"
    assert isinstance(from_proposal_error(NotLeaderError(None), urls.get), NoLeader)
    assert isinstance(from_proposal_error(NotLeaderError("n9"), urls.get), NoLeader)  # address unknown
    assert isinstance(from_proposal_error(LeadershipLost("x"), urls.get), OutcomeUnknown)
    assert isinstance(from_proposal_error(ProposalRefused("x"), urls.get), Unavailable)
    assert isinstance(from_proposal_error(RuntimeError("x"), urls.get), Unavailable)


def test_cluster_status_from_raft_peer_status() -> None:
    import jsonschema

    from molens.web.api_context import cluster_status_from_raft
    from molens.web.openapi import document

    raft = {
        "node_id": "n2",
        "role": "follower",
        "term": 4,
        "leader_id": "n1",
        "last_index": 90,
        "first_index": 1,
        "commit_index": 88,
        "applied_index": 87,
        "snapshot_index": 0,
        "voters": ["n1", "n2", "n3"],
        "learners": ["n4"],
        "peers": [
            {"id": "n2", "suffrage": "voter", "raft_addr": "127.0.0.1:18092", "http_addr": "127.0.0.1:18082"},
            {"id": "n1", "suffrage": "voter", "http_addr": "127.0.0.1:18081", "match": 88, "state": "replicate"},
            {"id": "n3", "suffrage": "voter", "http_addr": "127.0.0.1:18083"},
            {"id": "n4", "suffrage": "learner"},
        ],
    }
    st = cluster_status_from_raft(raft)
    schema = {"$ref": "#/components/schemas/ClusterStatus", "components": document()["components"]}
    jsonschema.Draft202012Validator(schema).validate(st)
    assert st["leader_url"] == "http://127.0.0.1:18081"
    assert [(n["id"], n["role"], n["http_url"]) for n in st["nodes"]] == [
        ("n1", "leader", "http://127.0.0.1:18081"),
        ("n2", "follower", "http://127.0.0.1:18082"),
        ("n3", "follower", "http://127.0.0.1:18083"),
        ("n4", "learner", None),
    ]
    assert st["nodes"][0]["match_index"] == 88 and st["nodes"][0]["state"] == "replicate"
    assert st["commit_index"] == 88 and "peers" not in st
