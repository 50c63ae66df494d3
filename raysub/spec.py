"""What a job is: a typed spec, checked with messages that name the option at fault."""

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast, get_args

from raysub.autoscale import AUTOSCALE_OPTIONS, Autoscale, autoscale_from_options
from raysub.errors import SpecError as SpecError
from raysub.passthrough import (
    CONTROL,
    RAY_START_OWNED,
    SBATCH_EXACT,
    SBATCH_OWNED,
    SRUN_OWNED,
    check_resources,
    owned_message,
    passed_options,
)
from raysub.plan import SIZES, Plan, PlanError, plan
from raysub.protocol import AuthMode, PreflightMode
from raysub.protocol.preflight_log import DEFAULT_MIN_FREE_MIB
from raysub.protocol.step_sources import step_regex_problem
from raysub.timing import Timing as Timing

# In COMMAND, with --checkpoint-dir: replaced by the checkpoint the driver resumes from, when it starts.
CHECKPOINT_PLACEHOLDER = "{checkpoint}"
# The most nodes raysub has brought up, simulated (benchmarks/scale_sim.py; docs/performance.md).
LARGEST_TRIED_NODES = 1024

# AF_UNIX socket paths longer than this are refused by the kernel.
MAX_SOCKET_PATH = 107
# Ray's longest socket path under --temp-dir,
# "/session_<YYYY-MM-DD_HH-MM-SS_ffffff>_<pid>/sockets/plasma_store", is at most 64 characters; keep a
# few spare for future names.
RAY_SOCKET_SUFFIX = 68
# The runtime placeholders of --ray-temp-dir and the longest value render assumes for each.
TEMP_DIR_PLACEHOLDERS = {"%j": 10, "%n": 20}

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SLURM_WORD = re.compile(r"[^\s#'\"\\]+")
# sbatch --array: indexes (N, N-M, N-M:STEP) separated by commas, and at most %K tasks at once.
_ARRAY = re.compile(r"\d+(-\d+(:\d+)?)?(,\d+(-\d+(:\d+)?)?)*(%\d+)?")
_MEMORY = re.compile(r"[0-9]+[KMGT]?", re.IGNORECASE)
_SLURM_TIME = re.compile(r"(\d+-)?\d+(:\d+){0,2}|\d+-\d+|UNLIMITED|INFINITE", re.IGNORECASE)
FORWARDABLE_SIGNALS = ("USR1", "USR2", "INT", "HUP", "QUIT")
# What the batch script forwards with --signal-before when --forward-signal does not say.
DEFAULT_FORWARD_SIGNAL = "USR1"
_INTERFACE = re.compile(r"[A-Za-z0-9_.:@-]{1,15}")
_HOST = re.compile(r"[A-Za-z0-9_.:-]{1,253}")
_MODE = re.compile(r"0?[0-7]{3}")

_MPI = re.compile(r"[A-Za-z0-9_]+")

# The choices of --auth and --sandbox-nodes, defined here only: the command line's choices and the
# checks below read them with typing.get_args.
SandboxNodes = Literal["all", "1"]


@dataclass(frozen=True)
class Ports:
    """Ray's ports on every node. All below 9000, away from Linux's ephemeral range (32768-60999)."""

    gcs: int = 6379
    client: int = 8001
    dashboard: int = 8265
    dashboard_agent: int = 8266
    dashboard_agent_grpc: int = 8267
    runtime_env_agent: int = 8268
    node_manager: int = 8076
    object_manager: int = 8077
    metrics_export: int = 8080
    min_worker: int = 8300
    max_worker: int = 8999

    def check(self) -> None:
        for name, value in vars(self).items():
            if not 1024 <= value <= 65535:
                raise SpecError(
                    f"--{name.replace('_', '-')}-port", f"{value} is not a port from 1024 to 65535"
                )
        if self.min_worker > self.max_worker:
            raise SpecError("--min-worker-port", "must not be above --max-worker-port")
        single = {k: v for k, v in vars(self).items() if k not in ("min_worker", "max_worker")}
        for name, value in single.items():
            if self.min_worker <= value <= self.max_worker:
                raise SpecError(f"--{name.replace('_', '-')}-port", f"{value} lies in the worker port range")
        taken: dict[int, str] = {}
        for name, value in single.items():
            flag = f"--{name.replace('_', '-')}-port"
            if value in taken:
                raise SpecError(taken[value], f"{value} is {flag} too; each of Ray's ports needs its own")
            taken[value] = flag

    def spans(self) -> list[tuple[int, int]]:
        """Every port as a span of ports, first to last: each single port, then the workers' range."""
        single = [v for k, v in vars(self).items() if k not in ("min_worker", "max_worker")]
        return [*((port, port) for port in single), (self.min_worker, self.max_worker)]


PortsMode = Literal["block", "fixed"]
# Where a sandbox listens unless --sandbox-port pins it: with --ports block, this place of each node's
# block, which Ray leaves free between its single ports and its workers' (WORKER_PORTS_AT); with --ports
# fixed (whole nodes, nobody else's ports to meet), NeMo-Skills' default port.
SANDBOX_PORT_AT = 9
SANDBOX_FIXED_PORT = 6000
# How many ports a job takes on each node with --ports block: Ray's single ports at the block's start,
# then (from WORKER_PORTS_AT) the ports of its worker processes, one each: more workers than a node
# runs at once.
PORT_BLOCK_SIZE = 500
WORKER_PORTS_AT = 10
# Below Linux's default ephemeral range (32768-60999), where outgoing connections take their ports, and
# above Ray's default worker ports (10002-19999), which a neighbour's Ray started by hand may use.
DEFAULT_PORT_RANGE = "24000-32767"
# The head's Ray client server gives each ray:// client a server of its own on one of these ports
# (MIN/MAX_SPECIFIC_SERVER_PORT in ray/util/client/server/proxier.py, fixed in Ray's code): a block
# there could lose a port to it after the node checked the block free.
RAY_CLIENT_SERVER_PORTS = range(23000, 24000)
_PORT_RANGE = re.compile(r"(\d{1,5})-(\d{1,5})")


@dataclass(frozen=True)
class PortBlocks:
    """The blocks of PORT_BLOCK_SIZE ports in ``first``..``last`` (--port-range). Each node of a job
    takes the block its job id picks, or the next one whose ports are all free there, and gives Ray
    the ports at fixed places in it: jobs that share nodes then never share ports."""

    first: int
    last: int

    @classmethod
    def parse(cls, text: str) -> "PortBlocks":
        match = _PORT_RANGE.fullmatch(text.strip())
        if match is None:
            raise SpecError("--port-range", f"{text!r} is not FIRST-LAST, such as {DEFAULT_PORT_RANGE}")
        blocks = cls(int(match[1]), int(match[2]))
        if not 1024 <= blocks.first <= blocks.last <= 65535:
            raise SpecError("--port-range", f"{text!r} is not a range of ports from 1024 to 65535")
        if blocks.count < 1:
            raise SpecError("--port-range", f"{text!r} holds no block of {PORT_BLOCK_SIZE} ports")
        reserved = RAY_CLIENT_SERVER_PORTS
        if blocks.first < reserved.stop and reserved.start <= blocks.last:
            raise SpecError(
                "--port-range",
                f"{text!r} overlaps {reserved.start}-{reserved.stop - 1}, where Ray's client server starts a "
                f"server for each ray:// client; take one above or below it, such as {DEFAULT_PORT_RANGE}",
            )
        return blocks

    @property
    def count(self) -> int:
        return (self.last - self.first + 1) // PORT_BLOCK_SIZE

    @staticmethod
    def offset(name: str) -> int:
        """Where Ray's port ``name`` (a Ports field) lies in a block."""
        if name == "min_worker":
            return WORKER_PORTS_AT
        if name == "max_worker":
            return PORT_BLOCK_SIZE - 1
        return list(Ports.__dataclass_fields__).index(name)


ScaleMode = Literal["auto", "normal", "large"]
# --scale auto is large from this many nodes: below the fewest reported to collapse when all join at
# once (400 on Ray 2.56, ray-project/ray#64845; 1000+ in skypilot-org/skypilot#9192), and where a node
# table the head reads 20 times a second (Timing.units_brisk_s) becomes megabytes a second for its GCS.
LARGE_SCALE_NODES = 256


@dataclass(frozen=True)
class Sandbox:
    """A sidecar such as a code-execution server; the driver starts once its own process listens on its
    port. ``port`` pins it; None: JobSpec.sandbox_port (a port of each node's block with --ports block)."""

    command: str
    port: int | None = None
    container: str | None = None
    nodes: SandboxNodes = "all"
    timeout: int = 300

    @property
    def every_node(self) -> bool:
        """One sandbox on every node of the job (--sandbox-nodes all), not just on the head's."""
        return self.nodes == "all"

    def check(self) -> None:
        if self.port is not None and not 1 <= self.port <= 65535:
            raise SpecError("--sandbox-port", f"{self.port} is not a port")
        if self.timeout < 1:
            raise SpecError("--sandbox-timeout", "must be at least 1 second")


@dataclass(frozen=True)
class Bound:
    """The smallest value a numeric option may take. ``unit`` ("second") is named in the message;
    a None value (an optional option left out) is not checked."""

    option: str
    attribute: str
    minimum: float
    unit: str = ""

    def check(self, value: float | None) -> None:
        if value is not None and value < self.minimum:
            raise SpecError(self.option, f"must be {self.lowest()}, not {value}")

    def lowest(self) -> str:
        """The limit in words: '0 or more', 'at least 1', 'at least 0.5 seconds'."""
        if self.minimum == 0:
            return "0 or more"
        if not self.unit:
            return f"at least {self.minimum}"
        plural = "" if self.minimum == 1 else "s"
        return f"at least {self.minimum} {self.unit}{plural}"


# Every option whose only rule is a lower limit, in the order check() reports them. Upper limits and
# other shapes (ports, the idle percentage) have messages of their own, in the per-part checks.
BOUNDS = (
    Bound("--nodes", "nodes", 1),
    Bound("--gpus-per-node", "gpus_per_node", 0),
    Bound("--cpus-per-task", "cpus_per_task", 1),
    Bound("--head-retries", "head_retries", 0),
    Bound("--worker-retries", "worker_retries", 0),
    Bound("--head-timeout", "head_timeout", 1, "second"),
    Bound("--workers-timeout", "workers_timeout", 1, "second"),
    Bound("--signal-before", "signal_before", 1, "second"),
    Bound("--monitor-interval", "monitor_interval", 0.5, "second"),
    Bound("--gpu-idle-after", "gpu_idle_after", 1, "second"),
    Bound("--driver-restarts", "driver_restarts", 0),
    Bound("--restart-backoff", "restart_backoff", 1, "second"),
    Bound("--min-free-gpu-mem", "min_free_gpu_mem", 0),
    Bound("--wait-gpus", "wait_gpus", 0),
    Bound("--keep-ray-logs", "keep_ray_logs", 0),
)


@dataclass(frozen=True)
class JobSpec:
    """Everything ``raysub render`` needs. Values are used verbatim; render shell-quotes each one."""

    nodes: int
    command: tuple[str, ...] = ()
    gpus_per_node: int = 8
    gpu_request: bool = True
    cpus_per_task: int | None = None
    partition: str | None = None
    account: str | None = None
    time: str | None = None
    job_name: str = "raysub"
    exclusive: bool = True
    sbatch_args: tuple[str, ...] = ()
    log_dir: str | None = None
    # Where LOG_DIR goes when log_dir (the submit directory) lets someone else rename what it holds;
    # None: such a job does not start (docs/security.md).
    private_log_dir: str | None = None
    container_image: str | None = None
    container_mounts: str | None = None
    container_workdir: str | None = None  # None: the submit directory, mounted (as ray.sub)
    container_mount_home: bool = True  # pyxis' default; ray.sub passes --no-container-mount-home
    srun_args: tuple[str, ...] = ()  # on every step's srun
    mpi: str | None = None  # srun --mpi of every step
    setup: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    ray_temp_dir: str = "/tmp/rs-%j/%n"
    ray_start_args: tuple[str, ...] = ()
    ports: Ports = field(default_factory=Ports)
    array: str | None = None  # sbatch --array: one Ray cluster per task
    ports_mode: PortsMode | None = None  # None: block with --no-exclusive, fixed with --exclusive
    port_range: str = DEFAULT_PORT_RANGE
    interface: str | None = None
    dedicated_head: bool = False
    # --head-partition: a heterogeneous job, the head alone (no GPUs) in component 0 on this partition.
    head_partition: str | None = None
    head_cpus: int | None = None
    head_mem: str | None = None  # as sbatch --mem takes it: MB, or with a unit K, M, G, T
    head_retries: int = 2
    worker_retries: int = 2
    head_timeout: int = 300
    workers_timeout: int = 600
    sandbox: Sandbox | None = None
    autoscale: Autoscale | None = None  # --autoscale and its options (raysub/autoscale.py)
    requeue: bool = False
    signal_before: int | None = None
    forward_signal: str | None = None  # None: USR1 with --signal-before, else no forwarding at all
    auth: AuthMode = "token"
    dashboard: bool = True
    dashboard_host: str | None = None
    log_mode: str = "0750"
    monitor: bool = True
    monitor_interval: float = 5.0
    gpu_idle_threshold: float = 5.0
    gpu_idle_after: int = 600
    nccl_debug: bool = True
    driver_restarts: int = 0
    restart_backoff: int = 30
    checkpoint_dir: str | None = None
    checkpoint_marker: str | None = None
    create_checkpoint_dir: bool = False
    preflight: PreflightMode = "warn"
    min_free_gpu_mem: int = DEFAULT_MIN_FREE_MIB  # MiB
    wait_gpus: int = 0  # seconds
    # MiB of each node's Ray logs (before compression) kept in LOG_DIR/ray-logs as it leaves; 0: none. An
    # ordinary run's logs fit (raylet.out grows by a few MB a day); a node whose workers printed much keeps
    # the newest of it, about a tenth of this once compressed.
    keep_ray_logs: int = 64
    # Each node finds where it sits (NVLink domain, Slurm switch or block) and gives Ray NeMo-RL's resources
    # and raysub/ labels for it (raysub/job/programs/topology.py).
    topology: bool = True
    # Unset the MPI launcher's variables (PMI_*, PMIX_*, MPI_*, OMPI_*) before 'ray start', for code that
    # runs MPI_Init inside Ray (TensorRT-LLM); SLURM_* stay.
    clean_mpi_env: bool = False
    # Where the step can be read besides the trainer's report, recorded in LOG_DIR (step_sources.json) for
    # raysub health, watch and report: how the driver's log shows it, the trainer's TensorBoard logdir, its
    # JSON-lines metrics (both absolute paths).
    step_regex: str | None = None
    tensorboard_dir: str | None = None
    metrics_file: str | None = None
    # The parallel sizes ``nodes`` was computed from (render --tp ... in place of --nodes), else None.
    plan: Plan | None = None
    smoke: bool = False
    early_driver: bool = True
    scale: ScaleMode = "auto"
    timing: Timing = field(default_factory=Timing)

    @property
    def workers(self) -> int:
        return self.nodes - 1

    @property
    def interactive(self) -> bool:
        """No driver: the cluster stays up for raysub attach (neither COMMAND nor --smoke)."""
        return not self.command and not self.smoke

    @property
    def head_gpus(self) -> int:
        return 0 if self.dedicated_head or self.het_head else self.gpus_per_node

    @property
    def large_scale(self) -> bool:
        """--scale large, or --scale auto at LARGE_SCALE_NODES nodes or more."""
        return self.scale == "large" or (self.scale == "auto" and self.nodes >= LARGE_SCALE_NODES)

    @property
    def warnings(self) -> list[str]:
        """What render says on stderr of a job it renders all the same."""
        said = [self.plan.warning] if self.plan is not None and self.plan.warning else []
        if self.large_scale and not (self.dedicated_head or self.het_head):
            said.append(
                f"{self.nodes} nodes, and the head's node also runs work: the head's GCS answers every node, "
                "and a busy node answers late; give it a node of its own with --dedicated-head, or a CPU "
                "node apart with --head-partition"
            )
        if self.nodes > LARGEST_TRIED_NODES:
            said.append(
                f"--nodes {self.nodes}: more than raysub has brought up ({LARGEST_TRIED_NODES} simulated "
                "nodes, docs/performance.md); check the number"
            )
        if not self.resumes and any(CHECKPOINT_PLACEHOLDER in word for word in self.command):
            said.append(
                f"COMMAND has {CHECKPOINT_PLACEHOLDER}, which only --checkpoint-dir replaces: without it the "
                "driver gets it as written"
            )
        if not self.token_auth:
            said.append("--auth none: anyone who can reach the head's ports can run code as you in this job "
                        "(docs/security.md)")  # fmt: skip
        if self.sandbox is not None and self.sandbox.port is not None and not self.exclusive:
            said.append(
                f"--sandbox-port {self.sandbox.port} on shared nodes (--no-exclusive): another job's sandbox "
                "or another user's server there keeps this job's from starting (the job then ends naming "
                "the port); leave it out to take a free port of each node's block"
            )
        return said

    @property
    def het_head(self) -> bool:
        """A heterogeneous job (--head-partition): component 0 is the head's node, component 1 the
        workers'; the batch script runs on the head's, as always."""
        return self.head_partition is not None

    @property
    def counts_gpus(self) -> bool:
        """The head counts the cluster's GPUs as it fills; with --gpus-per-node 0 it counts nodes."""
        return self.gpus_per_node > 0

    @property
    def token_auth(self) -> bool:
        """Ray runs with a per-job token (--auth token); otherwise anyone who reaches the head gets in."""
        return self.auth == "token"

    @property
    def private_log_base(self) -> str | None:
        """--private-log-dir with a leading ~ taken as the home of whoever renders (a raysub.toml profile
        may say ~/raysub-logs; the job's shell would not expand it, and may have no HOME)."""
        return None if self.private_log_dir is None else str(Path(self.private_log_dir).expanduser())

    @property
    def port_blocks(self) -> PortBlocks | None:
        """With --ports block (the default on shared nodes), the blocks each node takes its ports from;
        None with --ports fixed (the default with --exclusive), where every node uses the --*-port values."""
        mode = self.ports_mode or ("fixed" if self.exclusive and not self.het_head else "block")
        return PortBlocks.parse(self.port_range) if mode == "block" else None

    def check(self) -> "JobSpec":
        """Raise SpecError for the first value the job could not run with; return self otherwise."""
        for bound in BOUNDS:
            bound.check(getattr(self, bound.attribute))
        self._check_header()
        self._check_ray_start_args()
        self._check_steps()
        self._check_env()
        self._check_nul_bytes()
        self._check_interface()
        self._check_signals()
        self._check_ports()
        self._check_temp_dir()
        self._check_security()
        self._check_monitor()
        self._check_driver()
        self._check_restarts()
        self._check_step_sources()
        self._check_preflight()
        if self.sandbox is not None:
            self.sandbox.check()
            self._check_sandbox_port()
        if self.autoscale is not None:
            self.autoscale.check(self.nodes)
        return self

    def _check_sandbox_port(self) -> None:
        """A sandbox's one port is none of Ray's: not one of the fixed ports, nor in the blocks' range."""
        port = self.sandbox_port
        if port is None:
            return
        if self.port_blocks is not None and self.port_blocks.first <= port <= self.port_blocks.last:
            raise SpecError(
                "--sandbox-port",
                f"{port} lies in --port-range {self.port_range}, where each node takes a block of Ray's "
                "ports; leave --sandbox-port out to take the free port of each node's block",
            )
        if self.port_blocks is None and any(first <= port <= last for first, last in self.ports.spans()):
            raise SpecError(
                "--sandbox-port", f"{port} is one of Ray's ports (the --*-port options); pin another"
            )

    @property
    def sandbox_port(self) -> int | None:
        """The port every sandbox listens on when one port serves all nodes: --sandbox-port, or with --ports
        fixed SANDBOX_FIXED_PORT. None with --ports block and no --sandbox-port: each node's sandbox takes
        the place SANDBOX_PORT_AT of that node's block, which its Ray node script publishes."""
        if self.sandbox is None:
            return None
        if self.sandbox.port is not None:
            return self.sandbox.port
        return SANDBOX_FIXED_PORT if self.port_blocks is None else None

    def _check_ports(self) -> None:
        self.ports.check()
        PortBlocks.parse(self.port_range)
        if self.port_blocks is None:
            return
        for name, value in vars(self.ports).items():
            if value != getattr(Ports, name):
                raise SpecError(
                    f"--{name.replace('_', '-')}-port",
                    "sets a fixed port, but this job takes a block of ports on each node (--ports block, "
                    "the default with --no-exclusive); add --ports fixed",
                )

    def _check_het_head(self) -> None:
        """--head-cpus and --head-mem size the head of a heterogeneous job (--head-partition)."""
        for option, value in (("--head-cpus", self.head_cpus), ("--head-mem", self.head_mem)):
            if value is not None and not self.het_head:
                raise SpecError(option, "sizes the head of a heterogeneous job: give --head-partition too")
        if not self.het_head:
            return
        if not _SLURM_WORD.fullmatch(cast(str, self.head_partition)):
            raise SpecError("--head-partition", f"{self.head_partition!r} is not a partition name")
        if self.head_cpus is not None and self.head_cpus < 1:
            raise SpecError("--head-cpus", f"must be at least 1, not {self.head_cpus}")
        if self.head_mem is not None and not _MEMORY.fullmatch(self.head_mem):
            raise SpecError("--head-mem", f"{self.head_mem!r} is not a memory size such as 16G or 4000")
        if self.workers < 1:
            raise SpecError("--head-partition", "leaves no node for workers: give --nodes 2 or more")
        if self.array is not None:
            raise SpecError("--array", "Slurm runs no array of heterogeneous jobs (--head-partition)")
        if self.sandbox is not None:
            raise SpecError("--sandbox-command", "is not supported with --head-partition yet")
        if (
            self.head_mem is not None
            and not self.exclusive
            and not any(
                arg.startswith(("--mem=", "--mem-per-cpu=", "--mem-per-gpu=")) for arg in self.sbatch_args
            )
        ):
            raise SpecError(
                "--head-mem",
                "with --no-exclusive, give the workers' memory too (--sbatch-arg=--mem=...): sbatch "
                "carries --head-mem over to them otherwise",
            )

    def _check_header(self) -> None:
        """The values written on '#SBATCH' lines, which sbatch (not bash) reads."""
        self._check_het_head()
        if self.array is not None and not _ARRAY.fullmatch(self.array):
            raise SpecError(
                "--array", f"{self.array!r} is not sbatch's array syntax, such as 0-7, 1,3,5 or 0-15%4"
            )
        for option, value in (("--partition", self.partition), ("--account", self.account)):
            if value is not None and not _SLURM_WORD.fullmatch(value):
                raise SpecError(option, f"{value!r} is not a Slurm name (no spaces, quotes or '#')")
        # Header values end up on '#SBATCH' comment lines: a newline there would start a line of bash.
        if not self.job_name or CONTROL.search(self.job_name):
            raise SpecError("--job-name", f"{self.job_name!r} is empty or has a newline or control character")
        if self.time is not None and not _SLURM_TIME.fullmatch(self.time):
            raise SpecError("--time", f"{self.time!r} is not a Slurm time such as 30, 4:00:00 or 1-12")
        passed_options("--sbatch-arg", self.sbatch_args, "sbatch", "--qos=high", SBATCH_OWNED, SBATCH_EXACT)

    def _check_ray_start_args(self) -> None:
        """No --ray-start-arg may set what raysub sets on every node; with --topology, resources of the
        user's own are a JSON object of numbers (the topology program adds them to the node's)."""
        for arg in self.ray_start_args:
            flag, _, value = arg.partition("=")
            if self.topology and flag == "--labels-file":
                raise SpecError(
                    "--ray-start-arg",
                    f"{arg!r}: with --topology raysub gives each node its labels file; pass "
                    "--ray-start-arg=--labels=KEY=VALUE (added to raysub's), or --no-topology",
                )
            if self.topology and flag == "--resources":
                check_resources(arg, value)
            if flag not in RAY_START_OWNED or (flag == "--num-cpus" and self.cpus_per_task is None):
                continue
            raise SpecError("--ray-start-arg", owned_message(arg, flag, RAY_START_OWNED[flag], "'ray start'"))

    def _check_steps(self) -> None:
        """Every step's srun options (--srun-arg, --mpi) and the job's container options."""
        if self.mpi is not None and not _MPI.fullmatch(self.mpi):
            raise SpecError("--mpi", f"{self.mpi!r} is not an MPI plugin name such as pmix, pmi2 or none")
        passed_options("--srun-arg", self.srun_args, "srun", "--cpu-bind=none", SRUN_OWNED)
        containers = self.container_image is not None or (self.sandbox and self.sandbox.container)
        given = (
            ("--container-mounts", self.container_mounts is not None, self.container_image is not None),
            ("--container-workdir", self.container_workdir is not None, self.container_image is not None),
            ("--no-container-mount-home", not self.container_mount_home, containers),
        )
        for option, set_, acts in given:
            if set_ and not acts:
                raise SpecError(option, "has no container to act on without --container-image")

    def _check_env(self) -> None:
        for key, _ in self.env:
            if not _ENV_NAME.fullmatch(key):
                raise SpecError("--env", f"{key!r} is not a variable name")

    def _check_nul_bytes(self) -> None:
        """No value can carry a NUL byte: bash variables, argv and files all end a string at one."""
        for name, value in vars(self).items():
            if isinstance(value, str) and "\0" in value:
                raise SpecError(f"--{name.replace('_', '-')}", "contains a NUL byte")
        if any("\0" in arg for arg in self.command):
            raise SpecError("COMMAND", "contains a NUL byte, which no argv can carry")

    def _check_interface(self) -> None:
        if self.interface is not None and not _INTERFACE.fullmatch(self.interface):
            raise SpecError("--interface", f"{self.interface!r} is not a network interface name")

    def _check_signals(self) -> None:
        """--signal-before must come before the end of --time (its lower limit is in BOUNDS), and
        --forward-signal be one the driver can catch."""
        limit = time_limit_seconds(self.time) if self.time is not None else None
        if self.signal_before is not None and limit is not None and self.signal_before >= limit:
            raise SpecError(
                "--signal-before",
                f"{self.signal_before} s is not before the end of --time {self.time} ({limit} s): "
                "the warning would come at the start of the job, or never",
            )
        if self.forward_signal is not None and self.forward_signal not in FORWARDABLE_SIGNALS:
            raise SpecError(
                "--forward-signal", f"{self.forward_signal!r} is not one of {', '.join(FORWARDABLE_SIGNALS)}"
            )

    def _check_monitor(self) -> None:
        """The idle threshold is a percentage; the monitor's other limits are in BOUNDS."""
        if not 0 < self.gpu_idle_threshold <= 100:
            raise SpecError(
                "--gpu-idle-threshold", f"must be a percentage above 0, not {self.gpu_idle_threshold}"
            )

    def _check_driver(self) -> None:
        """One driver: COMMAND or --smoke (raysub's own), not both."""
        if self.smoke and self.command:
            raise SpecError("--smoke", "makes raysub's smoke test the driver: give it or a COMMAND, not both")

    def _check_restarts(self) -> None:
        """Restarts need a driver to restart; the checkpoint options name a place (counts are in BOUNDS)."""
        if self.driver_restarts and self.interactive:
            raise SpecError("--driver-restarts", "needs a COMMAND after -- (the driver to restart)")
        if self.checkpoint_marker is not None and self.checkpoint_dir is None:
            raise SpecError("--checkpoint-marker", "needs --checkpoint-dir")
        if self.create_checkpoint_dir and self.checkpoint_dir is None:
            raise SpecError("--create-checkpoint-dir", "needs --checkpoint-dir")
        for option, value in (
            ("--checkpoint-dir", self.checkpoint_dir),
            ("--checkpoint-marker", self.checkpoint_marker),
        ):
            if value is not None and (not value or CONTROL.search(value)):
                raise SpecError(option, f"{value!r} is empty or has a newline or control character")

    def _check_step_sources(self) -> None:
        if self.step_regex is not None and (why := step_regex_problem(self.step_regex)) is not None:
            raise SpecError("--step-regex", why)
        for option, value in (
            ("--tensorboard-dir", self.tensorboard_dir),
            ("--metrics-file", self.metrics_file),
        ):
            if value is not None and (not value.startswith("/") or CONTROL.search(value)):
                raise SpecError(option, f"{value!r} is not an absolute path on one line")

    def _check_preflight(self) -> None:
        modes = get_args(PreflightMode)
        if self.preflight not in modes:
            raise SpecError("--preflight", f"must be one of {', '.join(modes)}, not {self.preflight!r}")

    @property
    def resumes(self) -> bool:
        """The driver is told where to resume (RAYSUB_RESUME_FROM, and {checkpoint} in COMMAND)."""
        return self.checkpoint_dir is not None

    def _check_security(self) -> None:
        modes = get_args(AuthMode)
        if self.auth not in modes:
            raise SpecError("--auth", f"must be one of {', '.join(modes)}, not {self.auth!r}")
        if self.dashboard_host is not None:
            if not self.dashboard:
                raise SpecError("--dashboard-host", "has no dashboard to bind with --no-dashboard")
            if not _HOST.fullmatch(self.dashboard_host):
                raise SpecError("--dashboard-host", f"{self.dashboard_host!r} is not a host name or address")
        if not _MODE.fullmatch(self.log_mode):
            raise SpecError("--log-mode", f"{self.log_mode!r} is not an octal mode such as 0750")
        mode = int(self.log_mode, 8)
        if mode & 0o700 != 0o700:
            raise SpecError("--log-mode", f"{self.log_mode}: the job's own user needs rwx (0700) on its logs")
        if mode & 0o022:
            raise SpecError(
                "--log-mode",
                f"{self.log_mode}: a log directory that others can write lets them replace the scripts "
                "the nodes run and the signal files the job trusts; give the group read (0750) at most",
            )
        for option, path in (("--log-dir", self.log_dir), ("--private-log-dir", self.private_log_dir)):
            if path is not None and re.search(r"[%\\\x00-\x1f\x7f]", path):
                raise SpecError(
                    option,
                    f"{path!r}: srun's --output reads % and backslash as patterns, and newlines "
                    "break Slurm's files; choose a path without them",
                )

    def _check_temp_dir(self) -> None:
        path = self.ray_temp_dir
        if not path.startswith("/"):
            raise SpecError("--ray-temp-dir", f"{path!r} must be an absolute path")
        if re.search(r"[^A-Za-z0-9_./%+-]", path):
            raise SpecError("--ray-temp-dir", f"{path!r}: use only letters, digits and _ . / + - % in it")
        longest = len(path) + sum(path.count(k) * (n - len(k)) for k, n in TEMP_DIR_PLACEHOLDERS.items())
        if longest + RAY_SOCKET_SUFFIX > MAX_SOCKET_PATH:
            limit = MAX_SOCKET_PATH - RAY_SOCKET_SUFFIX
            raise SpecError(
                "--ray-temp-dir",
                f"{path!r} can grow to {longest} characters (%j counts 10, %n 20); "
                f"Ray's socket paths under it "
                f"would pass the kernel's {MAX_SOCKET_PATH}-byte limit: keep it to {limit}",
            )


def time_limit_seconds(text: str) -> int | None:
    """A Slurm time limit in seconds (None for UNLIMITED). sbatch reads minutes, minutes:seconds,
    hours:minutes:seconds, days-hours, days-hours:minutes and days-hours:minutes:seconds."""
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:
        hours, minutes, seconds = [*parts, 0, 0][:3]
        return ((int(days) * 24 + hours) * 60 + minutes) * 60 + seconds
    if len(parts) == 3:
        return (parts[0] * 60 + parts[1]) * 60 + parts[2]
    return parts[0] * 60 + (parts[1] if len(parts) == 2 else 0)


def parse_env(pairs: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """``KEY=VALUE`` strings as pairs; the value may hold anything, '=' included."""
    parsed = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SpecError("--env", f"{pair!r} is not KEY=VALUE")
        parsed.append((key, value))
    return tuple(parsed)


def sandbox_from_options(
    command: str | None, port: int | None, container: str | None, nodes: str, timeout: int
) -> Sandbox | None:
    if command is None:
        for option, value in (("--sandbox-port", port), ("--sandbox-container", container)):
            if value is not None:
                raise SpecError(option, "needs --sandbox-command")
        return None
    choices = get_args(SandboxNodes)
    if nodes not in choices:
        raise SpecError("--sandbox-nodes", f"must be {' or '.join(map(repr, choices))}, not {nodes!r}")
    # The test above is what makes ``nodes`` one of the choices; mypy cannot follow it through get_args.
    return Sandbox(
        command=command, port=port, container=container, nodes=cast(SandboxNodes, nodes), timeout=timeout
    )


SIZE_OPTIONS = ", ".join(size.option for size in SIZES)


def nodes_from_options(values: Mapping[str, Any]) -> tuple[int, Plan | None]:
    """--nodes, or else the nodes the parallel sizes need (raysub plan), one more for --dedicated-head's
    GPU-less head; with the Plan they came from. Exactly one of the two must be given."""
    sizes = {size.name: values[size.name] for size in SIZES if values.get(size.name) is not None}
    nodes = values.get("nodes")
    if sizes and nodes is not None:
        raise SpecError(
            "--nodes",
            f"give --nodes or the parallel sizes ({SIZE_OPTIONS}), not both "
            "(--nodes may come from RAYSUB_NODES or the --profile)",
        )
    if not sizes:
        if nodes is None:
            raise SpecError(
                "--nodes",
                f"is required (how many nodes the job gets), or the parallel sizes ({SIZE_OPTIONS})",
            )
        return nodes, None
    try:
        planned = plan(values["gpus_per_node"], **sizes)
    except PlanError as error:
        raise SpecError(error.option, error.message) from error
    apart = values.get("dedicated_head") or values.get("head_partition")
    return planned.nodes + (1 if apart else 0), planned


def spec_from_options(values: Mapping[str, Any]) -> JobSpec:
    """A checked JobSpec from ``raysub render``'s option values, keyed by option name (``gpus_per_node``)."""
    nodes, planned = nodes_from_options(values)
    ports = Ports(**{name: values[f"{name}_port"] for name in Ports.__dataclass_fields__})
    sandbox = sandbox_from_options(
        values["sandbox_command"],
        values["sandbox_port"],
        values["sandbox_container"],
        values["sandbox_nodes"],
        values["sandbox_timeout"],
    )
    plain = {
        name: values[name]
        for name in JobSpec.__dataclass_fields__
        if name not in ("nodes", "command", "env", "ports", "sandbox", "plan", "autoscale") and name in values
    }
    for name in ("sbatch_args", "ray_start_args", "srun_args"):
        plain[name] = tuple(plain[name])
    for name in ("tensorboard_dir", "metrics_file"):  # where the job runs: the submitting directory, usually
        plain[name] = plain.get(name) and str(Path(plain[name]).absolute())
    if plain["forward_signal"] is not None:
        plain["forward_signal"] = str(plain["forward_signal"]).upper().removeprefix("SIG")
    return JobSpec(
        **plain,
        nodes=nodes,
        plan=planned,
        command=tuple(values["command"]),
        env=parse_env(tuple(values["env"])),
        ports=ports,
        sandbox=sandbox,
        autoscale=autoscale_from_options(*(values[f"autoscale{part}"] for part in AUTOSCALE_OPTIONS)),
    ).check()
