"""Writes the config of Ray's autoscaler for a job with --autoscale (LOG_DIR/autoscale/config.json, the
owner's alone) and prints its path; the head starts Ray with it (ray start --autoscaling-config). The
autoscaler is Ray's v1 (StandardAutoscaler), with raysub's node provider for Slurm
(raysub/job/lib/slurm_provider.py). Ends with status 2, saying why, where the head has no sbatch, squeue
or scancel to run (a container without Slurm's commands, say)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from raysub import protocol


def config(args: argparse.Namespace) -> dict[str, Any]:
    """The autoscaler's config. Node shapes: this node's CPUs for each, the GPUs the job gives its nodes;
    Ray's autoscaler takes a grow node's own shape once one is up."""
    cpus = int(os.environ.get("SLURM_CPUS_ON_NODE") or os.cpu_count() or 1)

    def shape(gpus: int) -> dict[str, int]:
        return {"CPU": cpus, **({"GPU": gpus} if gpus else {})}

    provider = {
        "type": "external",
        "module": f"{protocol.AUTOSCALER_MODULE}.SlurmNodeProvider",
        # Ray's monitor then keys a node by NODE_ID_AS_RESOURCE (a grow job's id), else by its node id.
        "use_node_id_as_ip": True,
        # No SSH, no setup commands: a grow job's own node script starts Ray.
        "disable_node_updaters": True,
        "disable_launch_config_check": True,
        "log_dir": args.log_dir,
        "address": args.address,
        "job_name": f"raysub-autoscale-{args.job}",
        "partitions": args.partition,
        "queue_timeout": args.queue_timeout,
        "slurm_look": args.slurm_look,
        "env_names": args.env_name,
        "exclusive": args.exclusive,
    }
    types = {
        protocol.AUTOSCALE_HEAD_TYPE: {
            "resources": shape(args.head_gpus),
            "node_config": {},
            "max_workers": 0,
        },
        protocol.AUTOSCALE_JOB_TYPE: {
            "resources": shape(args.gpus),
            "node_config": {},
            "min_workers": 0,
            "max_workers": 0,
        },
        protocol.AUTOSCALE_GROW_TYPE: {
            "resources": shape(args.gpus),
            "node_config": {},
            "min_workers": 0,
            "max_workers": args.max_nodes - args.nodes,
        },
    }
    empty_lists = ("cluster_synced_files", "rsync_exclude", "rsync_filter", "initialization_commands")
    commands = ("setup_commands", "head_setup_commands", "worker_setup_commands")
    starts = ("head_start_ray_commands", "worker_start_ray_commands")
    return {
        "cluster_name": f"raysub-{args.job}",
        # Every node but the head: the autoscaler counts the job's own (unmanaged) nodes against it too.
        "max_workers": args.max_nodes - 1,
        "upscaling_speed": 1.0,
        "idle_timeout_minutes": args.idle / 60,
        "provider": provider,
        "auth": {},
        "docker": {},
        "available_node_types": types,
        "head_node_type": protocol.AUTOSCALE_HEAD_TYPE,
        "file_mounts": {},
        "file_mounts_sync_continuously": False,
        **{key: [] for key in (*empty_lists, *commands, *starts)},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="autoscale.py", description=__doc__)
    parser.add_argument("--log-dir", required=True)
    parser.add_argument("--address", required=True, help="the head's GCS, ip:port")
    parser.add_argument("--job", required=True, help="the job's id")
    parser.add_argument("--max-nodes", type=int, required=True, help="the most nodes, the job's own included")
    parser.add_argument("--nodes", type=int, required=True, help="the job's own nodes")
    parser.add_argument("--idle", type=float, required=True, help="seconds a grow node may idle")
    parser.add_argument("--queue-timeout", type=float, required=True)
    parser.add_argument("--slurm-look", type=float, required=True, help="seconds between two squeue")
    parser.add_argument("--gpus", type=int, required=True, help="a worker's GPUs")
    parser.add_argument("--head-gpus", type=int, required=True)
    parser.add_argument("--partition", action="append", default=[])
    parser.add_argument("--exclusive", action="store_true", help="grow jobs take whole nodes, as the job")
    parser.add_argument("--env-name", action="append", default=[], help="a --env of the job, by name")
    args = parser.parse_args(argv)
    missing = [tool for tool in ("sbatch", "squeue", "scancel") if shutil.which(tool) is None]
    if missing:
        print(f"--autoscale: the head cannot run {', '.join(missing)} (not on its PATH)", file=sys.stderr)
        return 2
    directory = Path(args.log_dir) / protocol.AUTOSCALE_DIR
    directory.mkdir(mode=protocol.PRIVATE_DIR_MODE, exist_ok=True)
    path = directory / protocol.AUTOSCALE_CONFIG
    protocol.write_atomic(path, json.dumps(config(args), indent=1) + "\n")
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
