"""Where this node sits, found on the node before its first 'ray start', and what Ray is told of it
(raysub/job/lib/topology.py: the rules; raysub/protocol/topology_log.py: the files).

Run by the head and worker scripts as ``python -m raysub.job.programs.topology --log-dir DIR --node NAME
--gpus N --rank R --address A --pattern P ...``. Writes topology/<node>.* into LOG_DIR and prints three
lines on stdout for the node script: the --resources JSON for 'ray start', the --labels-file path, and the
GPU-to-CPU file (empty when there is none). Says on stderr where the node sits. A part it cannot find (no
nvidia-smi, no topology plugin) is left out, never guessed; nvidia-smi is asked wherever it is (a job of
no GPUs on a GPU node still sits in its NVLink domain); it fails (exit 1) only when LOG_DIR cannot be
written, 2 on wrong arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from raysub.job.lib import gpus
from raysub.job.lib import topology as rules
from raysub.protocol.topology_log import NodeTopology, write

# Where Linux lists each NUMA node's CPUs (node<N>/cpulist).
NUMA_NODES = Path("/sys/devices/system/node")


def _fabric(timeout: float) -> rules.Fabric | None:
    answer = gpus.nvidia_smi(["-q"], timeout)
    return rules.node_domain(rules.parse_fabrics(answer.output)) if answer and answer.status == 0 else None


def _affinity(timeout: float) -> str:
    """NeMo-RL's GPU-to-CPU file: "<gpu>:<cpulist>" per GPU whose NUMA node Linux lists."""
    answer = gpus.nvidia_smi(["topo", "-m"], timeout)
    lines = []
    for gpu, numa in rules.numa_of_gpus(answer.output if answer and answer.status == 0 else ""):
        try:
            cpus = (NUMA_NODES / f"node{numa}" / "cpulist").read_text().strip()
        except OSError:
            continue
        if cpus:
            lines.append(f"{gpu}:{cpus}\n")
    return "".join(lines)


def _labels(
    args: argparse.Namespace, leaf: tuple[str, str] | None, domain: str, clique: str | None
) -> dict[str, str]:
    wanted = {"node": args.node, "job": args.job, "nvlink-domain": domain, "nvlink-clique": clique}
    if leaf:
        wanted[leaf[0]] = leaf[1]
    labels, left_out = {}, []
    for key, value in wanted.items():
        if value and rules.label_value(value):
            labels[rules.LABEL_PREFIX + key] = value
        elif value:
            left_out.append(f"{key} {value!r}")
    if left_out:
        print(f"raysub: not a Ray label value, left out: {', '.join(left_out)}", file=sys.stderr)
    return labels


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m raysub.job.programs.topology", description="Find where this node sits; tell Ray."
    )
    parser.add_argument("--log-dir", type=Path, required=True)
    parser.add_argument("--node", required=True, help="this node's Slurm name")
    parser.add_argument("--job", default="", help="the Slurm job id, as a label")
    parser.add_argument("--gpus", type=int, required=True, help="the GPUs Ray uses here (worker_units)")
    parser.add_argument("--rank", type=int, help="this node's place in the job's order: head 1, worker k k+2")
    parser.add_argument("--address", default="", help="SLURM_TOPOLOGY_ADDR")
    parser.add_argument("--pattern", default="", help="SLURM_TOPOLOGY_ADDR_PATTERN")
    parser.add_argument("--dedicated-head", action="store_true", help="a head that runs no GPU work")
    parser.add_argument("--resources", default="{}", help="the user's own resources (JSON), added")
    parser.add_argument("--nvidia-smi-timeout", type=float, required=True)
    args = parser.parse_args(argv)
    # The node's place, whatever the job uses of it: asked wherever there is an nvidia-smi.
    fabric = _fabric(args.nvidia_smi_timeout)
    domain = fabric.domain if fabric and fabric.domain else args.node
    block_rank = rules.block_rank(args.address, args.pattern)
    rank = args.rank if block_rank is None else block_rank
    leaf = rules.leaf(args.address, args.pattern)
    extra = rules.user_resources(args.resources) or {}
    found = NodeTopology(
        args.node,
        rank,
        leaf[1] if leaf and leaf[0] == "switch" else None,
        leaf[1] if leaf and leaf[0] == "block" else None,
        fabric.domain if fabric else None,
        fabric.clique_id if fabric else None,
        f"{fabric.state}/{fabric.status}" if fabric else None,
        rules.resources(args.gpus, rank, domain, args.dedicated_head, extra),
        _labels(args, leaf, domain, fabric.clique_id if fabric else None),
    )
    try:
        labels_file, affinity_file = write(args.log_dir, found, _affinity(args.nvidia_smi_timeout))
    except OSError as error:
        print(f"raysub: cannot write this node's topology into {args.log_dir}: {error}", file=sys.stderr)
        return 1
    where = f"{leaf[0]} {leaf[1]}" if leaf else "no Slurm switch or block"
    nvlink = (
        f"NVLink domain {fabric.domain} (clique {fabric.clique_id})" if fabric else "its own NVLink domain"
    )
    print(f"raysub: {args.node}: {where}, {nvlink}, rank {rank}", file=sys.stderr)
    print(json.dumps(found.resources, separators=(", ", ": ")))
    print(labels_file)
    print(affinity_file or "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
