"""Who runs what on the nodes: one row per node program (raysub/job/programs/<name>.py), saying when a job
runs it, which node script calls it and its whole argument list. The templates spell no program's arguments:
they call ``program_call(name)`` (or ``program_args(name)``), which renders this row, so the program's
argparse, the timings it is passed and the script that runs it are written here and in the program alone.
What a job ships under LOG_DIR is what its selected rows name and what those import (render.node_library).

The arguments are bash words: values from options through shell_quote, the node script's own variables
(``"$LOG_DIR"``, ``"$HOST"``) as written.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, replace

from raysub import protocol
from raysub.job.view import LARGE_SCALE, JobView
from raysub.spec import Timing

# The node scripts, by the file a template becomes. The partial _ray.sh.j2 is part of node.sh.
NODE_BASH = protocol.NODE_BASH
HEAD = protocol.HEAD_SCRIPT
WORKER = protocol.WORKER_SCRIPT
DRIVER = protocol.DRIVER_SCRIPT


def timing_args(timing: Timing, name: str) -> list[str]:
    """Program ``name``'s timing options (spec.Timing's fields), as arguments: the programs have no defaults
    of their own."""
    options = {
        "join": {"look": timing.join_look_s},
        "units": {
            "ready-look": timing.units_ready_look_s,
            "brisk": timing.units_brisk_s,
            "slow": timing.units_slow_s,
        },
        "cleanup": {
            "timeout": timing.cleanup_timeout_s,
            "worker-grace": timing.cleanup_worker_grace_s,
            "look": timing.cleanup_look_s,
            "nvidia-smi-timeout": timing.nvidia_smi_timeout_s,
        },
        "ray_logs": {"seconds": timing.keep_ray_logs_s},
        "topology": {"nvidia-smi-timeout": timing.nvidia_smi_timeout_s},
        "autoscale": {"slurm-look": timing.autoscale_slurm_look_s},
        "preflight": {
            "first-pause": timing.preflight_first_pause_s,
            "max-pause": timing.preflight_max_pause_s,
            "nvidia-smi-timeout": timing.nvidia_smi_timeout_s,
        },
    }[name]
    return [f"--{option}={value:g}" for option, value in options.items()]


def _counter_args(spec: JobView) -> list[str]:
    """The head's unit counter: what it waits for and how often it looks (with --scale large, Ray's node
    table less often)."""
    timing: Timing = spec.timing
    if spec.large_scale:
        timing = replace(timing, units_brisk_s=max(timing.units_brisk_s, LARGE_SCALE.units_brisk_s))
    return [
        '--log-dir="$LOG_DIR"',
        '--address-file="$1"',
        '--expected="$EXPECTED_UNITS"',
        *timing_args(timing, "units"),
        *(["--large-scale"] if spec.large_scale else []),
        f"--kind={spec.unit_kind}",
        f"--auth={spec.auth}",
        '--node="$HOST"',
    ]


def _monitor_args(spec: JobView) -> list[str]:
    return [
        *_counter_args(spec),
        f"--monitor-interval={spec.monitor_interval}",
        f"--idle-threshold={spec.gpu_idle_threshold}",
        f"--idle-after={spec.gpu_idle_after}",
    ]


def _join_args(spec: JobView) -> list[str]:
    return ['--address-file="$JOIN_FILE"', *timing_args(spec.timing, "join")]


def _leave_args(spec: JobView) -> list[str]:
    return ['"$address"', '"$deadline"', '"$why"', '"$TEMP_DIR"', '"$ip"', '"${SLURM_JOB_ID:-?}"']


def _preflight_args(spec: JobView) -> list[str]:
    return [
        '--log-dir="$LOG_DIR"',
        '--node="$HOST"',
        '--gpus="$gpus"',
        f"--mode={spec.preflight}",
        f"--min-free-gpu-mem={spec.min_free_gpu_mem}",
        f"--wait-gpus={spec.wait_gpus}",
        *timing_args(spec.timing, "preflight"),
    ]


def _checkpoints_args(spec: JobView) -> list[str]:
    return ['"$CHECKPOINT_DIR"', '${CHECKPOINT_MARKER:+"--marker=${CHECKPOINT_MARKER}"}']


def _cleanup_args(spec: JobView) -> list[str]:
    return [
        '--since="$RUN_SINCE"',
        *timing_args(spec.timing, "cleanup"),
    ]


def _ray_logs_args(spec: JobView) -> list[str]:
    return [
        '--temp-dir="$TEMP_DIR"',
        '--log-dir="$LOG_DIR"',
        '--node="$HOST"',
        f"--max-mib={spec.keep_ray_logs}",
        *timing_args(spec.timing, "ray_logs"),
    ]


def _topology_args(spec: JobView) -> list[str]:
    """The node's GPUs ($1), its rank ($2: head 1, worker k k+2, as NeMo-RL's ray.sub numbers them) and,
    on a dedicated head, $3."""
    return [
        '--log-dir="$LOG_DIR"',
        '--node="$HOST"',
        '--job="${SLURM_JOB_ID:-}"',
        '--gpus="$1"',
        '--rank="$2"',
        '--address="${SLURM_TOPOLOGY_ADDR:-}"',
        '--pattern="${SLURM_TOPOLOGY_ADDR_PATTERN:-}"',
        "${3:+--dedicated-head}",
        f"--resources={shlex.quote(spec.topology_resources)}",
        *timing_args(spec.timing, "topology"),
    ]


def _autoscale_args(spec: JobView) -> list[str]:
    """Ray's autoscaler's config: the head's GCS ($address), the most grow nodes, its waits, the partitions
    and the names of the job's --env values (grow jobs get them from the head's environment)."""
    autoscale = spec.autoscale
    return [
        '--log-dir="$LOG_DIR"',
        '--address="$address"',
        '--job="$SLURM_JOB_ID"',
        f"--max-nodes={autoscale.max_nodes}",
        f"--nodes={spec.nodes}",
        f"--idle={autoscale.idle}",
        f"--queue-timeout={autoscale.queue_timeout}",
        f"--gpus={spec.gpus_per_node}",
        f"--head-gpus={spec.head_gpus}",
        *(f"--partition={shlex.quote(partition)}" for partition in autoscale.partitions),
        *(f"--env-name={name}" for name, _ in spec.env),
        *(["--exclusive"] if spec.exclusive else []),
        *timing_args(spec.timing, "autoscale"),
    ]


def _smoke_args(spec: JobView) -> list[str]:
    return [shlex.quote(arg) for arg in spec.smoke_args]


def _no_args(spec: JobView) -> list[str]:
    return []


@dataclass(frozen=True)
class Program:
    """A node program: ``name`` (raysub/job/programs/<name>.py), the node script that runs it, when a job
    runs it, and its arguments."""

    name: str
    script: str
    runs: Callable[[JobView], bool]
    args: Callable[[JobView], list[str]]
    purpose: str  # in docs/architecture.md's table of the node programs


MANIFEST = (
    Program(
        "units",
        HEAD,
        lambda spec: not spec.monitor,
        _counter_args,
        "the head's unit counter: units and nodes in Ray, worker joins on the timeline",
    ),
    Program(
        "monitor",
        HEAD,
        lambda spec: spec.monitor,
        _monitor_args,
        "the unit counter with the monitor sidecar: metrics.jsonl, the GPU-idle warning",
    ),
    Program(
        "join",
        WORKER,
        lambda spec: spec.workers > 0,
        _join_args,
        "a worker's first 'ray start', Ray loaded while the head starts",
    ),
    Program(
        "leave",
        WORKER,
        lambda spec: spec.workers > 0,
        _leave_args,
        "a grow job's node leaving Ray through its drain (raysub shrink, Slurm's warning signal)",
    ),
    Program("preflight", NODE_BASH, lambda spec: spec.preflights, _preflight_args, "the GPU preflight gate"),
    Program(
        "checkpoints",
        HEAD,
        lambda spec: not spec.interactive,
        _checkpoints_args,
        "the newest complete checkpoint, at each driver start",
    ),
    Program(
        "cleanup",
        HEAD,
        lambda spec: spec.driver_restarts > 0,
        _cleanup_args,
        "what a driver run left in Ray, cleared before a restart",
    ),
    Program(
        "topology",
        NODE_BASH,
        lambda spec: spec.topology,
        _topology_args,
        "where the node sits (NVLink domain, Slurm switch or block): Ray's resources and labels for it",
    ),
    Program("smoke", DRIVER, lambda spec: spec.smoke, _smoke_args, "the smoke test, as the driver"),
    Program(
        "autoscale",
        HEAD,
        lambda spec: spec.autoscale is not None,
        _autoscale_args,
        "the config of Ray's autoscaler, with raysub's node provider for Slurm (--autoscale)",
    ),
    Program(
        "driver_gate",
        HEAD,
        lambda spec: spec.starts_driver_early,
        _no_args,
        "the early driver's gate (sitecustomize on its PYTHONPATH): ray.init waits for the whole cluster",
    ),
    Program(
        "ray_logs",
        NODE_BASH,
        lambda spec: spec.keep_ray_logs > 0,
        _ray_logs_args,
        "each node's Ray logs, kept in LOG_DIR as it leaves",
    ),
)
ROWS = {program.name: program for program in MANIFEST}


def selected(spec: JobView) -> list[Program]:
    """The rows of the programs ``spec``'s job runs."""
    return [program for program in MANIFEST if program.runs(spec)]


def program_args(spec: JobView, name: str) -> str:
    """Program ``name``'s arguments for ``spec``, as they go on its command line in the node script."""
    return " ".join(ROWS[name].args(spec))


def program_call(spec: JobView, name: str) -> str:
    """``node_program NAME ARGS``: how a node script runs program ``name`` (lib.sh's node_program)."""
    return " ".join(["node_program", name, *ROWS[name].args(spec)])
