"""The job as the templates read it: a JobSpec and every value derived from its options that only the job's
scripts need (attempts, waits, srun options, the ports' shell expressions). Templates compute nothing from
options: they read ``spec.<name>``, a field of the JobSpec or a property here; the node programs' arguments
are the manifest's.
"""

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raysub.protocol import UnitKind, file_mode_for_logs, step_sources
from raysub.spec import DEFAULT_FORWARD_SIGNAL, JobSpec, PortBlocks

_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")


@dataclass(frozen=True)
class LargeScale:
    """What --scale large changes in a job, each value written once (docs/configuration.md, At scale)."""

    # Workers join in waves of this many, in SLURM_PROCID order: a wave starts once the waves before it
    # are all but half a wave in Ray's node table, so at most a wave and a half of nodes register with the
    # GCS at once however fast or slow it takes them (ray#30113: many nodes registering together hung the
    # GCS at 2k nodes).
    wave_nodes: int = 128
    # Each node of a wave waits up to this long more, at random, so that a wave is not one burst either.
    jitter_cs: int = 100
    # The head's unit counter reads the node table (every node's entry) this often until all joined.
    units_brisk_s: float = 1.0
    # Ray's timeouts for a GCS busy with many nodes, exported as RAY_<name> unless set: those NeMo-RL
    # raised to 120 s for bring-up bursts (NVIDIA-NeMo/RL#3089; Ray 2.60's defaults 5 to 60 s), and the
    # raylet's wait for its own registration (10 s up to Ray 2.34, ray#47087; 30 s since).
    ray_timeout_s: int = 120
    ray_timeouts: tuple[str, ...] = (
        "gcs_rpc_server_connect_timeout_s",
        "gcs_rpc_server_reconnect_timeout_s",
        "gcs_server_request_timeout_seconds",
        "worker_register_timeout_seconds",
        "raylet_start_wait_time_s",
    )


LARGE_SCALE = LargeScale()


@dataclass(frozen=True)
class JobView:
    """What the templates call ``spec``: ``spec``'s fields and properties, and the values below."""

    spec: JobSpec

    def __getattr__(self, name: str) -> Any:
        return getattr(self.spec, name)

    @property
    def smoke_args(self) -> tuple[str, ...]:
        """With --smoke, the arguments of the driver, the node program raysub/job/programs/smoke.py: the
        job's own nodes and GPUs (the head's too with --dedicated-head), with an all-reduce wherever torch
        is."""
        args = [f"--nodes={self.spec.nodes}", f"--gpus-per-node={self.spec.gpus_per_node}"]
        if self.spec.head_gpus != self.spec.gpus_per_node:
            args.append(f"--head-gpus={self.spec.head_gpus}")
        return (*args, "--allreduce")

    @property
    def step_sources(self) -> str | None:
        """LOG_DIR/step_sources.json's content (render --step-regex, --tensorboard-dir, --metrics-file), or
        None when none was given."""
        spec = self.spec
        tensorboard_dir = Path(spec.tensorboard_dir) if spec.tensorboard_dir else None
        metrics_file = Path(spec.metrics_file) if spec.metrics_file else None
        return step_sources.Recorded(spec.step_regex, tensorboard_dir, metrics_file).text()

    @property
    def join_waves(self) -> int:
        """How many waves the workers join in (1 without --scale large)."""
        return -(-self.spec.workers // LARGE_SCALE.wave_nodes) if self.spec.large_scale else 1

    @property
    def join_wave_wait_s(self) -> int:
        """The longest a wave waits for the one before it to be in Ray, after which it joins anyway (a
        node of the wave before may never join): all waves have started by half of --workers-timeout."""
        return max(1, self.spec.workers_timeout // (2 * self.join_waves))

    @property
    def join_wave_units(self) -> int:
        """The units one node brings to ray_worker_units (its GPUs, or itself for a CPU-only job)."""
        return max(1, self.spec.gpus_per_node)

    @property
    def head_step_args(self) -> tuple[str, ...]:
        """srun options of the head's step beyond those every step takes."""
        if self.spec.het_head:
            return (
                "--het-group=0",
                *([f"--cpus-per-task={self.spec.head_cpus}"] if self.spec.head_cpus else []),
            )
        return self.worker_step_args

    @property
    def worker_step_args(self) -> tuple[str, ...]:
        """srun options of the workers' (and the sandboxes') step beyond those every step takes."""
        cpus = (f"--cpus-per-task={self.spec.cpus_per_task}",) if self.spec.cpus_per_task else ()
        return ("--het-group=1", *cpus) if self.spec.het_head else cpus

    @property
    def head_cpus_per_task(self) -> int | None:
        """The CPUs Ray uses on the head's node: --head-cpus in a heterogeneous job, else --cpus-per-task."""
        return self.spec.head_cpus if self.spec.het_head else self.spec.cpus_per_task

    @property
    def units_name(self) -> str:
        """What the counted units are called in the head's messages."""
        return "GPUs" if self.spec.counts_gpus else "nodes"

    @property
    def expected_units(self) -> int:
        """What ray_worker_units must reach before the driver starts: GPUs, or nodes without GPUs."""
        if not self.spec.counts_gpus:
            return self.spec.nodes
        return self.spec.head_gpus + self.spec.workers * self.spec.gpus_per_node

    @property
    def requests_gpus(self) -> bool:
        """The header asks Slurm for --gpus-per-node. Not with --no-gpu-request (sites that hand out
        whole nodes refuse GPU requests), nor with no GPUs to ask for."""
        return self.spec.gpu_request and self.spec.gpus_per_node > 0

    @property
    def head_attempts(self) -> int:
        """How many times the head tries to start Ray: the first try and --head-retries more."""
        return self.spec.head_retries + 1

    @property
    def worker_attempts(self) -> int:
        """How many times each worker starts Ray: the first start and --worker-retries more."""
        return self.spec.worker_retries + 1

    @property
    def worker_head_wait(self) -> int:
        """Seconds a worker waits for the head to announce itself (STARTED_RAY_HEAD): a minute longer
        than every head attempt's --head-timeout together, so that the head gives up, and says why, first."""
        return self.spec.head_timeout * self.head_attempts + 60

    @property
    def signal_look_cs(self) -> int:
        """The longest pause, in centiseconds, between a node's looks for a signal file (STARTED_RAY_HEAD,
        SANDBOX_READY_<host>) in a wait's first minute: a hundredth of a second per ten nodes, at least
        0.05 s. All nodes together then look about a thousand times a second at most, at any size."""
        return max(self.spec.timing.look_min_cs, self.spec.nodes // 10)

    @property
    def look_max_cs(self) -> int:
        """The longest pause, in centiseconds, between two looks of a node at a file another node writes
        (a signal file after a wait's first minute; ENDED while its Ray or the driver runs, for the whole
        run): 1 s, and from a thousand nodes up a hundredth of a second per ten nodes, so that a job's
        nodes look about a thousand times a second at most on the shared filesystem (4 s at 4096)."""
        return max(self.spec.timing.look_max_cs, -(-self.spec.nodes // 10))

    @property
    def temp_parent_per_job(self) -> bool:
        """The Ray temp dir's parent names this job (%j above the last part of --ray-temp-dir), so a
        node may remove that parent, once empty, when it leaves; a shared parent such as /tmp stays."""
        parent = self.spec.ray_temp_dir.rsplit("/", 1)[0]
        return "%j" in parent

    @property
    def user_srun_args(self) -> tuple[str, ...]:
        """The srun options every step takes from the user: --mpi, then each --srun-arg."""
        return (*([f"--mpi={self.spec.mpi}"] if self.spec.mpi else []), *self.spec.srun_args)

    @property
    def mounts_submit_dir(self) -> bool:
        """The job's containers start in the submit directory (no --container-workdir), which is mounted."""
        return self.spec.container_image is not None and self.spec.container_workdir is None

    @property
    def dashboard_reach_host(self) -> str | None:
        """Where a client reaches the dashboard: --dashboard-host, unless that is every interface (0.0.0.0,
        ::), or not given; None for the head's cluster address."""
        every_interface = ("0.0.0.0", "::")  # noqa: S104 (names them, binds nothing)
        return None if self.spec.dashboard_host in (None, *every_interface) else self.spec.dashboard_host

    @property
    def unit_kind(self) -> UnitKind:
        """What the head's unit counter counts (raysub/job/programs/units.py --kind): GPUs, or nodes without
        GPUs."""
        return "gpu" if self.spec.counts_gpus else "node"

    @property
    def log_dir_mode(self) -> str:
        """--log-mode as four octal digits (after check)."""
        return f"{int(self.spec.log_mode, 8):04o}"

    @property
    def log_file_mode(self) -> str:
        """The mode of the job's logs in LOG_DIR (its signal files and secrets are 0600 whatever this is)."""
        return f"{file_mode_for_logs(int(self.spec.log_mode, 8)):04o}"

    def port_sh(self, name: str) -> str:
        """Ray's port ``name`` (a Ports field) in the node scripts: a number, or with --ports block an
        arithmetic expansion on the start of the node's block, PORT_BASE, which the node sets."""
        if self.spec.port_blocks is None:
            return str(getattr(self.spec.ports, name))
        return f"$((PORT_BASE + {PortBlocks.offset(name)}))"

    @property
    def sandbox_nodes(self) -> int:
        if self.spec.sandbox is None:
            return 0
        return self.spec.nodes if self.spec.sandbox.every_node else 1

    @property
    def topology_resources(self) -> str:
        """With --topology, the user's own --ray-start-arg --resources=JSON (the topology program adds them
        to the node's, which would otherwise replace them): '{}' when none."""
        given = [arg.partition("=")[2] for arg in self.spec.ray_start_args if arg.startswith("--resources=")]
        return given[-1] if given and self.spec.topology else "{}"

    @property
    def ray_start_args(self) -> tuple[str, ...]:
        """--ray-start-arg as 'ray start' takes them (with --topology, --resources goes to the program)."""
        if not self.spec.topology:
            return self.spec.ray_start_args
        return tuple(arg for arg in self.spec.ray_start_args if not arg.startswith("--resources="))

    @property
    def preflights(self) -> bool:
        """The nodes check their GPUs before Ray starts (--preflight warn or fail)."""
        return self.spec.preflight != "off"

    @property
    def starts_driver_early(self) -> bool:
        """The head starts the driver while the workers join, held in ray.init until the cluster is whole
        (--early-driver): only a COMMAND that runs Python with its site hook and PYTHONPATH; not with
        restarts or checkpoints, whose driver must fail, restart and resume on a whole cluster, nor with a
        sandbox, which must answer before any of the driver's code runs."""
        early = (
            self.spec.early_driver
            and not self.spec.driver_restarts
            and not self.spec.resumes
            and self.spec.sandbox is None
        )
        return early and bool(self.spec.command) and runs_python_with_site(self.spec.command)

    @property
    def forwarded_signal(self) -> str | None:
        """The signal the batch script passes on to the driver: --forward-signal, or USR1 with
        --signal-before; None when neither asks for forwarding (the script then has none of its code)."""
        if self.spec.forward_signal is not None:
            return self.spec.forward_signal
        return DEFAULT_FORWARD_SIGNAL if self.spec.signal_before is not None else None

    @property
    def leave_wait_s(self) -> int:
        """How long the batch script waits, once the job is over, for the job steps to leave on their own
        before it ends and Slurm cancels them (KillWait later, KILL): Timing.leave_s, and with
        --keep-ray-logs the time each node may spend keeping its Ray logs, which comes before it removes
        its Ray temp dir, on top."""
        timing = self.spec.timing
        keeping = math.ceil(timing.keep_ray_logs_s) if self.spec.keep_ray_logs > 0 else 0
        return timing.leave_s + keeping


def runs_python_with_site(argv: tuple[str, ...]) -> bool:
    """``argv`` runs a Python (python, python3, python3.12, a path to one) that loads sitecustomize from
    PYTHONPATH: none of its options before the script turns that off (-I, -S, -E)."""
    if not argv or not _PYTHON.fullmatch(argv[0].rsplit("/", 1)[-1]):
        return False
    args = iter(argv[1:])
    for arg in args:
        if arg == "-" or arg.startswith("--") or not arg.startswith("-"):
            return True  # the script, or a long option: none of them turns the site hook off
        for k, flag in enumerate(arg[1:], start=1):
            if flag in "ISE":
                return False
            if flag in "mc":  # the rest is the program
                return True
            if flag in "WX":  # takes a value: the rest of this word, or the next word
                if k == len(arg) - 1:
                    next(args, None)
                break
    return True
