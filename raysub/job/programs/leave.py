"""A grow node's way out of Ray: asks Ray's GCS to drain this node, as a preemption with a deadline, and
waits until Ray has let the node go or the deadline has come.

Usage: leave.py ADDRESS DEADLINE WHY TEMP_DIR IP JOB (the GCS, its leave file's epoch seconds and reason,
this node's Ray temp dir and address, its grow job). Exit status 0 when Ray took the drain, 1 otherwise.
"""

# The worker script of a grow job's node runs it once its leave file (LOG_DIR/grow/<job id>.leave, written
# by raysub shrink or the grow job's batch script: raysub/protocol/grow_jobs.py) appears. Ray never refuses
# a preemption drain: the node takes no new task, actor or bundle, what runs there may finish until the
# deadline, and the raylet ends itself once the node is idle. The GCS records the death as
# AUTOSCALER_DRAIN_PREEMPTED with the reason, which the driver sees (ray.nodes()' DeathReasonMessage, an
# actor error's `preempted`) instead of a node marked dead. This program waits for the GCS to have the node
# dead (its raylet ends itself, but `ray start --block` goes on: Ray 2.60 takes the raylet's exit for a
# graceful one), up to the deadline; then the worker script ends what is left. Killed sooner, the node
# would be recorded as an unexpected death.

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

from raysub.job.lib import gcs

PREEMPTION = 2  # autoscaler_pb2.DrainNodeReason.DRAIN_NODE_REASON_PREEMPTION
LOOK_S = 0.5  # how often it asks the GCS whether the node is gone


def this_node(nodes: Sequence[Any], temp_dir: str, ip: str) -> str | None:
    """The hex id of the alive node whose temp dir is ``temp_dir``; else of the one alive node at ``ip``."""
    alive = [info for info in nodes if info.state == gcs.ALIVE]
    mine = [info for info in alive if getattr(info, "temp_dir", "") == temp_dir]
    if not mine:
        mine = [info for info in alive if info.node_manager_address == ip]
    return mine[0].node_id.hex() if len(mine) == 1 else None


def main(argv: Sequence[str]) -> int:
    if len(argv) != 6 or not argv[1].isdigit():
        print(__doc__, file=sys.stderr)
        return 2
    address, deadline, reason, temp_dir, ip, job = argv
    why = f"raysub grow job {job} leaves: {reason}"
    try:
        client = gcs.connect(address)
        node = this_node(list(client.get_all_node_info(timeout=gcs.GCS_TIMEOUT_S).values()), temp_dir, ip)
        if node is None:
            print(f"leave: this node ({ip}, {temp_dir}) is not alive in Ray", file=sys.stderr)
            return 1
        accepted, refusal = client.drain_node(node, PREEMPTION, why, int(deadline) * 1000)
        if not accepted:
            print(f"leave: Ray refused the drain: {refusal}", file=sys.stderr)
            return 1
        left = int(deadline) - time.time()
        print(f"leave: draining node {node[:8]} ({why}), {left:.0f} s to go", flush=True)
        while (there := node in alive(client)) and time.time() < int(deadline):
            time.sleep(LOOK_S)
    except Exception as error:  # a GCS gone, or a Ray without the drain: the node leaves without it
        print(f"leave: Ray's drain failed: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    print("leave: the deadline has come" if there else "leave: Ray has let the node go")
    return 0


def alive(client: Any) -> set[str]:
    """The hex ids of the nodes alive in Ray."""
    table = client.get_all_node_info(timeout=gcs.GCS_TIMEOUT_S).values()
    return {info.node_id.hex() for info in table if info.state == gcs.ALIVE}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
