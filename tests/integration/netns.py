"""Real network partitions for integration tests: each node runs in a network namespace of its own.

Topology (made by :class:`NetnsLab`, one per test; ``R`` is a second octet of ``10.0.0.0/8`` no
route or address of this machine uses, picked at run time)::

    ns n1 --l2 | l1-- ns n2 --l3 | l2-- ns n3 --l1 | l3-- ns n1     one veth pair per pair of nodes
      |                 |                 |                          (l<j> in ns i, l<i> in ns j)
      mg                mg                mg                         one veth pair to the root each
      |                 |                 |
    root: p<pid>m1      p<pid>m2          p<pid>m3   (10.R.10i.1/24, and 10.R.200.1/32 on each: the receiver)

- node i's address ``10.R.0.i/32`` sits on its ``lo``; ns i routes ``10.R.0.j/32`` over ``l<j>``
  only (no default route, and root does not forward), so a link that is down really separates two
  nodes, and cutting one pair's link leaves every other pair connected (non-transitive cuts);
- the test process (root namespace) reaches every node's HTTP and admin socket over ``mg``;
- every node reaches the recording receiver at ``10.R.200.1`` over its own ``mg`` (the address is on
  every root-side ``mg`` veth), and the receiver sees which node fired from the source address;
- :meth:`NetnsLab.cut` / :meth:`NetnsLab.heal` set one side of a pair link down / up (this kernel has
  veth but no netem; link state is what the test uses), :meth:`NetnsLab.isolate` cuts all of a node's
  pair links (``mg`` stays: it still reaches the receiver and answers the test);
- :meth:`NetnsLab.one_way` drops what one node sends to another and nothing the other sends back (an
  ``iptables`` DROP of the sender's address in the receiver's namespace: the sender sees no error, as
  on a lossy link); :meth:`NetnsLab.heal_all` undoes cuts and one-way drops alike.

Names carry the creating process id (``m15p<pid>x<i>``): teardown deletes this lab's namespaces even
when the test failed, and a new lab first deletes the ones left by a process that no longer exists
(never another live run's). Where namespaces or veth pairs cannot be made, :func:`make_lab` raises
:class:`NetnsError` and :func:`netns_or_skip` skips, each with one line saying why.
"""

from __future__ import annotations

import itertools
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import Cluster, NodeProc, _die_with_parent, _merge

PREFIX = "m15p"
PORTS = {"raft": 7101, "rpc": 7102, "http": 7103, "admin": 7104}


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r


def _sweep_stale() -> None:
    """Delete namespaces of this harness whose creating process is gone."""
    out = _ip("netns", "list", check=False).stdout
    for line in out.splitlines():
        m = re.match(rf"({PREFIX}(\d+)(?:s\d+)?x\d+)", line)
        if m and not Path(f"/proc/{m.group(2)}").exists():
            _ip("netns", "del", m.group(1), check=False)


def _free_octet() -> int:
    used = _ip("-o", "addr", check=False).stdout + _ip("-o", "route", check=False).stdout
    taken = {int(m) for m in re.findall(r"\b10\.(\d+)\.", used)}
    choices = [r for r in range(100, 250) if r not in taken]
    if not choices:
        raise RuntimeError("no free 10.x.0.0/16 range for the test network")
    return random.choice(choices)


_LABS = itertools.count()
_B36 = "0123456789abcdefghijklmnopqrstuvwxyz"


class NetnsLab:
    """Namespaces, pair links and addresses for nodes ``n1..nN`` (more can be added later)."""

    def __init__(self) -> None:
        self.tag = f"{os.getpid()}"
        self.seq = next(_LABS)
        """Labs of one process get their own names: a namespace deleted by the previous lab may
        still be going away (the kernel frees it asynchronously) when the next one is made."""
        self.octet = _free_octet()
        self.ns: dict[int, str] = {}
        self.receiver_host = f"10.{self.octet}.200.1"
        self._links_down: set[tuple[int, int]] = set()
        self._one_way: set[tuple[int, int]] = set()

    def name(self, i: int) -> str:
        return f"{PREFIX}{self.tag}s{self.seq}x{i}"

    def addr(self, i: int) -> str:
        return f"10.{self.octet}.0.{i}"

    def add_node(self, i: int) -> str:
        """Make node ``i``'s namespace, its ``mg`` link and its pair links to the nodes made before."""
        ns = self.name(i)
        _ip("netns", "add", ns)
        self.ns[i] = ns
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "addr", "add", f"{self.addr(i)}/32", "dev", "lo")
        root_side = self._root_side(i)
        _ip("link", "add", "name", root_side, "type", "veth", "peer", "name", "mg", "netns", ns)
        net = f"10.{self.octet}.{100 + i}"
        _ip("addr", "add", f"{net}.1/24", "dev", root_side)
        _ip("addr", "add", f"{self.receiver_host}/32", "dev", root_side)
        _ip("link", "set", root_side, "up")
        _ip("-n", ns, "addr", "add", f"{net}.2/24", "dev", "mg")
        _ip("-n", ns, "link", "set", "mg", "up")
        _ip("route", "add", f"{self.addr(i)}/32", "dev", root_side)
        _ip("-n", ns, "route", "add", f"{self.receiver_host}/32", "dev", "mg", "src", self.addr(i))
        for j in sorted(self.ns):
            if j != i:
                _ip("link", "add", "name", f"l{j}", "netns", ns, "type", "veth", "peer", "name", f"l{i}",
                    "netns", self.ns[j])
                self._up(i, j)
                self._up(j, i)
        return ns

    def _up(self, i: int, j: int) -> None:
        """Link ``l<j>`` of node ``i`` up, with its route (a link set down loses its routes)."""
        ns = self.ns[i]
        _ip("-n", ns, "link", "set", f"l{j}", "up")
        _ip("-n", ns, "route", "replace", f"{self.addr(j)}/32", "dev", f"l{j}", "src", self.addr(i))

    def cut(self, i: int, j: int) -> None:
        """Cut the link between nodes ``i`` and ``j`` (both directions; every other link stays)."""
        a, b = min(i, j), max(i, j)
        _ip("-n", self.ns[a], "link", "set", f"l{b}", "down")
        self._links_down.add((a, b))

    def heal(self, i: int, j: int) -> None:
        a, b = min(i, j), max(i, j)
        self._up(a, b)
        _ip("-n", self.ns[b], "route", "replace", f"{self.addr(a)}/32", "dev", f"l{a}", "src", self.addr(b))
        self._links_down.discard((a, b))

    def one_way(self, src: int, dst: int) -> None:
        """Drop every packet node ``src`` sends to node ``dst``, silently, as ``dst`` receives it;
        ``dst`` still reaches ``src``."""
        self._drop("-A", src, dst)
        self._one_way.add((src, dst))

    def _drop(self, op: str, src: int, dst: int) -> None:
        r = subprocess.run(["ip", "netns", "exec", self.ns[dst], "iptables", "-w", op, "INPUT", "-s",
                            f"{self.addr(src)}/32", "-j", "DROP"], capture_output=True, text=True, check=False)
        if r.returncode != 0:
            raise RuntimeError(f"iptables {op} INPUT in {self.ns[dst]}: {r.stderr.strip()}")

    def isolate(self, i: int) -> None:
        for j in self.ns:
            if j != i:
                self.cut(i, j)

    def heal_all(self) -> None:
        for a, b in list(self._links_down):
            self.heal(a, b)
        for src, dst in list(self._one_way):
            self._drop("-D", src, dst)
            self._one_way.discard((src, dst))

    def _root_side(self, i: int) -> str:
        """The root end of node ``i``'s ``mg`` veth pair (at most 15 characters)."""
        return f"p{self.tag[-6:]}{_B36[self.seq % 36]}m{i}"

    def destroy(self) -> None:
        for i, ns in self.ns.items():
            _ip("link", "del", self._root_side(i), check=False)  # at once, not when the namespace is freed
            _ip("netns", "del", ns, check=False)  # takes its other veth ends
        self.ns.clear()


class NetnsError(RuntimeError):
    """Network namespaces with veth pairs cannot be made here (the message says why)."""


def make_lab() -> NetnsLab:
    """A lab with nothing in it yet; :class:`NetnsError` saying in one line why namespaces cannot be made."""
    if sys.platform != "linux":
        raise NetnsError("network namespaces need Linux")
    try:
        _sweep_stale()
        lab = NetnsLab()
        probe = lab.name(0)
        _ip("netns", "add", probe)
        try:
            _ip("-n", probe, "link", "add", "name", "a", "type", "veth", "peer", "name", "b")
        finally:
            _ip("netns", "del", probe, check=False)
    except (OSError, RuntimeError) as exc:
        raise NetnsError(f"cannot make network namespaces with veth pairs here: {exc}") from exc
    return lab


def netns_or_skip() -> NetnsLab:
    """A lab with nothing in it yet, or a skip saying in one line why namespaces cannot be made."""
    try:
        return make_lab()
    except NetnsError as exc:
        pytest.skip(str(exc))


class NsNodeProc(NodeProc):
    """A node process started inside its namespace (``ip netns exec``, which execs the node itself,
    so the pid is the node's and kill -9 is a real kill)."""

    def __init__(self, node_id: str, root: Path, settings: dict[str, Any], netns: str) -> None:
        super().__init__(node_id, root, settings)
        self.netns = netns

    def start(self) -> NodeProc:
        assert not self.running, f"{self.node_id} already running"
        env = {k: v for k, v in os.environ.items() if not k.startswith("MOLENS_")}
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                ["ip", "netns", "exec", self.netns, sys.executable, "-m", "molens.cli", str(self.config_path)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.dir, env=env,
                preexec_fn=_die_with_parent,
            )
        return self


class NsCluster(Cluster):
    """:class:`Cluster` whose node ``n<i>`` runs in the lab's namespace ``i`` on ``10.R.0.i``."""

    def __init__(self, lab: NetnsLab, root: Path, n: int = 3, extra: dict[str, Any] | None = None) -> None:
        self.lab = lab
        self.root = root
        self.extra = _merge({"node": {"state_machine": "tasks"}}, extra or {})
        self.nodes = {}
        ids = [f"n{i}" for i in range(1, n + 1)]
        for i in range(1, n + 1):
            lab.add_node(i)
        self._addrs = {nid: self._ns_addrs(int(nid[1:])) for nid in ids}
        peers = [{"id": nid, **self._addrs[nid]} for nid in ids]
        for nid in ids:
            self.nodes[nid] = NsNodeProc(
                nid, root, self._ns_settings(nid, {"cluster": {"peers": peers}}), lab.ns[int(nid[1:])]
            )

    def _ns_addrs(self, i: int) -> dict[str, str]:
        host = self.lab.addr(i)
        return {f"{k}_addr": f"{host}:{port}" for k, port in PORTS.items()}

    def _ns_settings(self, nid: str, cluster: dict[str, Any]) -> dict[str, Any]:
        a = self._addrs[nid]
        base = {
            **cluster,
            "raft": {"bind_addr": a["raft_addr"]},
            "rpc": {"bind_addr": a["rpc_addr"]},
            "http": {"host": a["http_addr"].rsplit(":", 1)[0], "port": PORTS["http"]},
            "admin": {"bind_addr": a["admin_addr"]},
        }
        return _merge(base, self.extra)

    def add_joiner(self, nid: str, extra: dict[str, Any] | None = None) -> NodeProc:
        i = int(nid[1:])
        self.lab.add_node(i)
        self._addrs[nid] = self._ns_addrs(i)
        join = [n.admin_addr for n in list(self.nodes.values())]
        node = NsNodeProc(
            nid, self.root, _merge(self._ns_settings(nid, {"cluster": {"join_addrs": join}}), extra or {}),
            self.lab.ns[i],
        )
        self.nodes[nid] = node
        return node

    def index(self, node: NodeProc) -> int:
        return int(node.node_id[1:])
