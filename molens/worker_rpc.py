"""Worker RPC between the leader and every node's fire pool, on ``rpc.bind_addr``.

The same ZeroMQ ROUTER/DEALER machinery as Raft's transport (:class:`molens.raft.transport.Endpoint`)
on sockets of its own, so a large fire batch never delays a heartbeat. The frames it carries are
the scheduler's (:mod:`molens.scheduler`): ``B`` fire batches, ``R`` results, ``H`` heartbeats.
"""

from __future__ import annotations

from molens.raft.transport import Endpoint


class RpcEndpoint(Endpoint):
    """Worker RPC (FireBatch / FireResults) on ``rpc.bind_addr``: same machinery, its own sockets."""

    kind = "rpc"


__all__ = ["RpcEndpoint"]
