"""Scale simulation: raysub's real batch script on N fake nodes of one machine, without Slurm or Ray.

    .venv/bin/python benchmarks/scale_sim.py [--nodes 8,64,256,1024] [--srun-latency 0.05]

(after scripts/setup; it needs strace, and root for a PID namespace per node). It prints a table and writes
benchmarks/results/scale_sim.json (--json). The default list takes about 4 minutes on 2 cores.

For each N it renders a job with raysub (CPU-only, loopback, a driver that sleeps --driver-seconds) and runs
its batch script here, as slurmctld would on the job's first node, with fakes first on PATH:
- srun, scontrol, squeue, sbatch: tests/fakes/slurm-sim, which counts every call. srun waits
  --srun-latency (slurmctld creating the step), then hands the step to a fake slurmd in this process, which
  runs its tasks as local processes with what Slurm gives a task (SLURM_PROCID, SLURMD_NODENAME=node<k>,
  SLURM_STEP_ID, ...; --output patterns such as %4t expanded; --kill-on-bad-exit), each task in a PID
  namespace of its own, as on a node of its own;
- ray: tests/fakes/ray. Every Ray joins the fake GCS (tests/fakes/pyray), whose node table the head's real
  unit counter reads, so the head sees the N nodes join as their workers start Ray. The head's Ray comes up
  --head-delay seconds after every worker has begun waiting for it, as a real head takes seconds to start.
Every node is one real bash node script polling LOG_DIR, with its Ray stand-in (a sleep). Nothing of the job
runs on the submit host after sbatch (which the simulation leaves out: it starts the batch script itself);
the per-job side is the batch script and the head on the first node.

Measured per N: the Slurm commands the job ran; the metadata operations on the shared filesystem (every
system call naming a file under the simulated submit directory, getdents64 and flock, counted with strace
on the batch script, the head and --trace-workers workers spread over the task indexes) per second of each
phase and per poll; the time from the head's readiness (head_ready on the timeline) to the last worker's
Ray start. On 2 cores a thousand polling bash processes saturate the machine: polls then come later than
the scripts ask, so the rates at large N are lower bounds and the bring-up times upper bounds. The counts
per poll do not depend on it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from raysub import protocol  # noqa: E402
from raysub.job.render import render  # noqa: E402
from raysub.protocol.logdir import LogDir  # noqa: E402
from raysub.spec import Ports  # noqa: E402
from tests.support.batch import FAKES, environment, job_spec, recorded_steps  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "scale_sim.json"
SLURM_COMMANDS = ("srun", "scontrol", "squeue", "sbatch")
# Every system call that names a file, directory listings and locks: what costs a shared filesystem's
# metadata server. -y names each descriptor's file; seccomp-bpf stops the tracee at these calls only.
STRACE = ("strace", "-f", "-ttt", "-y", "--seccomp-bpf", "--trace=%file,getdents64,flock")
KILL_WAIT_S = 2.0  # Slurm's KillWait, between the TERM and the KILL of whatever is left of the job
# Each task sees its own node's processes, as on a real node: a PID namespace with its own /proc (the node
# scripts scan /proc when they end; over one /proc shared by N nodes that would cost O(N) per node). Under a
# shell standing for slurmstepd: the node script is not PID 1, which gets no signal it has no trap for.
NODE_NAMESPACE = ("unshare", "--pid", "--fork", "--mount-proc", "--", "sh", "-c", '"$@"; exit "$?"', "stepd")


# ---- the fake slurmd: runs the steps that the fake srun hands over -----------------------------------


@dataclass
class Task:
    index: int
    node: str
    process: subprocess.Popen[bytes]


def srun_options(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """srun's --name=value options and the command after them (raysub passes every option so)."""
    options: dict[str, str] = {}
    for k, arg in enumerate(argv):
        if not arg.startswith("-"):
            return options, argv[k:]
        name, _, value = arg.partition("=")
        options[name] = value
    raise ValueError(f"srun without a command: {argv}")


def expand_output(pattern: str, fields: dict[str, str]) -> str:
    """srun's --output pattern: %t task, %n node index, %N node, %j job, %s step, %% itself; %4t pads."""

    def one(match: re.Match[str]) -> str:
        width, key = match.groups()
        value = "%" if key == "%" else fields[key]
        return value.zfill(int(width)) if width else value

    return re.sub(r"%(\d*)([tnNjs%])", one, pattern)


def signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


class Slurmd:
    """Picks up every step the fake srun hands over (``step.*`` in the spool) and runs its tasks."""

    def __init__(
        self, spool: Path, nodes: list[str], traces: Path, traced_workers: set[int], node_wrapper: list[str]
    ) -> None:
        self.spool = spool
        self.node_wrapper = node_wrapper
        self.nodes = nodes
        self.traces = traces
        self.traced_workers = traced_workers
        self.tasks: list[Task] = []
        self.last_launch = 0.0
        self.steps = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.watch, daemon=True)
        self.thread.start()

    def watch(self) -> None:
        seen: set[str] = set()
        while not self.stopping.is_set():
            for request in sorted(self.spool.glob("step.*")):
                if request.name not in seen:
                    seen.add(request.name)
                    step_id, self.steps = self.steps, self.steps + 1
                    threading.Thread(target=self.run_step, args=(request, step_id), daemon=True).start()
            time.sleep(0.02)

    def step_nodes(self, options: dict[str, str]) -> list[str]:
        if options.get("--nodelist"):
            return options["--nodelist"].split(",")
        excluded = set(options.get("--exclude", "").split(","))
        return [n for n in self.nodes if n not in excluded][: int(options["--nodes"])]

    def run_step(self, request: Path, step_id: int) -> None:
        [step] = recorded_steps(request)
        options, command = srun_options(step.argv)
        nodes = self.step_nodes(options)[: int(options["--ntasks"])]
        env = {k: v for k, v in step.env.items() if k != "FAKE_SRUN_DIR"}
        env |= {
            "SLURM_STEP_ID": str(step_id),
            "SLURM_STEPID": str(step_id),
            "SLURM_STEP_NODELIST": ",".join(nodes),
            "SLURM_STEP_NUM_NODES": str(len(nodes)),
            "SLURM_STEP_NUM_TASKS": str(len(nodes)),
            "SLURM_NTASKS": str(len(nodes)),
            "SLURM_LOCALID": "0",
        }
        name = Path(command[-1]).stem  # head, worker, sandbox
        tasks = [self.launch(name, k, node, command, env, options, step_id) for k, node in enumerate(nodes)]
        messages, status = self.wait(tasks, options.get("--kill-on-bad-exit") == "1")
        self.answer(request / "status", [*messages, f"exit {status}"])

    def launch(
        self,
        name: str,
        k: int,
        node: str,
        command: list[str],
        env: dict[str, str],
        options: dict[str, str],
        step_id: int,
    ) -> Task:
        fields = {"t": str(k), "n": str(k), "N": node, "j": env["SLURM_JOB_ID"], "s": str(step_id)}
        task_env = {**env, "SLURM_PROCID": str(k), "SLURM_NODEID": str(k), "SLURMD_NODENAME": node}
        argv = command
        if name == "head" or (name == "worker" and k in self.traced_workers):
            argv = strace_argv(self.traces / f"{name}-{k}.trace", command)
        argv = [*self.node_wrapper, *argv]
        with open(expand_output(options["--output"], fields), "wb") as output:  # noqa: PTH123
            process = subprocess.Popen(
                argv, cwd=env["PWD"], env=task_env, stdin=subprocess.DEVNULL, stdout=output,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        task = Task(k, node, process)
        with self.lock:
            self.tasks.append(task)
            self.last_launch = time.time()
        return task

    @staticmethod
    def wait(tasks: list[Task], kill_on_bad_exit: bool) -> tuple[list[str], int]:
        """Until every task has exited; srun's messages about the failed ones and the step's status."""
        alive, messages, status = list(tasks), [], 0
        while alive:
            time.sleep(0.2)
            done = [t for t in alive if t.process.poll() is not None]
            if not done:
                continue
            alive = [t for t in alive if t.process.returncode is None]
            for task in done:
                code = task.process.returncode
                code = code if code >= 0 else 128 - code
                status = max(status, code)
                if code:
                    messages.append(
                        f"srun: error: {task.node}: task {task.index}: Exited with exit code {code}"
                    )
            if status and kill_on_bad_exit:
                for task in alive:
                    signal_group(task.process.pid, signal.SIGTERM)
        return messages, status

    @staticmethod
    def answer(fifo: Path, lines: list[str]) -> None:
        """To the srun waiting on ``fifo``, if it still does."""
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            return
        with contextlib.suppress(OSError):
            os.write(fd, "".join(f"{line}\n" for line in lines).encode())
        os.close(fd)

    def end_job(self, batch: subprocess.Popen[bytes]) -> None:
        """What Slurm does when the batch script has exited: TERM to every step, KILL after KillWait."""
        self.stopping.set()
        with self.lock:
            groups = [batch.pid, *(t.process.pid for t in self.tasks)]
        for pid in groups:
            signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + KILL_WAIT_S
        while time.monotonic() < deadline and any(t.process.poll() is None for t in self.tasks):
            time.sleep(0.1)
        for pid in groups:
            signal_group(pid, signal.SIGKILL)
        for task in self.tasks:
            task.process.wait()


def strace_argv(output: Path, command: list[str]) -> list[str]:
    return [*STRACE, "-o", str(output), "--", *command]


# ---- strace's lines: the metadata operations --------------------------------------------------------------

LINE = re.compile(r"^(\d+)\s+(\d+\.\d+)\s+(.*)$")
CALL = re.compile(r"^(\w+)\((.*)$")
RESUMED = re.compile(r"^<\.\.\. (\w+) resumed>(.*)$")
RETURN = re.compile(r"\)\s+=\s+(-?\d+)")
NAME = re.compile(r'"((?:[^"\\]|\\.)*)"')  # a file name argument, as strace quotes it
DESCRIPTOR = re.compile(r"(?:AT_FDCWD|\b\d+)<((?:[^>\\]|\\.)*)>")  # with -y: a descriptor and its file


@dataclass(frozen=True)
class Op:
    t: float
    name: str
    path: str  # the file it names: its first path argument, or the file its descriptor is open on
    ret: int | None
    shared: bool


def first_path(args: str) -> str:
    """The file a call names: its first name argument, taken from its directory descriptor when relative
    (AT_FDCWD is the working directory), or the descriptor's file for calls on a descriptor alone."""
    name = NAME.search(args)
    directory = DESCRIPTOR.search(args, 0, name.start() if name else len(args))
    if name and name.group(1).startswith("/"):
        return name.group(1)
    base = directory.group(1) if directory else ""
    if name and name.group(1):
        return f"{base}/{name.group(1)}"
    return base


def parse_trace(text: str, shared_root: str) -> list[Op]:
    """strace -f -ttt -y lines as operations; a call split by another process's is joined again."""
    ops: list[Op] = []
    pending: dict[str, tuple[float, str, str]] = {}
    for line in text.splitlines():
        matched = LINE.match(line)
        if not matched:
            continue
        pid, t, rest = matched.group(1), float(matched.group(2)), matched.group(3)
        if rest.endswith("<unfinished ...>"):
            call = CALL.match(rest)
            if call:
                pending[pid] = (t, call.group(1), call.group(2))
            continue
        resumed, call = RESUMED.match(rest), CALL.match(rest)
        if resumed and pid in pending:
            t, name, args = pending.pop(pid)
            args += resumed.group(2)
        elif call:
            name, args = call.group(1), call.group(2)
        else:
            continue  # +++ exited, --- signals
        ret = RETURN.search(args)
        path = first_path(args)
        shared = path == shared_root or path.startswith(shared_root + "/")
        ops.append(Op(t, name, path, int(ret.group(1)) if ret else None, shared))
    return ops


def rate(ops: list[Op], start: float, end: float) -> float | None:
    if end - start <= 0:
        return None
    return sum(1 for op in ops if op.shared and start <= op.t <= end) / (end - start)


def first(ops: list[Op], suffix: str, after: float = 0.0, found: bool = False) -> Op | None:
    """The first operation from ``after`` on on a path ending in ``suffix``; with ``found``, the first that
    succeeded."""
    for op in ops:
        if op.t >= after and op.path.endswith(suffix) and (not found or op.ret == 0):
            return op
    return None


@dataclass
class WorkerTrace:
    """One traced worker's shared-filesystem operations while it waited for the head, and in Ray."""

    looked: float  # its first look for STARTED_RAY_HEAD
    noticed: float  # the look that found it
    polls: int  # its looks for STARTED_RAY_HEAD
    ops: int  # shared operations from the first look to the one that found it
    listings: list[int]  # of LOG_DIR in that time: the bytes of entries each read (getdents64)
    ray_rate: float | None  # shared operations per second while its Ray ran and it watched ENDED
    by_call: Counter[str]

    @property
    def wait_s(self) -> float:
        return self.noticed - self.looked

    @property
    def wait_rate(self) -> float | None:
        return self.ops / self.wait_s if self.wait_s > 0 else None

    @property
    def ops_per_poll(self) -> float | None:
        """A look's cycle: a listing of LOG_DIR, then a stat of STARTED_RAY_HEAD and one of ENDED."""
        return (self.ops - 1) / (self.polls - 1) if self.polls > 1 else None

    @property
    def largest_listing(self) -> int | None:
        """LOG_DIR grows by a log file per worker: its last listings are the largest."""
        return max(self.listings, default=None)

    def notice_delay(self, head_ready: float) -> float:
        """From the head's readiness, or its own first look when it came later, to noticing it."""
        return self.noticed - max(head_ready, self.looked)


def worker_trace(ops: list[Op]) -> WorkerTrace | None:
    head = "/" + protocol.STARTED_RAY_HEAD
    looked, found = first(ops, head), first(ops, head, found=True)
    if looked is None or found is None:
        return None
    window = [op for op in ops if op.shared and looked.t <= op.t <= found.t]
    listings, read = [], 0
    for op in window:
        if op.name == "getdents64":
            read += op.ret or 0
            if op.ret == 0:  # a listing ends with an empty read
                listings.append(read)
                read = 0
    ray = next((op for op in ops if op.name == "execve" and op.path.endswith("/ray")), None)
    ended = first(ops, "/" + protocol.ENDED, after=ray.t, found=True) if ray else None
    return WorkerTrace(
        looked=looked.t,
        noticed=found.t,
        polls=sum(1 for op in window if op.path.endswith(head)),
        ops=len(window),
        listings=listings,
        ray_rate=rate(ops, ray.t, ended.t) if ray and ended else None,
        by_call=Counter(op.name for op in window),
    )


def job_side_rate(ops: list[Op]) -> dict[str, Any]:
    """A per-job process tree (the batch script, the head): shared operations per second of its life."""
    shared = [op for op in ops if op.shared]
    life = ops[-1].t - ops[0].t if ops else 0.0
    return {
        "ops": len(shared),
        "seconds": round(life, 2),
        "ops_per_s": round(len(shared) / life, 1) if life > 0 else None,
        "by_call": dict(Counter(op.name for op in shared).most_common()),
    }


# ---- one simulated job ----------------------------------------------------------------------------------


def free_port() -> int:
    """A port nothing listens on now, for the fake GCS (never a fixed one: others run beside us)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sample(count: int, size: int) -> set[int]:
    """``size`` task indexes spread evenly over ``count``, the first and last among them."""
    if size >= count:
        return set(range(count))
    if size <= 1:
        return {0} if size == 1 else set()
    return {round(i * (count - 1) / (size - 1)) for i in range(size)}


class Sim:
    """The directories of one run: ``shared`` stands for the shared filesystem, the rest is node-local."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.shared = root / "shared"
        self.submit = self.shared / "submit"
        self.home = self.shared / "home"
        self.spool = root / "slurmd"
        self.bin = root / "bin"
        self.traces = root / "traces"
        self.ray_nodes = root / "gcs"
        self.calls = root / "slurm-calls"
        self.head_gate = root / "head-gate"
        for path in (self.submit, self.home, self.spool, self.bin, self.traces, self.ray_nodes):
            path.mkdir(parents=True)
        for command in SLURM_COMMANDS:
            (self.bin / command).symlink_to(FAKES / "slurm-sim")


def job_environment(sim: Sim, args: argparse.Namespace, nodes: list[str], job_id: str) -> dict[str, str]:
    spec_env = environment(job_spec("x", nodes=len(nodes)), job_id, sim.spool)
    return {
        **spec_env,
        "PATH": f"{sim.bin}:{spec_env['PATH']}",
        "SLURM_JOB_NODELIST": ",".join(nodes),
        "SLURM_JOB_NUM_NODES": str(len(nodes)),
        "SLURM_NNODES": str(len(nodes)),
        "SLURMD_NODENAME": nodes[0],
        "SLURM_SUBMIT_DIR": str(sim.submit),
        "HOME": str(sim.home),
        "RAYSUB_TEST_PYTHON": sys.executable,
        "FAKE_RAY_LOG": str(sim.root / "ray-calls"),
        "FAKE_RAY_NODES": str(sim.ray_nodes),
        "FAKE_RAY_HEAD_DELAY": str(args.head_delay),
        "FAKE_RAY_HEAD_GATE": str(sim.head_gate),
        # Every Ray stand-in outlives the run: at 4096 nodes on 2 cores the bring-up took longer than the
        # fake's default 300 s, and the head's "Ray" ended the job with it.
        "FAKE_RAY_LIFETIME": str(int(args.timeout)),
        "FAKE_SLURM_CALLS": str(sim.calls),
        "FAKE_SLURMD": str(sim.spool),
        "FAKE_SRUN_LATENCY": str(args.srun_latency),
    }


class HeadGate:
    """Lets the head's Ray come up (tests/fakes/ray, $FAKE_RAY_HEAD_GATE) once every worker waits for it:
    its canary_ok, which it writes just before it starts looking for STARTED_RAY_HEAD, is on the timeline.
    So every worker waits at least --head-delay, however long a crowded machine takes to start them all."""

    def __init__(self, logs: LogDir, workers: int, gate: Path) -> None:
        self.logs, self.workers, self.gate = logs, workers, gate
        self.opened: float | None = None
        self.stop = threading.Event()
        threading.Thread(target=self.watch, daemon=True).start()

    def watch(self) -> None:
        while not self.stop.wait(0.2):
            events = self.logs.timeline()
            if (
                sum(1 for e in events if e.phase == protocol.PHASE_CANARY_OK and e.node != "node0")
                >= self.workers
            ):
                self.gate.touch()
                self.opened = time.time()
                return


def node_wrapper() -> list[str]:
    """NODE_NAMESPACE where this machine allows it (it needs CAP_SYS_ADMIN), else nothing."""
    works = subprocess.run([*NODE_NAMESPACE, "true"], capture_output=True, check=False).returncode == 0
    return list(NODE_NAMESPACE) if works else []


def run_job(n: int, args: argparse.Namespace, root: Path, node_wrapper: list[str]) -> dict[str, Any]:
    sim = Sim(root)
    nodes = [f"node{k}" for k in range(n)]
    job_id = str(os.getpid() % 100_000 * 10_000 + n)  # unique to this process and N: Ray's temp dirs
    temp_tag = "rs"
    command = ("sleep", str(args.driver_seconds)) if args.driver_seconds else ("true",)
    # On 2 cores the tasks of 4096 nodes take a quarter of an hour to start and wait, and the head's Ray
    # comes up only once every worker waits (HeadGate); then the workers join at a few nodes a second,
    # the cores busy with 4096 waits. The deadlines grow with N, a second a node, so that a slow machine
    # is no failure.
    timeouts = {"head_timeout": max(300, n), "workers_timeout": max(600, n)}
    spec = job_spec(temp_tag, nodes=n, command=command, ports=Ports(gcs=free_port()), **timeouts)
    job = sim.submit / "job.sub"
    job.write_text(render(spec))
    traced = sample(n - 1, args.trace_workers)
    slurmd = Slurmd(sim.spool, nodes, sim.traces, traced, node_wrapper)
    logs = LogDir.of(sim.submit / "runs", job_id)
    gate = HeadGate(logs, n - 1, sim.head_gate)
    batch_trace = sim.traces / "batch.trace"
    started = time.time()
    with open(sim.root / "batch.out", "wb") as out:  # noqa: PTH123
        batch = subprocess.Popen(
            strace_argv(batch_trace, ["bash", str(job)]), cwd=sim.submit,
            env=job_environment(sim, args, nodes, job_id), stdin=subprocess.DEVNULL, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    timed_out = False
    try:
        batch.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    batch_exit = time.time()
    gate.stop.set()
    slurmd.end_job(batch)
    gone = time.time()
    shutil.rmtree(f"/tmp/{temp_tag}{job_id}", ignore_errors=True)
    result = {
        "nodes": n,
        "exit_status": None if timed_out else batch.returncode,
        "ended": logs.ended_reason(),
        "wall_s": round(batch_exit - started, 2),
        "all_gone_s": round(gone - started, 2),
        "calls": slurm_calls(sim.calls),
        "steps_run": slurmd.steps,
        "last_task_started_s": round(slurmd.last_launch - started, 2),
        "all_workers_waiting_s": round(gate.opened - started, 2) if gate.opened else None,
        "node_pid_namespaces": bool(node_wrapper),
    }
    return result | measurements(sim, logs, traced, n, started)


def slurm_calls(path: Path) -> dict[str, int]:
    counted = (
        Counter(line.split()[0] for line in path.read_text().splitlines()) if path.exists() else Counter()
    )
    return {command: counted[command] for command in SLURM_COMMANDS}


def trace_ops(sim: Sim, name: str) -> list[Op]:
    path = sim.traces / f"{name}.trace"
    return parse_trace(path.read_text(), str(sim.shared)) if path.exists() else []


def measurements(sim: Sim, logs: LogDir, traced: set[int], n: int, started: float) -> dict[str, Any]:
    # The phases of the batch script and the head, both on the first node.
    at = {e.phase: e.t for e in logs.timeline() if e.node == "node0"}
    head_ready = at.get(protocol.PHASE_HEAD_READY)
    driver_start = at.get(protocol.PHASE_DRIVER_START)
    phases = (protocol.PHASE_HEAD_READY, protocol.PHASE_DRIVER_START, protocol.PHASE_ENDED)
    starts = {p.name: float(p.read_text()) for p in sim.ray_nodes.iterdir() if not p.name.startswith(".")}
    worker_starts = [t for name, t in starts.items() if name != "node0"]
    workers = [w for k in sorted(traced) if (w := worker_trace(trace_ops(sim, f"worker-{k}")))]
    return {
        "phases_s": {phase: round(at[phase] - started, 2) if phase in at else None for phase in phases},
        "ray_nodes_started": len(starts),
        "head_ready_to_last_worker_ray_start_s": (
            round(max(worker_starts) - head_ready, 3) if head_ready and len(worker_starts) == n - 1 else None
        ),
        "head_ready_to_driver_start_s": (
            round(driver_start - head_ready, 3) if head_ready and driver_start else None
        ),
        "workers": summarise_workers(workers, head_ready, len(traced)),
        "batch_script": job_side_rate(trace_ops(sim, "batch")),
        "head": job_side_rate(trace_ops(sim, "head-0")),
    }


def summarise_workers(workers: list[WorkerTrace], head_ready: float | None, traced: int) -> dict[str, Any]:
    def median(values: Sequence[float | None], digits: int = 2) -> float | None:
        present = [v for v in values if v is not None]
        return round(statistics.median(present), digits) if present else None

    by_call: Counter[str] = Counter()
    for w in workers:
        by_call.update(w.by_call)
    rates = [w.wait_rate for w in workers if w.wait_rate is not None]
    return {
        "traced": traced,
        "analysed": len(workers),
        "wait_s_median": median([w.wait_s for w in workers]),
        "wait_ops_per_s_median": median(rates, 1),
        "wait_ops_per_s_max": round(max(rates), 1) if rates else None,
        "polls_median": median([float(w.polls) for w in workers], 1),
        "ops_per_poll_median": median([w.ops_per_poll for w in workers], 1),
        "largest_listing_bytes_median": median([w.largest_listing for w in workers], 0),
        "in_ray_ops_per_s_median": median([w.ray_rate for w in workers], 1),
        "notice_delay_s_max": (
            round(max(w.notice_delay(head_ready) for w in workers), 3) if workers and head_ready else None
        ),
        "wait_by_call": dict(by_call.most_common()),
    }


# ---- the table ------------------------------------------------------------------------------------------

Column = tuple[str, int, Callable[[dict[str, Any]], object]]
COLUMNS: tuple[Column, ...] = (
    ("N", 5, lambda r: r["nodes"]),
    ("srun", 5, lambda r: r["calls"]["srun"]),
    ("scontrol", 9, lambda r: r["calls"]["scontrol"]),
    ("squeue", 7, lambda r: r["calls"]["squeue"]),
    ("ops/s/node", 11, lambda r: r["workers"]["wait_ops_per_s_median"]),
    ("ops/poll", 9, lambda r: r["workers"]["ops_per_poll_median"]),
    ("B/listing", 10, lambda r: r["workers"]["largest_listing_bytes_median"]),
    ("in-Ray", 7, lambda r: r["workers"]["in_ray_ops_per_s_median"]),
    ("batch", 6, lambda r: r["batch_script"]["ops_per_s"]),
    ("head", 6, lambda r: r["head"]["ops_per_s"]),
    ("notice s", 9, lambda r: r["workers"]["notice_delay_s_max"]),
    ("ready->last s", 14, lambda r: r["head_ready_to_last_worker_ray_start_s"]),
    ("wall s", 7, lambda r: r["wall_s"]),
)


def cell(value: object, width: int) -> str:
    if value is None:
        return f"{'-':>{width}}"
    if isinstance(value, float):
        return f"{value:>{width}.{0 if value >= 1000 else 1 if value >= 10 else 2}f}"
    return f"{value!s:>{width}}"


def table(results: list[dict[str, Any]]) -> str:
    lines = [" ".join(f"{title:>{width}}" for title, width, _ in COLUMNS)]
    lines += [" ".join(cell(get(r), width) for _, width, get in COLUMNS) for r in results]
    return "\n".join(lines)


LEGEND = """\
srun, scontrol, squeue: calls the job made. Shared-filesystem metadata operations (strace), medians of the
traced workers: ops/s/node per second of a worker's wait for STARTED_RAY_HEAD; ops/poll per look (a listing
of LOG_DIR, a look for STARTED_RAY_HEAD and one for ENDED); B/listing the bytes of entries in its largest
listing of LOG_DIR; in-Ray per second while its Ray ran and it watched ENDED. batch, head: per second of the
batch script's and the head step's lives, one of each per job. notice s: the longest a traced worker took
to find STARTED_RAY_HEAD after head_ready; ready->last s: head_ready to the last worker's Ray start, all
workers; wall s: the batch script's run.
"""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", default="8,64,256,1024", help="comma-separated node counts")
    parser.add_argument("--srun-latency", type=float, default=0.05, help="seconds each srun waits first")
    parser.add_argument(
        "--head-delay", type=float, default=10.0, help="seconds the head's Ray takes to start"
    )
    parser.add_argument("--driver-seconds", type=int, default=5, help="how long the driver runs (0: true)")
    parser.add_argument("--trace-workers", type=int, default=16, help="workers traced per N (all when fewer)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds one N may run before it is ended")
    parser.add_argument(
        "--nice", type=int, default=10, help="niceness of the simulation: it shares the machine"
    )
    parser.add_argument("--json", type=Path, default=RESULTS, help="where the results go")
    parser.add_argument("--keep", action="store_true", help="keep each run's directory (it says where)")
    args = parser.parse_args()
    if not shutil.which("strace"):
        sys.exit("scale_sim needs strace")
    os.nice(args.nice)
    wrapper = node_wrapper()
    if not wrapper:
        print("# no PID namespaces here: every node sees every node's processes in /proc", file=sys.stderr)
    results = []
    for n in (int(word) for word in args.nodes.split(",")):
        root = Path(tempfile.mkdtemp(prefix=f"raysub-sim-{n}-"))
        try:
            results.append(run_job(n, args, root, wrapper))
        finally:
            if args.keep:
                print(f"# N={n}: {root}", file=sys.stderr)
            else:
                shutil.rmtree(root, ignore_errors=True)
        print(f"# {json.dumps(results[-1])}", file=sys.stderr, flush=True)
    print(table(results))
    print(LEGEND, end="")
    settings = {k: v for k, v in vars(args).items() if k not in ("json", "keep")}
    machine = {"cpus": os.cpu_count(), "system": platform.platform(), "python": platform.python_version()}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    document = {"settings": settings, "machine": machine, "runs": results}
    args.json.write_text(json.dumps(document, indent=2) + "\n")
    print(f"results: {args.json}")


if __name__ == "__main__":
    main()
