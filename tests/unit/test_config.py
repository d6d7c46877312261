from __future__ import annotations

import importlib.abc
import re
import sys
from pathlib import Path

import pytest

from molens import config
from molens.config import ConfigError, LogLevel, load, load_dict, zmq_endpoint

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_configs_load_with_their_documented_values() -> None:
    cfg = load(ROOT / "conf" / "node.yaml", env={})
    assert cfg == load_dict({}, env={}, source=cfg.source)  # node.yaml documents exactly the defaults
    assert cfg.http.port == 18081 and cfg.http.host == "127.0.0.1"
    assert cfg.bootstrap_voters() == ("n1",)
    ports = set()
    for i in (1, 2, 3):
        c = load(ROOT / "conf" / "cluster" / f"n{i}.yaml", env={})
        assert c.node.id == f"n{i}"
        assert c.http.port == 18080 + i
        assert c.bootstrap_voters() == ("n1", "n2", "n3")
        assert c.self_peer().raft_addr == c.raft.bind_addr
        assert c.self_peer().admin_addr == c.admin.bind_addr
        ports |= {c.raft.bind_addr, c.rpc.bind_addr, c.admin.bind_addr, c.http.addr}
    assert len(ports) == 12


def test_defaults_cover_the_whole_product() -> None:
    cfg = load_dict({}, env={})
    assert cfg.scheduler.tick_ms == 10
    assert cfg.scheduler.default_max_retries == 3
    assert cfg.scheduler.ack_ttl == 3
    assert cfg.scheduler.max_payload_bytes == 65536
    assert cfg.scheduler.history_max_records_per_task == 200
    assert cfg.admin.bind_addr.startswith("127.0.0.1:")
    assert cfg.logging.level is LogLevel.INFO
    assert cfg.worker.engine == "loop"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"raft": {"tick_ms": 0}}, "config error: raft.tick_ms: must be an integer in 1..10000"),
        ({"raft": {"election_ticks": "ten"}}, "config error: raft.election_ticks: must be an integer"),
        ({"raft": {"election_ticks": 1}}, "config error: raft.election_ticks: must be an integer >= 2"),
        ({"raft": {"heartbeat_ticks": 10}}, "config error: raft.heartbeat_ticks: must be smaller than"),
        ({"raft": {"electon_ticks": 5}}, "config error: raft.electon_ticks: unknown key"),
        ({"nodes": {}}, "config error: nodes: unknown key"),
        ({"http": {"port": 70000}}, "config error: http.port: must be an integer in 1..65535"),
        ({"http": "x"}, "config error: http: must be a mapping"),
        ({"admin": {"bind_addr": "localhost"}}, "config error: admin.bind_addr: must be host:port"),
        ({"node": {"id": "bad id"}}, "config error: node.id: must match"),
        ({"node": {"id": "n1\n"}}, "config error: node.id: must match"),
        ({"node": {"cpus": "0-x"}}, "config error: node.cpus: 0-x: not a CPU number or a range"),
        ({"node": {"cpus": "3-1"}}, "config error: node.cpus: 3-1: a range must go upwards"),
        ({"node": {"cpus": "4096"}}, "config error: node.cpus: 4096: CPU numbers go up to 4095"),
        ({"logging": {"level": "LOUD"}}, "config error: logging.level: must be one of"),
        ({"worker": {"concurrency": True}}, "config error: worker.concurrency: must be an integer"),
        ({"worker": {"engine": "asyncio"}}, "config error: worker.engine: must be loop or threads"),
        ({"worker": {"signing_secret_next": "s2"}}, "config error: worker.signing_secret_next: is set without "
                                                    "worker.signing_secret"),
        ({"tracing": {"otlp_endpoint": "127.0.0.1:4318"}}, "config error: tracing.otlp_endpoint: must be an http(s) URL"),
        (
            {"scheduler": {"callback_policy": {"deny_cidrs": ["10.0.0.0/33"]}}},
            "config error: scheduler.callback_policy.deny_cidrs: not a CIDR",
        ),
        ({"raft": {"curve": {"enabled": True}}}, "config error: raft.curve.secret_key_file: is required"),
        (
            {"cluster": {"peers": [{"id": "n1", "raft_addr": "127.0.0.1:1"}]}},
            "config error: cluster.peers[0].rpc_addr: is required",
        ),
        (
            {"rpc": {"bind_addr": "127.0.0.1:18091"}},
            "config error: rpc.bind_addr: same address as raft.bind_addr",
        ),
    ],
)
def test_bad_values_are_refused_with_key_path_and_reason(data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_dict(data, env={})
    assert str(exc.value).startswith(message), str(exc.value)


def _peer(i: int) -> dict[str, str]:
    return {
        "id": f"n{i}",
        "raft_addr": f"127.0.0.1:{2000 + i}",
        "rpc_addr": f"127.0.0.1:{3000 + i}",
        "http_addr": f"127.0.0.1:{4000 + i}",
    }


def test_node_must_be_a_listed_peer_unless_it_joins() -> None:
    peers = [_peer(1), _peer(2)]
    with pytest.raises(ConfigError, match=r"node.id: 'n3' is not in cluster.peers"):
        load_dict({"node": {"id": "n3"}, "cluster": {"peers": peers}}, env={})
    cfg = load_dict(
        {"node": {"id": "n3"}, "cluster": {"peers": peers, "join_addrs": ["127.0.0.1:5001"]}}, env={}
    )
    assert cfg.bootstrap_voters() == ()
    assert [p.id for p in cfg.initial_peers()] == ["n1", "n2", "n3"]
    with pytest.raises(ConfigError, match=r"cluster.peers\[1\].id: duplicate"):
        load_dict({"cluster": {"peers": [_peer(1), _peer(1)]}}, env={})


def test_a_string_option_from_the_environment_is_taken_as_written() -> None:
    """YAML would read ``0123`` as 83, drop `` #2`` as a comment and refuse ``true``: a token set
    from the environment must be the token written."""
    for token in ("0123", "s3cret #2", "true", "[a, b]", "0x1F", "  spaced  "):
        cfg = load_dict({}, env={"MOLENS_HTTP__AUTH_TOKEN": token})
        assert cfg.http.auth_token == token.strip(), token
    cfg = load_dict({}, env={"MOLENS_HTTP__PORT": "18090", "MOLENS_NODE__ID": "007", "MOLENS_NODE__CPUS": "0"})
    assert (cfg.http.port, cfg.node.id, cfg.node.cpus) == (18090, "007", "0")


def test_env_overrides_are_parsed_and_validated() -> None:
    env = {
        "MOLENS_HTTP__PORT": "18090",
        "MOLENS_RAFT__CURVE__ENABLED": "false",
        "MOLENS_CLUSTER__JOIN_ADDRS": "127.0.0.1:1,127.0.0.1:2",
        "MOLENS_NODE__DATA_DIR": "/tmp/x",
        "UNRELATED": "1",
    }
    cfg = load_dict({"http": {"port": 1}}, env=env)
    assert cfg.http.port == 18090
    assert cfg.cluster.join_addrs == ("127.0.0.1:1", "127.0.0.1:2")
    assert cfg.data_dir == Path("/tmp/x")
    with pytest.raises(ConfigError, match=r"^config error: raft.tick_ms: must be an integer in"):
        load_dict({}, env={"MOLENS_RAFT__TICK_MS": "-5"})
    with pytest.raises(ConfigError, match=r"^config error: raft.tikc_ms: unknown key"):
        load_dict({}, env={"MOLENS_RAFT__TIKC_MS": "5"})


def test_file_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load(tmp_path / "missing.yaml", env={})
    bad = tmp_path / "bad.yaml"
    bad.write_text("raft: [unclosed\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load(bad, env={})
    lst = tmp_path / "list.yaml"
    lst.write_text("- 1\n")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load(lst, env={})


def test_zmq_endpoint() -> None:
    assert zmq_endpoint("127.0.0.1:18091") == "tcp://127.0.0.1:18091"
    assert zmq_endpoint("[::1]:5") == "tcp://[::1]:5"
    assert config.parse_addr("host:1") == ("host", 1)


def test_api_token_can_come_from_a_file_such_as_a_compose_secret(tmp_path: Path) -> None:
    secret = tmp_path / "api_token"
    secret.write_text("s3cret-token\n")
    cfg = load_dict({}, {"MOLENS_HTTP__AUTH_TOKEN_FILE": str(secret)})
    assert cfg.http.auth_token == "s3cret-token"
    with pytest.raises(ConfigError, match=r"either http\.auth_token or http\.auth_token_file"):
        load_dict({"http": {"auth_token": "a", "auth_token_file": str(secret)}})
    secret.write_text(" \n")
    with pytest.raises(ConfigError, match="is empty"):
        load_dict({"http": {"auth_token_file": str(secret)}})
    with pytest.raises(ConfigError, match=r"http.auth_token_file.*cannot read"):
        load_dict({"http": {"auth_token_file": str(tmp_path / "missing")}})


def test_container_configs_load(tmp_path: Path) -> None:
    token = tmp_path / "api_token"
    token.write_text("t0ken\n")
    with pytest.raises(ConfigError, match="auth_token_file"):  # the image does not start open by default
        load(ROOT / "conf" / "container" / "node.yaml", env={})
    image = load(ROOT / "conf" / "container" / "node.yaml", env={"MOLENS_HTTP__AUTH_TOKEN_FILE": str(token)})
    assert image.http.addr == "0.0.0.0:18081" and str(image.data_dir) == "/var/lib/molens/data"
    assert image.http.auth_token == "t0ken"
    # a lone node has no peers: no node port on the container's network without CURVE
    assert (image.raft.bind_addr, image.rpc.bind_addr) == ("127.0.0.1:18091", "127.0.0.1:18101")
    assert not image.raft.curve.enabled
    env = {"MOLENS_NODE__ID": "n2", "MOLENS_HTTP__AUTH_TOKEN_FILE": str(token)}
    c = load(ROOT / "conf" / "compose" / "cluster.yaml", env=env)
    assert c.node.id == "n2" and c.http.auth_token == "t0ken"
    assert c.bootstrap_voters() == ("n1", "n2", "n3")
    assert c.self_peer().raft_addr == "molens-n2:18091" and c.self_peer().http_addr == "127.0.0.1:18082"
    assert c.raft.bind_addr == "0.0.0.0:18091" and c.raft.curve.enabled  # the cluster's ports: every interface, CURVE
    grace = re.search(r"stop_grace_period: (\d+)s", (ROOT / "compose.yaml").read_text())
    assert grace is not None
    # the hand-over's bound, then HTTP 5 s, the term 5 s, fires 10 s and Raft 10 s (docs/deploy.md#stopping)
    assert c.node.stop_timeout_s + 30 <= int(grace.group(1))


class _NoOtel(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: object, target: object = None) -> None:
        if name.partition(".")[0] == "opentelemetry":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def test_span_export_without_the_otel_extra_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint = {"tracing": {"otlp_endpoint": "http://127.0.0.1:4318/v1/traces"}}
    assert load_dict(endpoint, env={}).tracing.otlp_endpoint == "http://127.0.0.1:4318/v1/traces"
    # as if the extra were not installed: nothing named opentelemetry can be found
    for name in [m for m in sys.modules if m.partition(".")[0] == "opentelemetry"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_NoOtel(), *sys.meta_path])
    with pytest.raises(ConfigError, match=r"tracing.otlp_endpoint: .*pip install 'molens\[server,otel\]'"):
        load_dict(endpoint, env={})
