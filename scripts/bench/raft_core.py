"""Pure CPU cost of consensus: a 3-node in-memory cluster committing 1 KB proposals in batches.

No I/O, no codec: Readys are "persisted" to MemoryLog and messages handed straight to the
peers' ``step``. Counts entries committed and applied on every node. Ends with one line
``raft_core: entries_per_s=... ``. ``--profile`` runs it under pyinstrument.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from molens.raft.core import RaftConfig, RaftCore, RaftRole, Ready
from molens.raft.log import Membership, MemoryLog
from molens.raft.messages import Message


class Cluster:
    def __init__(self, n: int, config: RaftConfig) -> None:
        ids = [f"n{i}" for i in range(1, n + 1)]
        mem = Membership(tuple(ids))
        self.logs = {i: MemoryLog(mem) for i in ids}
        self.cores = {i: RaftCore(i, mem, self.logs[i], config, random.Random(k)) for k, i in enumerate(ids)}
        self.applied = dict.fromkeys(ids, 0)

    def handle(self, nid: str, rd: Ready, out: list[Message]) -> None:
        out.extend(rd.messages)
        st = self.logs[nid]
        if rd.entries:
            st.append(list(rd.entries))
        if rd.hard_state is not None:
            st.set_hard_state(rd.hard_state)
        out.extend(rd.messages_after_persist)
        if rd.committed_entries:
            self.applied[nid] = rd.committed_entries[-1].index
        self.cores[nid].advance(rd)

    def pump(self) -> None:
        cores = self.cores
        while True:
            out: list[Message] = []
            busy = False
            for nid, c in cores.items():
                if c.has_ready():
                    busy = True
                    self.handle(nid, c.ready(), out)
            if not busy:
                return
            for m in out:
                cores[m.to].step(m)


def run(total: int, batch: int, size: int) -> tuple[int, float, float]:
    cl = Cluster(3, RaftConfig(max_msg_bytes=4 << 20, max_inflight=64))
    leader = cl.cores["n1"]
    leader.campaign()
    cl.pump()
    assert leader.role is RaftRole.LEADER
    payload = [bytes(size)] * batch
    start_index = leader.last_index
    t0 = time.perf_counter()
    c0 = time.process_time()
    done = 0
    while done < total:
        leader.propose_batch(payload)
        cl.pump()
        done += batch
    dt = time.perf_counter() - t0
    cpu = time.process_time() - c0
    target = start_index + total
    assert all(a >= target for a in cl.applied.values()), cl.applied
    assert leader.commit >= target
    return total, dt, cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--entries", type=int, default=300_000)
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--profile", action="store_true")
    args = p.parse_args()
    if args.profile:
        from pyinstrument import Profiler

        prof = Profiler()
        prof.start()
        n, dt, cpu = run(args.entries, args.batch, args.size)
        prof.stop()
        print(prof.output_text(unicode=False, color=False))
    else:
        run(20_000, args.batch, args.size)  # warm-up
        n, dt, cpu = run(args.entries, args.batch, args.size)
    # the machine is shared: the rate is per CPU second of this process (wall rate shown too)
    print(f"3 nodes, {n} entries of {args.size} B in batches of {args.batch}: {cpu:.2f}s CPU, "
          f"{dt:.2f}s wall, committed and applied on every node")
    print(
        f"raft_core: entries_per_s={n / cpu:.0f} wall_entries_per_s={n / dt:.0f} batch={args.batch} "
        f"size={args.size} nodes=3 cpu_seconds={cpu:.2f}"
    )


if __name__ == "__main__":
    main()
