"""The LOG_DIR layout and the signal-file protocol: the one place that names every file a job creates.

The rendered bash takes these names from :func:`template_names` and the Python side from here, so both
always agree. Each file's format has its reader and writer side by side in one module of this package:
the unit counter's files and the timeline here (the node programs write them); nodes.tsv, attach.env and
the other files the submit host reads in logdir (``LogDir``); the job index in job_index; preflight.jsonl
in preflight_log, smoke.json in smoke_result, metrics.jsonl in metrics_log (built on readings, Ray's
metrics text). Where bash writes a file too, a test reads what bash wrote with the reader. docs/protocol.md
describes the phases and who writes what; file_table lists every path a job makes.

The package is the floor both sides stand on: the submit host imports it and the batch script ships the
modules the node programs import (raysub/job/__init__.py) to the nodes. So it imports nothing of raysub
outside itself, only the standard library, Ray and prometheus_client, and keeps to the Python versions Ray
supports (tests/unit/test_house.py, tests/unit/test_node_package.py).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import stat
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

# Per-attempt directory: <base>/<jobid>-logs, or <base>/<jobid>-<requeue count>-logs after a requeue.
LOG_DIR_SUFFIX = "-logs"
# A job id as Slurm writes it: a number, or for a task of an array job (sbatch --array) the array's id
# and the task's, <array job id>_<task id>. It names the job's LOG_DIR and its lines in the job index.
JOB_ID = re.compile(r"[0-9]+(?:_[0-9]+)?")

# Signal files, each written once and atomically (temp file + rename) unless said otherwise.
CANARY = "raysub_canary"  # batch script: a token every node must read back (shared-filesystem check)
STARTED_RAY_HEAD = "STARTED_RAY_HEAD"  # head: "<ip>:<gcs port>" once the GCS answers and the raylet is up
# head: "<host>:<port>" of Ray's dashboard, published with STARTED_RAY_HEAD (none with --no-dashboard)
DASHBOARD = "dashboard_address"
WORKER_UNITS = "ray_worker_units"  # head sidecar: live GPUs (or nodes with --gpus-per-node 0); rewritten
SANDBOX_READY_PREFIX = "SANDBOX_READY_"  # sandbox on <host>: its port answers; file name ends with the host
# With --ports block and no --sandbox-port: the port of <host>'s block its sandbox takes, published by the
# node's Ray script when it first picks its block.
SANDBOX_PORT_PREFIX = "sandbox_port_"
DRIVER_STARTED = "DRIVER_STARTED"  # head: the driver runs; from now on a node whose Ray exits ends the job
DRIVER_PID = "driver_pid"  # head: the driver's process group, for forwarding signals from the batch script
DRIVER_EXIT_CODE = "driver_exit_code"  # head: the driver's exit status
ENDED = "ENDED"  # anyone: the job is over; one line saying why. Every waiting node leaves when it appears.
JOINED_NODES = "ray_joined_nodes"  # head sidecar: names of the nodes alive in Ray, one per line; rewritten
LATEST = "latest"  # in the base directory: a symlink to the newest attempt's LOG_DIR

# The per-user job index, so raysub's commands find a job from any directory (docs/protocol.md, "Finding a
# job"). As each attempt starts, the batch script appends one line with ONE printf (a single append, so the
# lines of concurrent jobs never interleave):
#     <jobid>\t<requeue count>\t<absolute LOG_DIR>\t<epoch seconds>\n
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
# Set by a grow job (raysub grow) for its step: its own directory, GROW_DIR/<its job id>; its nodes join this
# job's Ray and leave it without ending the job. And where their topology ranks start (the job's own count
# from 1: the head 1, worker k k+2).
ENV_GROW_DIR = f"{ENV_PREFIX}GROW_DIR"
ENV_RANK_BASE = f"{ENV_PREFIX}RANK_BASE"
# Set by the autoscaler's node provider (--autoscale) for the grow jobs it submits: the LOG_DIR they grow.
ENV_GROWN_LOG_DIR = f"{ENV_PREFIX}GROWN_LOG_DIR"
# Set by each node script for everything it starts ("<canary> <role>"); swept when the script ends.
ENV_MARK = f"{ENV_PREFIX}JOB_MARK"
# Set by the head for each driver run ("<canary> <run>"): before a restart, every process that still carries
# the previous run's value is stopped, also one that left the driver's process group (setsid, a daemon).
ENV_DRIVER_RUN = f"{ENV_PREFIX}DRIVER_RUN"
# Set by the head for the early driver only (raysub/job/programs/driver_gate.py mirrors them: it imports
# nothing of raysub): the file that opens its gate (DRIVER_STARTED), the file that says the job ends (ENDED),
# and the driver's PYTHONPATH without the gate, which the gate puts back.
ENV_DRIVER_GATE = f"{ENV_PREFIX}DRIVER_GATE"
ENV_DRIVER_GATE_ENDED = f"{ENV_PREFIX}DRIVER_GATE_ENDED"
ENV_DRIVER_PYTHONPATH = f"{ENV_PREFIX}DRIVER_PYTHONPATH"
ENV_DRIVER_GATE_LOOK = f"{ENV_PREFIX}DRIVER_GATE_LOOK"  # how often the gate looks (seconds)

# The timeline: one JSON object per line, {"t": <epoch seconds>, "phase": ..., "node": ..., "detail": ...},
# appended under an flock on TIMELINE_LOCK so lines from different nodes never interleave.
TIMELINE = "timeline.jsonl"
TIMELINE_LOCK = "timeline.lock"
PHASE_JOB_START = "job_start"  # batch script
PHASE_CANARY_OK = "canary_ok"  # every node
PHASE_HEAD_READY = "head_ready"  # head; detail: the address
PHASE_WORKER_JOINED = "worker_joined"  # head sidecar; detail: the node that joined Ray
PHASE_WORKER_LEFT = "worker_left"  # head sidecar; detail: the node that left Ray (a grow job's, a failed one)
# raysub grow or the autoscaler's node provider; detail: "<grow job id>: <n> node(s), by <grow|autoscale>".
PHASE_GROW_SUBMITTED = "grow_submitted"
PHASE_SANDBOX_READY = "sandbox_ready"  # each sandbox node
PHASE_DRIVER_START = "driver_start"  # head
PHASE_DRIVER_END = "driver_end"  # head; detail: the exit status
PHASE_ENDED = "ended"  # whoever writes ENDED; detail: the reason
PHASE_SIGNAL_FORWARDED = "signal_forwarded"  # batch script and head; detail: the signal
PHASE_STALE_LOG_DIR = "stale_log_dir"  # batch script; detail: where another job's LOG_DIR was moved
PHASE_GPU_IDLE = "gpu_idle"  # head's monitor; detail: how many GPUs, below what, for how long
PHASE_DRIVER_RESTART = "driver_restart"  # head (--driver-restarts); detail: which run, after what, from where
# Whoever sees a node fail (the head: never joined; a node: its own preflight or Ray; the batch script: a
# task that could not launch); detail: "<node>: <reason>". raysub watch leaves such nodes out next time.
PHASE_NODE_FAILED = "node_failed"
# The head, after a driver run ended and before the next starts (--driver-restarts); detail: what it cleared.
PHASE_DRIVER_CLEANUP = "driver_cleanup"

# raysub health and watch: the driver's latest step and since when it has been that step (epoch seconds),
# so that a stall is seen across checkups, and when each of the last PROGRESS_HISTORY step changes was first
# seen, so that a step much slower than the others is too: {"step": <int or null>, "since": <float>,
# "steps": [[<step>, <first seen>], ...]} (a file without "steps", from before, reads with none).
HEALTH_PROGRESS = "health_progress.json"
# The trainer's own word on its step (raysub.trainer; raysub/protocol/trainer_progress.py), which health and
# watch prefer to the driver's text.
TRAINER_PROGRESS = "trainer_progress.json"
# Its history for raysub report's step chart: a report a line when the step changed, at most one line
# every TRAINER_HISTORY_EVERY seconds (and the last step's: the total's, or at the trainer's exit).
TRAINER_HISTORY = "trainer_progress.jsonl"
TRAINER_HISTORY_EVERY = 10.0
# Where the step can be read besides the trainer's report, as render was told (--step-regex,
# --tensorboard-dir, --metrics-file): raysub/protocol/step_sources.py.
STEP_SOURCES = "step_sources.json"
PROGRESS_HISTORY = 64

# For the driver (and the user's code): the newest complete checkpoint under --checkpoint-dir when the
# driver starts, or what `raysub watch` passed on when it resubmitted the job. Not internal: it is the
# interface to the user's program, and no raysub option reads it.
RESUME_FROM = "RAYSUB_RESUME_FROM"
# Where the head looks for checkpoints when the job script names none (--checkpoint-dir at render): raysub
# watch --checkpoint-dir exports it with each submission; the head computes RESUME_FROM from it at every
# driver start (a Slurm requeue included), so no resume point is ever fixed at submit time.
CHECKPOINT_DIR_ENV = "RAYSUB_CHECKPOINT_DIR"
CHECKPOINT_MARKER_ENV = "RAYSUB_CHECKPOINT_MARKER"
# "1": the head may make CHECKPOINT_DIR_ENV's directory (raysub watch --create-checkpoint-dir, for a file
# system only the compute nodes mount).
CREATE_CHECKPOINT_DIR_ENV = "RAYSUB_CREATE_CHECKPOINT_DIR"

# The warning signal (#SBATCH --signal=B:SIG@T): the batch script writes its name here once it delivered it
# to a driver. A driver that exits 0 after it is interrupted, not finished, unless it made DRIVER_FINISHED.
SIGNAL_DELIVERED = "signal_delivered"
# While no driver runs (a restart's backoff) the signal waits here, and goes to the next driver.
SIGNAL_PENDING = "signal_pending"
# The driver's own word that the training is over: it creates this file (raysub.driver.declare_finished(),
# or `touch "$RAYSUB_FINISHED"` from any language); a 0 exit after the warning signal then counts as done.
DRIVER_FINISHED = "driver_finished"
FINISHED_ENV = "RAYSUB_FINISHED"
# The port of this node's sandbox (--sandbox-command), for the sandbox command itself, the driver and every
# Ray task on the node. Not RAYSUB_SANDBOX_PORT: that is --sandbox-port's default for raysub's commands.
SANDBOX_PORT_ENV = "RAYSUB_NODE_SANDBOX_PORT"

# The smoke test's result (raysub render --smoke, raysub smoke; raysub/job/programs/smoke.py): where one actor
# per GPU (or node) ran and what was wrong, as one JSON object. Its writer and reader:
# protocol/smoke_result.py.
SMOKE = "smoke.json"
# raysub smoke runs the smoke program as a child and names itself in this variable, so that the program's
# usage and help say "raysub smoke", not "python -m raysub.job.programs.smoke".
ENV_SMOKE_PROG = f"{ENV_PREFIX}SMOKE_PROG"

# The head's monitor (--monitor): one JSON snapshot per line, {"t": ..., "nodes": {<node>: {...}},
# "failed": [...]}, kept under MONITOR_MAX_BYTES by halving its resolution (raysub/protocol/metrics_log.py).
METRICS = "metrics.jsonl"
MONITOR_MAX_BYTES = 64 * 2**20

# The GPU preflight gate (raysub/job/programs/preflight.py), run on every node before `ray start`: one JSON
# line per check of a node's GPUs, {"t", "node", "check", "final", "gpus": [...], "findings": [...],
# "verdict"}, each appended in one write under an flock on the file itself, so lines from different nodes stay
# whole.
PREFLIGHT = "preflight.jsonl"
# Each node's Ray logs, kept as it leaves: ray-logs/<node>/<name>.gz (raysub/protocol/ray_logs.py).
RAY_LOGS_DIR = "ray-logs"
# Where each node sits (switch, block, NVLink domain) and what Ray was told of it, written by the node before
# 'ray start': topology/<node>.json, .labels, .gpu_cpu_affinity (raysub/protocol/topology_log.py).
TOPOLOGY_DIR = "topology"
# SANDBOX_PORTS_DIR of every sandbox (--sandbox-command): what the sandbox command writes there is its own.
SANDBOX_PORTS_DIR = "sandbox"
# What the gate does with what it finds: nothing (off), say it (warn), or end the job (fail).
PreflightMode = Literal["off", "warn", "fail"]

# Scripts the batch script writes into LOG_DIR before launching anything.
HEAD_SCRIPT = "head.sh"
WORKER_SCRIPT = "worker.sh"
DRIVER_SCRIPT = "driver_command.sh"
SANDBOX_SCRIPT = "sandbox.sh"
ATTACH_SCRIPT = "attach.sh"
# The bash the scripts share, written once and sourced: SHARED_BASH by the batch script and every script
# (log, timeline, signal files, trust); NODE_BASH by the node scripts (canary, Ray's start, clean-up).
SHARED_BASH = "lib.sh"
NODE_BASH = "node.sh"
# What the batch script gives its job steps (their environment, less Slurm's own, and srun's options), as
# bash to source: a grow job's step starts the job's worker script with it (raysub grow). The owner's alone.
STEP_ENV = "step_env"
# raysub grow's directory: each grow job's batch output, GROW_DIR/<its job id>.out, and its nodes' logs,
# GROW_DIR/<its job id>/worker-<k>.log.
GROW_DIR = "grow"
# GROW_DIR/<its job id>.leave: a grow job's nodes leave Ray through its drain (raysub/protocol/grow_jobs.py).
GROW_LEAVE = ".leave"
# --autoscale: the batch script of the grow jobs Ray's autoscaler asks for (one node each), the autoscaler's
# config (AUTOSCALE_DIR/AUTOSCALE_CONFIG, the owner's alone) and what its node provider did (AUTOSCALE_LOG).
GROW_SCRIPT = "grow.sub"
AUTOSCALE_DIR = "autoscale"
AUTOSCALE_CONFIG = "config.json"
AUTOSCALE_LOG = "autoscale.log"
# The resource by which Ray's autoscaler tells a node it launched (use_node_id_as_ip): a grow job's id.
NODE_ID_RESOURCE = "NODE_ID_AS_RESOURCE"
# The autoscaler's node types: the head, the job's own workers (and raysub grow's nodes), its grow jobs.
AUTOSCALE_HEAD_TYPE = "raysub-head"
AUTOSCALE_JOB_TYPE = "raysub-job"
AUTOSCALE_GROW_TYPE = "raysub-grow"
# The node programs (raysub/job/programs/) and the raysub modules they use, as they are in this package, under
# LOG_DIR/NODE_PYTHON_DIR/raysub/: the node scripts put NODE_PYTHON_DIR first on the programs' PYTHONPATH.
NODE_PYTHON_DIR = "python"
# LOG_DIR/NODE_PYTHON_DIR/DRIVER_GATE_DIR/sitecustomize.py: raysub/job/programs/driver_gate.py, which the head
# puts first on an early driver's PYTHONPATH (docs/protocol.md#the-early-driver).
DRIVER_GATE_DIR = "driver_gate"
# LOG_DIR/NODE_PYTHON_DIR/AUTOSCALER_DIR/AUTOSCALER_MODULE.py (--autoscale): what Ray's autoscaler imports on
# the head; it puts NODE_PYTHON_DIR on its own sys.path and gives raysub/job/lib/slurm_provider.py's provider.
# Only this directory is on the head Ray's PYTHONPATH: a driver's own raysub is never shadowed.
AUTOSCALER_DIR = "autoscaler"
AUTOSCALER_MODULE = "raysub_autoscaler"
# In a node's own Ray temp dir (node-local): the head's address, which the node script writes there once
# the head is ready, for the program that loaded Ray while it started (raysub/job/programs/join.py on a
# worker, the unit counter on the head).
LOCAL_HEAD_ADDRESS = "raysub_head_address"
# batch script: "<Slurm job id> <head node>", and " het" after them in a heterogeneous job (whose steps
# name their component: the head's 0, the workers' 1); read by attach.sh and raysub attach.
ATTACH_ENV = "attach.env"
ATTACH_HET = "het"
# batch script (--topology): the workers in topology order, one per line, when that is not Slurm's order;
# the worker step's SLURM_HOSTFILE.
WORKER_HOSTFILE = "worker_hostfile"
NODE_MAP = "nodes.tsv"  # batch script: "<role>\t<index>\t<node>" per node: head 0, worker 0..N-2
ROLE_HEAD = "head"
ROLE_WORKER = "worker"
# batch script, with --container-image: the head step's pyxis options, one per line, which raysub attach
# and attach.sh use to join the head's container (or, without its name, to start the job's image elsewhere)
CONTAINER_ARGS = "container_srun_options"
# The head's container is named <prefix><canary>: unique per attempt. Workers' and sandboxes' are unnamed.
CONTAINER_NAME_PREFIX = "raysub-"
CONTAINER_NAME_OPTION = "--container-name="
# The only options the batch script writes into CONTAINER_ARGS: raysub attach refuses any other line.
CONTAINER_OPTIONS = (
    "--container-image=",
    "--container-mounts=",
    "--container-workdir=",
    CONTAINER_NAME_OPTION,
)
CONTAINER_FLAGS = ("--no-container-mount-home",)  # whole lines, with no value

# How Ray authenticates (--auth): a per-job token, or not at all. The head's unit counter checks it.
AuthMode = Literal["token", "none"]
# What the head's unit counter counts, and the job waits for: GPUs, or nodes (--gpus-per-node 0).
UnitKind = Literal["gpu", "node"]

# Ray token authentication (--auth token): the batch script writes a random per-job token here, the
# directory 0700 and the file 0600, before any step starts. Every node, the driver and raysub's own
# commands read it through the path Ray is given for its token; nobody else on the cluster can.
AUTH_DIR = ".ray-auth"
AUTH_TOKEN = f"{AUTH_DIR}/token"

# The batch script's private directory in LOG_DIR (made 0700 with mkdir -m, so no default ACL reaches into
# it): every file bash writes into LOG_DIR is made here, given its mode, and renamed into place, because
# bash cannot choose a file's mode as it creates it and a default ACL ignores the umask.
STAGE_DIR = ".stage"
# Modes. Signal files and secrets are the owner's alone, whatever --log-mode says; logs get the owner's
# read and write and the read bits of --log-mode (LOG_DIR's own mode): see log_file_mode.
PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700
# Where a node's Ray temp dir could not be made the job's own (it existed, owned by someone else), the
# node uses a fresh private one and says so in the timeline; detail: the path it did not use.
PHASE_TEMP_DIR_REPLACED = "temp_dir_replaced"
# With --ports block, the block of Ray's ports each node took (every start); detail: "<first>-<last>".
PHASE_RAY_PORTS = "ray_ports"

# Logs.
HEAD_LOG = "ray-head.log"
SRUN_LOG_PREFIX = "srun-"  # srun's own messages for each step ("srun-workers.log"), e.g. which task died
# The logs of one task each (the workers', the sandboxes') live apart, in NODE_LOG_DIR: every waiting node
# lists LOG_DIR at each look (wait_for_file), which so stays a few dozen entries at any --nodes.
NODE_LOG_DIR = "nodes"
WORKER_LOG_PREFIX = "ray-worker-"
DRIVER_LOG = "ray-driver.log"
DRIVER_RESTART_LOG_PREFIX = "ray-driver-"  # ray-driver-<k>.log: the driver's k-th restart
SANDBOX_LOG_PREFIX = "sandbox-"
LOG_SUFFIX = ".log"


# A file's mode, as docs/security.md shows it: the owner's alone, or the logs' (see file_mode_for_logs).
def natural_key(text: str) -> list[object]:
    """``text`` as a sort key whose runs of digits compare as numbers: node2 before node10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def log_dir_name(job_id: str | int, requeues: int = 0) -> str:
    """The attempt directory's name: ``<jobid>-logs``, or ``<jobid>-<requeues>-logs`` after a requeue."""
    if requeues:
        return f"{job_id}-{requeues}{LOG_DIR_SUFFIX}"
    return f"{job_id}{LOG_DIR_SUFFIX}"


def worker_index_width(workers: int) -> int:
    """Digits of the zero-padded worker index: the width of the largest index, ``workers - 1``."""
    return len(str(max(workers - 1, 0)))


def driver_log_name(run: int) -> str:
    """The driver's log: ray-driver.log for its first run, ray-driver-<k>.log for restart k."""
    return DRIVER_LOG if run == 0 else f"{DRIVER_RESTART_LOG_PREFIX}{run}{LOG_SUFFIX}"


def worker_log_name(index: int, workers: int) -> str:
    return worker_log_format(workers) % index


def worker_log_pattern(workers: int) -> str:
    """srun's --output pattern for the batched worker step; %t is the task (worker) index."""
    return f"{NODE_LOG_DIR}/{WORKER_LOG_PREFIX}%{worker_index_width(workers)}t{LOG_SUFFIX}"


def worker_log_format(workers: int) -> str:
    """printf's format of worker k's log name (the batch script makes each log before srun writes it)."""
    return f"{NODE_LOG_DIR}/{WORKER_LOG_PREFIX}%0{worker_index_width(workers)}d{LOG_SUFFIX}"


def batch_log_files(workers: bool, sandbox: bool) -> list[str]:
    """The files every node appends to that the batch script makes first, with the logs' mode (the
    workers' and sandboxes' own logs come on top, one per task)."""
    steps = ["head", *(["workers"] if workers else []), *(["sandbox"] if sandbox else [])]
    return [TIMELINE, TIMELINE_LOCK, HEAD_LOG, *(f"{SRUN_LOG_PREFIX}{step}{LOG_SUFFIX}" for step in steps)]


def file_mode_for_logs(log_dir_mode: int) -> int:
    """The mode of a log in a LOG_DIR of mode ``log_dir_mode``: the owner reads and writes; the group and
    others may read as far as --log-mode lets them; nobody else writes."""
    return PRIVATE_FILE_MODE | (log_dir_mode & 0o044)


def sandbox_log_pattern() -> str:
    return f"{NODE_LOG_DIR}/{SANDBOX_LOG_PREFIX}%t{LOG_SUFFIX}"


def template_names() -> dict[str, str]:
    """Every protocol name, for the templates (``files.ENDED`` and so on)."""
    return {
        name: value
        for name, value in globals().items()
        if name.isupper() and isinstance(value, str) and not name.startswith("_")
    }


def write_atomic(path: Path, text: str, mode: int = PRIVATE_FILE_MODE) -> None:
    """``text`` into ``path`` as the bash ``publish`` writes: a temporary file beside it, then a rename,
    so that a reader sees the old content or the new, never part of it. The file has ``mode`` (the
    owner's alone by default) from the moment it exists: open(2)'s mode also cuts a default ACL down."""
    temporary = path.with_name(f"{path.name}.tmp.{socket.gethostname()}.{os.getpid()}")
    with create(temporary, mode, os.O_TRUNC) as out:
        out.write(text)
    temporary.replace(path)


def _open_for_writing(path: Path, mode: int, flags: int) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | flags, mode)
    os.fchmod(fd, mode)  # the umask may have taken bits that mode asked for
    return fd


def create(path: Path, mode: int, flags: int = os.O_APPEND) -> IO[str]:
    """``path`` opened for writing (created with ``mode`` if new, and given ``mode`` either way)."""
    return os.fdopen(_open_for_writing(path, mode, flags), "w")


def create_binary(path: Path, mode: int, flags: int = os.O_TRUNC) -> IO[bytes]:
    """``path`` opened for writing bytes, as create opens it for text."""
    return os.fdopen(_open_for_writing(path, mode, flags), "wb")


def log_file_mode(log_dir: Path) -> int:
    """The mode of a log in ``log_dir``, from LOG_DIR's own mode (see file_mode_for_logs)."""
    return file_mode_for_logs(stat.S_IMODE(log_dir.stat().st_mode))


class UntrustedFile(Exception):
    """A file that the job writes and raysub acts on, which someone else could have written."""


def expected_owner(path: Path) -> int:
    """Whose files a job's are: this user's; for root, the owner of the job's LOG_DIR (``path``'s parent)."""
    uid = os.getuid()
    return path.parent.stat().st_uid if uid == 0 else uid


def check_trusted(path: Path, st: os.stat_result) -> None:
    """Raise UntrustedFile unless ``st`` (``path``'s) is the job user's and nobody else may write it."""
    owner = expected_owner(path)
    if st.st_uid != owner:
        raise UntrustedFile(
            f"refusing {path}: it is owned by uid {st.st_uid}, not {owner}; it may have been tampered with"
        )
    if st.st_mode & 0o022:
        raise UntrustedFile(
            f"refusing {path}: its mode {stat.S_IMODE(st.st_mode):04o} lets others write it; it may "
            "have been tampered with"
        )


# How long a Python writer waits for its flock, as the bash writers' 'flock -w 10': a lock that is never
# released (its holder stuck on a hung NFS client, or a lock the server lost track of) must not stop the
# head's unit counter for ever. Then the line is written without it, one write, as where flock fails.
LOCK_WAIT_S = 10.0


def lock_within(fd: int, path: Path) -> bool:
    """An exclusive flock on ``fd`` (the open ``path``), taken within LOCK_WAIT_S seconds. When it cannot
    be had (held that long, or flock fails), False, after saying on stderr which file and why."""
    deadline = time.monotonic() + LOCK_WAIT_S
    pause = 0.01
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                print(
                    f"raysub: {path} stayed locked {LOCK_WAIT_S:g} s; written without the lock",
                    file=sys.stderr,
                )
                return False
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.5)
        except OSError as error:
            print(f"raysub: {path} written without a lock: {error.strerror or error}", file=sys.stderr)
            return False


def read_trusted(path: Path) -> str | None:
    """``path``'s text, after checking that only its owner (the job's user) could have written it; None
    when it does not exist. Raises UntrustedFile otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as error:  # O_NOFOLLOW on a symbolic link: ELOOP
        raise UntrustedFile(f"refusing {path}: {error.strerror}") from error
    with os.fdopen(fd, encoding="utf-8", errors="replace") as file:
        check_trusted(path, os.fstat(file.fileno()))
        return file.read()


def read_or_none(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return None


@dataclass(frozen=True)
class TimelineEvent:
    """One line of timeline.jsonl."""

    t: float  # epoch seconds
    phase: str  # one of the PHASE_ names
    node: str
    detail: str

    def line(self) -> str:
        return json.dumps({"t": self.t, "phase": self.phase, "node": self.node, "detail": self.detail}) + "\n"


def worker_tag(index: int, workers: int) -> str:
    """The short name of worker ``index`` in merged logs: w00, w01, ... (at least two digits)."""
    return f"w{index:0{max(2, worker_index_width(workers))}d}"


# The unit counter's files: ray_worker_units (a count) and ray_joined_nodes (names, one per line).
def read_units(log_dir: Path) -> int | None:
    """How many units (GPUs, or nodes) have joined Ray; None before the head's counter has said."""
    text = (read_trusted(log_dir / WORKER_UNITS) or "").strip()
    return int(text) if text.isdigit() else None


def write_units(log_dir: Path, units: int) -> None:
    write_atomic(log_dir / WORKER_UNITS, f"{units}\n")


def read_joined_nodes(log_dir: Path) -> list[str]:
    """The nodes alive in Ray, as the head's counter last saw them."""
    return (read_or_none(log_dir / JOINED_NODES) or "").split()


def write_joined_nodes(log_dir: Path, names: Iterable[str]) -> None:
    write_atomic(log_dir / JOINED_NODES, "".join(f"{name}\n" for name in sorted(names)))


def read_timeline(log_dir: Path) -> list[TimelineEvent]:
    """Every whole line of timeline.jsonl, in file order (a line still being written is left out)."""
    events = []
    for line in (read_or_none(log_dir / TIMELINE) or "").splitlines():
        try:
            record = json.loads(line)
            event = TimelineEvent(float(record["t"]), record["phase"], record["node"], record["detail"])
        except (ValueError, KeyError, TypeError):
            continue
        if all(isinstance(text, str) for text in (event.phase, event.node, event.detail)):
            events.append(event)  # else another writer's line
    return events


def append_timeline(log_dir: Path, phase: str, node: str, detail: str) -> None:
    """One timeline line, under the same flock as the bash writers (so lines stay whole and in time
    order); written unlocked where flock fails (NFSv3 without lockd: ENOLCK; Lustre mounted noflock)
    or is not had within LOCK_WAIT_S, as the bash writers do."""
    mode = log_file_mode(log_dir)
    with create(log_dir / TIMELINE_LOCK, mode) as held:
        lock_within(held.fileno(), log_dir / TIMELINE_LOCK)
        with create(log_dir / TIMELINE, mode) as out:
            out.write(TimelineEvent(time.time(), phase, node, detail).line())


@dataclass(frozen=True)
class Node:
    """An alive node of Ray: its id, name (raysub starts Ray with the Slurm node name), IP and GPUs."""

    node_id: str
    name: str
    ip: str
    gpus: int
    head: bool = False


def one_line(text: object, limit: int = 400) -> str:
    """An error message on one line, cut at ``limit`` characters (Ray's run to pages)."""
    words = " ".join(str(text).split())
    return words if len(words) <= limit else words[: limit - 1] + "…"
