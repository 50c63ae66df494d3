"""The LOG_DIR layout and the signal-file protocol: the one place that names every file a job creates.

The rendered bash takes these names from :func:`template_names` and the Python readers from
:class:`LogDir`, so both sides always agree. docs/protocol.md describes the phases and who writes what.
"""

import os
import pwd
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# Per-attempt directory: <base>/<jobid>-logs, or <base>/<jobid>-<restart count>-logs after a requeue.
LOG_DIR_SUFFIX = "-logs"

# Signal files, each written once and atomically (temp file + rename) unless said otherwise.
CANARY = "raysub_canary"  # batch script: a token every node must read back (shared-filesystem check)
STARTED_RAY_HEAD = "STARTED_RAY_HEAD"  # head: "<ip>:<gcs port>" once the GCS answers and the raylet is up
WORKER_UNITS = "ray_worker_units"  # head sidecar: live GPUs (or nodes with --gpus-per-node 0); rewritten
SANDBOX_READY_PREFIX = "SANDBOX_READY_"  # sandbox on <host>: its port answers; file name ends with the host
DRIVER_STARTED = "DRIVER_STARTED"  # head: the driver runs; from now on a node whose Ray exits ends the job
DRIVER_PID = "driver_pid"  # head: the driver's process group, for forwarding signals from the batch script
DRIVER_EXIT_CODE = "driver_exit_code"  # head: the driver's exit status
ENDED = "ENDED"  # anyone: the job is over; one line saying why. Every waiting node leaves when it appears.
JOINED_NODES = "ray_joined_nodes"  # head sidecar: names of the nodes alive in Ray, one per line; rewritten
LATEST = "latest"  # in the base directory: a symlink to the newest attempt's LOG_DIR

# The per-user job index, so raysub's commands find a job from any directory (docs/protocol.md, "Finding a
# job"). As each attempt starts, the batch script appends one line with ONE printf (a single append, so the
# lines of concurrent jobs never interleave):
#     <jobid>\t<restart count>\t<absolute LOG_DIR>\t<epoch seconds>\n
# to <state home>/JOB_INDEX_DIR/JOB_INDEX, where <state home> is $XDG_STATE_HOME when it is an absolute
# path, else <home>/STATE_HOME_DEFAULT. Read by read_job_index; tests write it with append_job_index.
STATE_HOME_DEFAULT = ".local/state"
JOB_INDEX_DIR = "raysub"  # made 0700
JOB_INDEX = "jobs.tsv"

# Environment variables the batch script passes to its steps. Internal: they start with an underscore, so
# they can never be mistaken for the RAYSUB_<OPTION> defaults of raysub's own commands (a `raysub status`
# run by the driver must not take this attempt's LOG_DIR for its --log-dir).
ENV_PREFIX = "_RAYSUB_"
ENV_LOG_DIR = f"{ENV_PREFIX}LOG_DIR"  # this attempt's LOG_DIR
ENV_CANARY = f"{ENV_PREFIX}CANARY"  # the token in the canary file
ENV_NODE_LIST = f"{ENV_PREFIX}NODE_LIST"  # the job's nodes, space-separated
ENV_SANDBOX_HOSTS = f"{ENV_PREFIX}SANDBOX_HOSTS"  # the nodes that run a sandbox, space-separated
# Set by each node script for everything it starts ("<canary> <role>"); swept when the script ends.
ENV_MARK = f"{ENV_PREFIX}JOB_MARK"

# The timeline: one JSON object per line, {"t": <epoch seconds>, "phase": ..., "node": ..., "detail": ...},
# appended under an flock on TIMELINE_LOCK so lines from different nodes never interleave.
TIMELINE = "timeline.jsonl"
TIMELINE_LOCK = "timeline.lock"
PHASE_JOB_START = "job_start"  # batch script
PHASE_CANARY_OK = "canary_ok"  # every node
PHASE_HEAD_READY = "head_ready"  # head; detail: the address
PHASE_WORKER_JOINED = "worker_joined"  # head sidecar; detail: the node that joined Ray
PHASE_SANDBOX_READY = "sandbox_ready"  # each sandbox node
PHASE_DRIVER_START = "driver_start"  # head
PHASE_DRIVER_END = "driver_end"  # head; detail: the exit status
PHASE_ENDED = "ended"  # whoever writes ENDED; detail: the reason
PHASE_SIGNAL_FORWARDED = "signal_forwarded"  # batch script and head; detail: the signal
PHASE_STALE_LOG_DIR = "stale_log_dir"  # batch script; detail: where another job's LOG_DIR was moved
PHASE_GPU_IDLE = "gpu_idle"  # head's monitor; detail: how many GPUs, below what, for how long

# The head's monitor (--monitor): one JSON snapshot per line, {"t": ..., "nodes": {<node>: {...}},
# "failed": [...]}, kept under MONITOR_MAX_BYTES by halving its resolution (raysub/monitor.py).
METRICS = "metrics.jsonl"
MONITOR_MAX_BYTES = 64 * 2**20

# Scripts the batch script writes into LOG_DIR before launching anything.
HEAD_SCRIPT = "head.sh"
WORKER_SCRIPT = "worker.sh"
DRIVER_SCRIPT = "driver_command.sh"
SANDBOX_SCRIPT = "sandbox.sh"
ATTACH_SCRIPT = "attach.sh"
MONITOR_SCRIPT = "monitor.py"  # raysub/monitor.py itself, run by the head with Ray's Python
ATTACH_ENV = "attach.env"  # batch script: "<jobid> <head node>", read by attach.sh
NODE_MAP = "nodes.tsv"  # batch script: "<role>\t<index>\t<node>" per node: head 0, worker 0..N-2
ROLE_HEAD = "head"
ROLE_WORKER = "worker"
# batch script, with --container-image: the head step's pyxis options, one per line, which raysub attach
# and attach.sh use to join the head's container (or, without its name, to start the job's image elsewhere)
CONTAINER_ARGS = "container_srun_options"
# The head's container is named <prefix><canary>: unique per attempt. Workers' and sandboxes' are unnamed.
CONTAINER_NAME_PREFIX = "raysub-"
CONTAINER_NAME_OPTION = "--container-name="

# Ray token authentication (--auth token): the batch script writes a random per-job token here, the
# directory 0700 and the file 0600, before any step starts. Every node, the driver and raysub's own
# commands read it through RAY_AUTH_TOKEN_PATH; nobody else on the cluster can.
AUTH_DIR = ".ray-auth"
AUTH_TOKEN = f"{AUTH_DIR}/token"

# Logs.
HEAD_LOG = "ray-head.log"
SRUN_LOG_PREFIX = "srun-"  # srun's own messages for each step ("srun-workers.log"), e.g. which task died
WORKER_LOG_PREFIX = "ray-worker-"
DRIVER_LOG = "ray-driver.log"
SANDBOX_LOG_PREFIX = "sandbox-"
LOG_SUFFIX = ".log"


def log_dir_name(job_id: str | int, restart_count: int = 0) -> str:
    """The attempt directory's name: ``<jobid>-logs``, or ``<jobid>-<restart>-logs`` after a requeue."""
    if restart_count:
        return f"{job_id}-{restart_count}{LOG_DIR_SUFFIX}"
    return f"{job_id}{LOG_DIR_SUFFIX}"


def worker_index_width(workers: int) -> int:
    """Digits of the zero-padded worker index: the width of the largest index, ``workers - 1``."""
    return len(str(max(workers - 1, 0)))


def worker_log_name(index: int, workers: int) -> str:
    return f"{WORKER_LOG_PREFIX}{index:0{worker_index_width(workers)}d}{LOG_SUFFIX}"


def worker_log_pattern(workers: int) -> str:
    """srun's --output pattern for the batched worker step; %t is the task (worker) index."""
    return f"{WORKER_LOG_PREFIX}%{worker_index_width(workers)}t{LOG_SUFFIX}"


def sandbox_log_pattern() -> str:
    return f"{SANDBOX_LOG_PREFIX}%t{LOG_SUFFIX}"


def template_names() -> dict[str, str]:
    """Every protocol name, for the templates (``files.ENDED`` and so on)."""
    return {
        name: value
        for name, value in globals().items()
        if name.isupper() and isinstance(value, str) and not name.startswith("_")
    }


@dataclass(frozen=True)
class NodeEntry:
    """One line of nodes.tsv: the head (index 0) or worker ``index``, and the Slurm node it runs on."""

    role: str
    index: int
    node: str


@dataclass(frozen=True)
class LogDir:
    """One attempt's LOG_DIR and every file in it."""

    path: Path

    @classmethod
    def of(cls, base: Path, job_id: str | int, restart_count: int = 0) -> "LogDir":
        return cls(base / log_dir_name(job_id, restart_count))

    def file(self, name: str) -> Path:
        return self.path / name

    @property
    def head_log(self) -> Path:
        return self.file(HEAD_LOG)

    @property
    def driver_log(self) -> Path:
        return self.file(DRIVER_LOG)

    def worker_log(self, index: int, workers: int) -> Path:
        return self.file(worker_log_name(index, workers))

    @property
    def ended(self) -> Path:
        return self.file(ENDED)

    @property
    def metrics(self) -> Path:
        return self.file(METRICS)

    @property
    def auth_token(self) -> Path:
        return self.file(AUTH_TOKEN)

    @property
    def started_ray_head(self) -> Path:
        return self.file(STARTED_RAY_HEAD)

    @property
    def worker_units(self) -> Path:
        return self.file(WORKER_UNITS)

    def node_map(self) -> list[NodeEntry]:
        """Which node is the head and which is worker k (empty until the batch script has written it)."""
        path = self.file(NODE_MAP)
        if not path.exists():
            return []
        entries = []
        for line in path.read_text().splitlines():
            role, index, node = line.split("\t")
            entries.append(NodeEntry(role, int(index), node))
        return entries

    def log_of(self, entry: NodeEntry, workers: int) -> Path:
        """The Ray log of a node of the node map."""
        return self.head_log if entry.role == ROLE_HEAD else self.worker_log(entry.index, workers)

    def container_args(self, head: bool = True) -> list[str]:
        """The pyxis options to attach with: the head's container itself, or (``head=False``) a new
        container from the same image with the same mounts, as the unnamed worker containers are."""
        path = self.file(CONTAINER_ARGS)
        options = path.read_text().splitlines() if path.exists() else []
        return [o for o in options if head or not o.startswith(CONTAINER_NAME_OPTION)]


@dataclass(frozen=True)
class IndexEntry:
    """One line of the job index: attempt ``restart`` of job ``job_id``, its LOG_DIR, when it started."""

    job_id: str
    restart: int
    log_dir: Path
    started: int  # epoch seconds

    def line(self) -> bytes:
        """The line as the batch script writes it (its printf and this must agree; a unit test checks)."""
        fields = [self.job_id, str(self.restart), os.fsdecode(self.log_dir), str(self.started)]
        return os.fsencode("\t".join(fields) + "\n")


def job_index_path(environ: Mapping[str, str] | None = None) -> Path:
    """The job index of the user whose environment ``environ`` is (default: this process's)."""
    env = os.environ if environ is None else environ
    state = Path(env.get("XDG_STATE_HOME", ""))
    if not state.is_absolute():  # unset, empty or relative: the XDG spec says to ignore it
        # Without HOME (sbatch --export=NONE) the passwd entry, like the batch script's getent.
        state = Path(env.get("HOME") or pwd.getpwuid(os.getuid()).pw_dir) / STATE_HOME_DEFAULT
    return state / JOB_INDEX_DIR / JOB_INDEX


def read_job_index(path: Path) -> list[IndexEntry]:
    """Every well-formed line of the job index, oldest first ([] when there is none). A line that is not
    four fields of the right kinds, or not yet ended by a newline, is skipped: appends from other jobs
    never make the index unreadable. A LOG_DIR may hold tabs: it is everything between the second field
    and the last."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    entries = []
    for raw in data.split(b"\n")[:-1]:  # after the last newline: a line still being written
        fields = raw.split(b"\t")
        if len(fields) < 4:
            continue
        job_id, restart, started, log_dir = fields[0], fields[1], fields[-1], b"\t".join(fields[2:-1])
        if job_id.isdigit() and restart.isdigit() and started.isdigit() and log_dir.startswith(b"/"):
            path = Path(os.fsdecode(log_dir))
            entries.append(IndexEntry(job_id.decode(), int(restart), path, int(started)))
    return entries


def append_job_index(path: Path, entry: IndexEntry) -> None:
    """Append ``entry`` as the batch script does: the directory 0700, one write of the whole line."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, entry.line())
    finally:
        os.close(fd)


def worker_tag(index: int, workers: int) -> str:
    """The short name of worker ``index`` in merged logs: w00, w01, ... (at least two digits)."""
    return f"w{index:0{max(2, worker_index_width(workers))}d}"
