"""A grow node's way out of Ray (raysub grow, --autoscale): asks Ray's GCS to drain this node.

The worker script of a grow job's node runs it once its leave file (LOG_DIR/grow/<job id>.leave, which
raysub shrink or the grow job's batch script writes) appears. The drain is Ray's preemption drain: always
accepted, the node takes no new task, actor or placement group, what runs there may finish until the
file's deadline, and the raylet ends itself once the node is idle. The GCS records the node's death as a
preemption with the file's reason, which the driver sees (ray.nodes()' DeathReasonMessage, an actor
error's ``preempted``) instead of an unexpected death. The worker script then waits for Ray to end, up to
the deadline, and ends what is left.

The node is this Ray's node whose temp dir is ``--temp-dir`` (else the one alive at ``--ip``). Prints what
it did; exit status 0 when the drain was accepted, 1 otherwise (the node then just leaves).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from raysub.job.lib import gcs
from raysub.protocol.grow_jobs import read_leave

PREEMPTION = 2  # autoscaler_pb2.DrainNodeReason.DRAIN_NODE_REASON_PREEMPTION


def this_node(nodes: Sequence[Any], temp_dir: str, ip: str) -> str | None:
    """The hex id of the alive node whose temp dir is ``temp_dir``; else of the one alive node at ``ip``."""
    alive = [info for info in nodes if info.state == gcs.ALIVE]
    mine = [info for info in alive if getattr(info, "temp_dir", "") == temp_dir]
    if not mine:
        mine = [info for info in alive if info.node_manager_address == ip]
    return mine[0].node_id.hex() if len(mine) == 1 else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="leave", description=__doc__)
    parser.add_argument("--address", required=True, help="the head's GCS, ip:port")
    parser.add_argument("--file", required=True, type=Path, help="the grow job's leave file")
    parser.add_argument("--temp-dir", required=True, help="this node's Ray temp dir")
    parser.add_argument("--ip", required=True, help="this node's address in Ray")
    parser.add_argument("--job", default="?", help="the grow job's id, for the reason Ray records")
    args = parser.parse_args(argv)
    leave = read_leave(args.file)
    if leave is None:
        print(f"leave: {args.file} is not a leave file", file=sys.stderr)
        return 1
    try:
        client = gcs.connect(args.address)
        table = client.get_all_node_info(timeout=gcs.GCS_TIMEOUT_S)
        node = this_node(list(table.values()), args.temp_dir, args.ip)
        if node is None:
            print(f"leave: this node ({args.ip}, {args.temp_dir}) is not alive in Ray", file=sys.stderr)
            return 1
        why = f"raysub grow job {args.job} leaves: {leave.why}"
        accepted, refusal = client.drain_node(node, PREEMPTION, why, int(leave.deadline * 1000))
    except Exception as error:  # a GCS gone or an older Ray: the node leaves without the drain
        print(f"leave: Ray's drain failed: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    if not accepted:
        print(f"leave: Ray refused the drain: {refusal}", file=sys.stderr)
        return 1
    print(f"leave: drained node {node[:8]} ({why}), up to {leave.deadline - time.time():.0f} s to go")
    return 0


if __name__ == "__main__":
    sys.exit(main())
