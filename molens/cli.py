"""``molens-node``: run a node in the foreground, or start/stop/restart/status a detached one.

    molens-node CONFIG                      run in the foreground (Ctrl-C / SIGTERM stop gracefully)
    molens-node CONFIG start                detach; pid in data_dir/node.pid, output in data_dir/node.log
    molens-node CONFIG stop                 graceful stop through the admin socket, waits for exit
    molens-node CONFIG restart              stop (if running), then start
    molens-node CONFIG status [--json]      role, term, leader, indexes, peers
    molens-node CONFIG stats                Raft, transport and state-machine counters (JSON)
    molens-node CONFIG snapshot             take a snapshot now and compact the log; prints its index
    molens-node CONFIG digest               applied index and sha256 of the state (equal on replicas)
    molens-node CONFIG ready                exit 0 when this node's GET /readyz answers 200 (a HEALTHCHECK)
    molens-node CONFIG transfer-leader [--to ID]   this leader hands over (default: best follower)
    molens-node CONFIG reload-keys          re-read raft.curve.public_keys_dir on both node ports
    molens-node CONFIG add-node ID --raft-addr H:P [--rpc-addr H:P --http-addr H:P --admin-addr H:P
                                                     --peer-http-addr H:P]
                                            add a node (as a learner, promoted once caught up)
    molens-node CONFIG remove-node ID       remove a node from the cluster (it is told so)
    molens-node CONFIG signing-key --namespace NS   the namespace's callback signing key(s), one a line,
                                            for its receivers (docs/receiver.md); reads only CONFIG
add-node and remove-node go to this node's admin socket and, when it does not lead, to the leader's.

Errors are one line on stderr and a non-zero exit (2 for config and usage errors, 1 otherwise).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from molens.admin import AdminClient, AdminError
from molens.config import Config, ConfigError, load
from molens.errors import MolensError
from molens.schema import NAMESPACE_PATTERN
from molens.signing import namespace_secret

log = logging.getLogger(__name__)

START_TIMEOUT_S = 30.0
STOP_STEPS_S = 32.0
"""What a graceful stop takes beyond its leadership hand-over (``node.stop_timeout_s``) at most: the
HTTP API 5 s, a leader's term 5 s, the fires in flight 10 s and their last results 2 s, Raft 10 s (docs/deploy.md#stopping);
``stop`` waits that long and 5 s more before it says the node still runs."""


class CliError(MolensError):
    """A one-line message for the operator."""


def _pid_path(cfg: Config) -> Path:
    return cfg.data_dir / "node.pid"


def _log_path(cfg: Config) -> Path:
    return cfg.data_dir / "node.log"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child of ours counts as gone
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return done == 0


def read_pid(cfg: Config) -> int | None:
    """The pid of the node running on this data_dir, or None.

    The pid file alone does not say so: after a kill -9 or a crash it stays, and its pid may since
    belong to another process. A running node holds an flock on ``data_dir/node.lock``
    (``molens.node``); when a non-blocking flock takes it, no node runs there and the pid file is
    stale: it is removed (under the lock, so a node starting meanwhile keeps its own), with a note on
    stderr. When the lock file cannot be opened (another user's data_dir), a live pid is trusted."""
    path = _pid_path(cfg)
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    lock = cfg.data_dir / "node.lock"
    try:
        fd = os.open(lock, os.O_RDONLY)
    except FileNotFoundError:
        fd = None  # no node ever locked this data_dir
    except OSError:
        return pid if _alive(pid) else None
    try:
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # BlockingIOError: a node holds it, so the pid file is its own
                return pid if _alive(pid) else None
        try:
            path.unlink(missing_ok=True)
            done = "removed"
        except OSError as exc:
            done = f"not removed: {exc.strerror or exc}"
        print(f"{cfg.node.id}: stale pid file {path} (pid {pid}; no node holds {lock}): {done}", file=sys.stderr)
        return None
    finally:
        if fd is not None:
            os.close(fd)  # releases the probe's lock


def _admin(cfg: Config, timeout_s: float = 5.0) -> AdminClient:
    return AdminClient(cfg.admin.bind_addr, timeout_s=timeout_s)


def cmd_foreground(cfg: Config) -> int:
    caught: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):  # a stop asked for while molens.node loads (Node.run reads it)
        signal.signal(sig, lambda signum, _frame: caught.append(signum))
    from molens.node import Node  # imported late: the CLI's other commands stay light

    try:
        return Node(cfg).run(caught)
    except ConfigError:  # found only now (a data_dir that cannot be made): a config error, exit 2
        raise
    except MolensError as exc:  # the node cannot start (NodeError), a store it cannot read (StoreError)...
        raise CliError(f"{cfg.node.id}: {exc}") from exc


def cmd_start(cfg: Config, config_path: str) -> int:
    pid = read_pid(cfg)
    if pid is not None:
        raise CliError(f"{cfg.node.id}: already running (pid {pid}, data_dir {cfg.data_dir})")
    logfile = _log_path(cfg)
    try:
        cfg.data_dir.mkdir(parents=True, exist_ok=True)
        with open(logfile, "ab"):
            pass
    except OSError as exc:
        what = f"write {logfile}" if cfg.data_dir.is_dir() else f"create {cfg.data_dir}"
        raise ConfigError("node.data_dir", f"cannot {what}: {exc.strerror or exc}") from None
    with open(logfile, "ab") as out, open(os.devnull, "rb") as devnull:
        proc = subprocess.Popen(
            [sys.executable, "-m", "molens.cli", str(Path(config_path).resolve())],
            stdin=devnull,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=os.getcwd(),
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    with _admin(cfg, timeout_s=1.0) as admin:
        while time.monotonic() < deadline:
            rc = proc.poll()
            if rc is not None:
                raise CliError(f"{cfg.node.id}: failed to start (exit {rc}): {_last_error(logfile)}")
            try:
                st = admin.call("status")
            except AdminError:
                time.sleep(0.1)
                continue
            if st.get("pid") == proc.pid:
                print(
                    f"{cfg.node.id}: started (pid {proc.pid}); admin {cfg.admin.bind_addr}, "
                    f"raft {cfg.raft.bind_addr}, log {logfile}"
                )
                return 0
            time.sleep(0.1)
    proc.terminate()
    raise CliError(f"{cfg.node.id}: did not answer on {cfg.admin.bind_addr} within {START_TIMEOUT_S:g} s")


def _last_error(logfile: Path) -> str:
    try:
        lines = [ln for ln in logfile.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    for ln in reversed(lines[-50:]):
        if ln.startswith("error: "):  # the foreground run's own one-line error
            return ln[len("error: ") :].strip()
        if "error" in ln.lower():
            return ln.strip()
    return lines[-1].strip() if lines else f"see {logfile}"


def cmd_stop(cfg: Config) -> int:
    pid = read_pid(cfg)
    if pid is None:
        print(f"{cfg.node.id}: not running")
        return 0
    wait_s = cfg.node.stop_timeout_s + STOP_STEPS_S + 5
    try:
        with _admin(cfg, timeout_s=5.0) as admin:
            admin.call("stop")
    except AdminError as exc:
        log.debug("admin stop failed (%s); sending SIGTERM", exc)
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass  # it ended meanwhile: the wait below sees it gone
        except PermissionError:
            raise CliError(
                f"{cfg.node.id}: the admin socket did not answer ({exc}), and pid {pid} may not be signalled by "
                "this user (run stop as the node's user)"
            ) from None
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            print(f"{cfg.node.id}: stopped (pid {pid})")
            return 0
        time.sleep(0.05)
    raise CliError(f"{cfg.node.id}: still running after {wait_s:g} s (pid {pid})")


def _require_up(cfg: Config, action: str) -> None:
    """Fail at once, saying why, when the node is not running (no live process in its pid file) or
    does not answer ``status`` within 3 s: a snapshot's or digest's own wait (minutes, for a large
    store) is not spent on a node that is down."""
    if read_pid(cfg) is None:
        raise CliError(f"{cfg.node.id}: {action}: not running")
    try:
        with _admin(cfg, timeout_s=3.0) as admin:
            admin.call("status")
    except AdminError as exc:
        state = f"not answering ({exc})" if read_pid(cfg) else "not running"
        raise CliError(f"{cfg.node.id}: {action}: {state}") from None


def cmd_status(cfg: Config, as_json: bool) -> int:
    try:
        with _admin(cfg, timeout_s=3.0) as admin:
            st = admin.call("status")
    except AdminError as exc:
        pid = read_pid(cfg)
        state = f"not answering ({exc})" if pid else "not running"
        if as_json:
            print(json.dumps({"node_id": cfg.node.id, "running": pid is not None, "error": state}))
        else:
            print(f"{cfg.node.id}: {state}", file=sys.stderr)
        return 1
    st.pop("ok", None)
    if as_json:
        print(json.dumps(st, indent=2, sort_keys=True))
    else:
        print(format_status(st))
    return 0


def cmd_admin(cfg: Config, action: str, to: str | None) -> int:
    """One admin command for an operator: ``stats``, ``actors``, ``snapshot``, ``digest``,
    ``transfer-leader``, ``reload-keys``."""
    cmd = {"transfer-leader": "transfer_leader", "reload-keys": "reload_keys"}.get(action, action)
    args: dict[str, Any] = {"to": to} if cmd == "transfer_leader" and to else {}
    _require_up(cfg, action)
    try:
        # a snapshot or digest of a large store takes seconds
        with _admin(cfg, timeout_s=600.0 if cmd in ("snapshot", "digest") else 10.0) as admin:
            reply = admin.call(cmd, **args)
    except AdminError as exc:
        raise CliError(f"{cfg.node.id}: {action}: {exc}") from None
    reply.pop("ok", None)
    if cmd == "stats":
        print(json.dumps(reply, indent=2, sort_keys=True))
    elif cmd == "actors":
        print(json.dumps(reply["actors"], sort_keys=True))
    elif cmd == "snapshot":
        print(f"{cfg.node.id}: snapshot at index {reply['index']}")
    elif cmd == "digest":
        print(f"{cfg.node.id}: applied {reply['applied_index']} digest {reply['digest']}")
    elif cmd == "reload_keys":
        print(f"{cfg.node.id}: keys reloaded; raft accepts {', '.join(reply['raft'])}; rpc accepts {', '.join(reply['rpc'])}")
    else:
        print(f"{cfg.node.id}: leadership handed to {reply['to']} in {reply.get('ms', 0):.0f} ms")
    return 0


MEMBERSHIP_WAIT_S = 40.0
"""How long ``add-node`` / ``remove-node`` wait for the node's answer (its retries and the commit)."""


def cmd_membership(cfg: Config, req: dict[str, Any]) -> int:
    """``add_node`` / ``remove_node`` through this node's admin socket, then the leader's if it
    answers ``not_leader`` with the leader's admin address."""
    addr = cfg.admin.bind_addr
    for _hop in range(2):
        try:
            # the node retries a refused change for 10 s and waits 10 s for it to commit
            with AdminClient(addr, timeout_s=MEMBERSHIP_WAIT_S) as admin:
                reply = admin.request(req)
        except AdminError as exc:
            raise CliError(f"{req['cmd']} via {addr}: {exc} (the change may or may not have been made: "
                           "status shows the members)") from None
        if reply.get("ok"):
            index = reply.get("index")
            if reply.get("already_member"):
                print(f"{req['id']}: already a member" + ("; addresses updated" if reply.get("updated") else "; nothing changed"))
            else:
                what = "added (as a learner)" if req["cmd"] == "add_node" else "removed"
                print(f"{req['id']}: {what}" + (f" at index {index}" if index is not None else ""))
            return 0
        nxt = reply.get("leader_admin_addr")
        if reply.get("error") != "not_leader" or not nxt:
            break
        if nxt == addr:  # the leader's admin address is this host's (loopback everywhere): asking it again loops
            raise CliError(f"{req['cmd']} {req['id']}: the leader is {reply.get('leader_id')}, whose admin socket "
                           f"is at {nxt} on its own host; run the command there")
        addr = nxt
    leader = f" (the leader is {reply['leader_id']})" if reply.get("leader_id") else ""
    raise CliError(f"{req['cmd']} {req['id']}: {reply.get('error')} {reply.get('detail', '')}".rstrip() + leader)


def format_status(st: dict[str, Any]) -> str:
    peers = st.get("peers") or []
    lines = [
        f"node      {st.get('node_id')} (pid {st.get('pid')})",
        f"role      {st.get('role')}   term {st.get('term')}   leader {st.get('leader_id') or '-'}",
        f"log       last {st.get('last_index')}   commit {st.get('commit_index')}   "
        f"applied {st.get('applied_index')}   snapshot {st.get('snapshot_index')}",
        "peers     "
        + (", ".join(f"{p.get('id')}({p.get('suffrage')}) {p.get('raft_addr')}" for p in peers) or "-"),
    ]
    return "\n".join(lines)


def cmd_ready(cfg: Config, timeout_s: float = 3.0) -> int:
    """GET this node's ``/readyz`` at ``http.host`` (over loopback for a wildcard host); 0 when it answers 200,
    else 1 with the answer or the reason on stderr. The container image's HEALTHCHECK."""
    host = cfg.http.host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1" if host != "::" else "::1"
    url = f"http://{'[' + host + ']' if ':' in host else host}:{cfg.http.port}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            body = resp.read(2000)
            status = resp.status
    except urllib.error.HTTPError as exc:
        body, status = exc.read(2000), exc.code
    except OSError as exc:
        print(f"not ready: {url}: {exc}", file=sys.stderr)
        return 1
    if status != 200:
        print(f"not ready: {url} answered {status}: {body.decode('utf-8', 'replace').strip()}", file=sys.stderr)
        return 1
    return 0


def cmd_signing_key(cfg: Config, namespace: str) -> int:
    """Print namespace ``namespace``'s callback signing keys, one a line: the one derived from
    ``worker.signing_secret``, then from ``worker.signing_secret_next`` when set (a rotation: give the
    receivers both). 2 when the node signs nothing or the name is no namespace name."""
    w = cfg.worker
    if not w.signing_secret:
        print("signing-key: worker.signing_secret is not set: this node signs no callback", file=sys.stderr)
        return 2
    if not re.fullmatch(NAMESPACE_PATTERN, namespace):
        print(f"signing-key: {namespace!r} is not a namespace name ({NAMESPACE_PATTERN})", file=sys.stderr)
        return 2
    if w.signing_scope == "cluster":
        print("signing-key: note: worker.signing_scope is cluster: callbacks carry no namespace key until it is "
              "both or namespace", file=sys.stderr)
    for secret in (w.signing_secret, w.signing_secret_next):
        if secret:
            print(namespace_secret(secret, namespace))
    return 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="molens-node", description="Run or control a Molens node.")
    p.add_argument("config", help="path to the node's YAML config (e.g. conf/node.yaml)")
    p.add_argument(
        "action",
        nargs="?",
        choices=["start", "stop", "restart", "status", "stats", "actors", "snapshot", "digest", "transfer-leader",
                 "reload-keys", "add-node", "remove-node", "ready", "signing-key"],
        help="omit to run in the foreground",
    )
    p.add_argument("node_id", nargs="?", help="add-node / remove-node: the node's id")
    for name in ("raft", "rpc", "http", "admin", "peer-http"):
        p.add_argument(f"--{name}-addr", default="", help=f"add-node: the new node's {name} address (host:port)")
    p.add_argument("--json", action="store_true", help="status: machine-readable output")
    p.add_argument("--to", default=None, help="transfer-leader: the voter to hand leadership to")
    p.add_argument("--namespace", default=None,
                   help="signing-key: the namespace whose callback signing key to print (its receivers verify with it)")
    args = p.parse_args(argv)
    membership = args.action in ("add-node", "remove-node")
    given = [
        (args.node_id is not None and not membership, f"a node id ({args.node_id!r})", "add-node and remove-node"),
        (any(getattr(args, f"{n}_addr") for n in ("raft", "rpc", "http", "admin", "peer_http"))
         and args.action != "add-node",
         "--*-addr", "add-node"),
        (args.json and args.action != "status", "--json", "status"),
        (args.to is not None and args.action != "transfer-leader", "--to", "transfer-leader"),
        (args.namespace is not None and args.action != "signing-key", "--namespace", "signing-key"),
    ]
    for wrong, what, only in given:  # an argument the action would ignore is more likely a slip than meant
        if wrong:
            p.error(f"{args.action or 'running in the foreground'}: {what} is for {only} only")
    if membership and not args.node_id:
        p.error(f"{args.action}: give the node's id")
    if args.action == "add-node" and not args.raft_addr:
        p.error("add-node: --raft-addr is required")
    if args.action == "signing-key" and not args.namespace:
        p.error("signing-key: --namespace is required")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        cfg = load(args.config)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    logging.basicConfig(
        level=cfg.logging.level.value,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    # pykka logs every exception an ask hands back to its caller (a routine "not the leader" to an
    # admin request) at INFO with a traceback; an actor that fails is logged at ERROR either way
    logging.getLogger("pykka").setLevel(max(logging.WARNING, logging.getLogger().level))
    try:
        if args.action is None:
            return cmd_foreground(cfg)
        if args.action == "start":
            return cmd_start(cfg, args.config)
        if args.action == "stop":
            return cmd_stop(cfg)
        if args.action == "restart":
            cmd_stop(cfg)
            return cmd_start(cfg, args.config)
        if args.action == "status":
            return cmd_status(cfg, args.json)
        if args.action == "ready":
            return cmd_ready(cfg)
        if args.action == "signing-key":
            return cmd_signing_key(cfg, args.namespace)
        if args.action in ("add-node", "remove-node"):  # parse_args saw to the id and the raft address
            if args.action == "remove-node":
                return cmd_membership(cfg, {"cmd": "remove_node", "id": args.node_id})
            return cmd_membership(cfg, {
                "cmd": "add_node", "id": args.node_id, "raft_addr": args.raft_addr, "rpc_addr": args.rpc_addr,
                "http_addr": args.http_addr, "admin_addr": args.admin_addr,
                **({"peer_http_addr": args.peer_http_addr} if args.peer_http_addr else {}),
            })
        return cmd_admin(cfg, args.action, args.to)
    except ConfigError as exc:  # found only now: a data_dir that cannot be created or written
        print(str(exc), file=sys.stderr)
        return 2
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
