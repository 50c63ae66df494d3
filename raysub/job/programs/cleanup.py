"""What a driver run left in the job's Ray, cleared before the head restarts the driver (--driver-restarts).

Run by the head as ``python -m raysub.job.programs.cleanup --since=EPOCH`` once the previous run's processes
are gone (its process group and whatever carried its mark), with RAY_ADDRESS and the job's auth settings as
the driver gets them. The previous run's Ray jobs are the drivers' jobs (not the Jobs API's) whose driver ran
on this node, started at or after --since (the run's start, on this node's clock, as Ray's are) and is
not running any more (its process is gone); never this program's own. A job whose driver still runs is
someone else's (a user attached to the job), and is left alone. For those jobs, within --timeout:

1. every actor that is not dead is killed: a detached one outlives its driver, and holds its GPUs. A named
   one with ray.kill(no_restart=True); an unnamed one, for which no public API gives a handle, by killing
   its process (a restartable one may then come back, and is killed again until the time is up);
2. every placement group that is not removed is removed (a detached one outlives its driver too);
3. none of their Ray worker processes stays alive on any node. Ray stops a dead job's workers itself;
   whatever still runs --worker-grace seconds after the start is killed by a task on its node. Their
   workers are the processes that ran their actors and tasks (ray.util.state's list_workers does not say
   whose a worker is), matched by node and pid against list_workers;
4. on every node where nvidia-smi is, no GPU compute process is one of those workers (the same task asks
   nvidia-smi, with the GPU preflight's query and parser: raysub/job/lib/gpus.py).

It uses Ray's state API (ray.util.state), which the dashboard serves: with --no-dashboard it can check
nothing, and says so. The task on each node takes no CPU and is pinned to its node
(NodeAffinitySchedulingStrategy); it kills only a process that Ray says ran one of those jobs' actors or
tasks, and only while it is this user's and its command line is a Ray worker's (a pid reused since is left
alone).

Exit status: 0 when nothing of those jobs is left (its only line on stdout says what it cleared); 1 when
something was still there at the end of --timeout, or Ray could not be asked (its only line on stdout
says what it cleared and what is left, or why it could not); 2 for a usage error. Shipped to the nodes
(raysub/job/programs/__init__.py): the standard library and Ray only, Python 3.9.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from raysub.job.lib import bounded, gpus
from raysub.job.lib.bounded import run as run_bounded
from raysub.job.lib.ray_nodes import alive_nodes, gcs_answers
from raysub.protocol import Node, one_line
from raysub.protocol.preflight_log import Process

CLEANUP_FAILED = 1
# The most records one state API call returns (Ray's own ceiling, RAY_MAX_LIMIT_FROM_API_SERVER).
LIST_LIMIT = 10_000
# Past --timeout, the program exits whatever Ray is doing (a call that ignores its own timeout, say):
# the head must not wait for ever before a restart.
HARD_STOP_MARGIN_S = 30.0

NodePid = tuple[str, int]  # a process on a Ray node: the node's id, the pid there
# The modules whose functions the task on each node (on_node) takes along by value, not by name: a node has
# Ray, not raysub.
NODE_TASK_MODULES = (sys.modules[__name__], bounded)


# ---- what Ray says, as plain records ----


@dataclass(frozen=True)
class Job:
    job_id: str
    driver_type: bool  # started by a driver's ray.init (not the Jobs API)
    running: bool
    driver_ip: str | None
    driver_pid: int | None
    start_ms: int | None


@dataclass(frozen=True)
class Actor:
    actor_id: str
    job_id: str
    state: str
    name: str | None
    namespace: str | None
    node_id: str | None
    pid: int | None
    detached: bool

    @property
    def label(self) -> str:
        kind = "detached actor" if self.detached else "actor"
        return f"{kind} {self.name or self.actor_id}"


@dataclass(frozen=True)
class Group:
    group_id: str
    job_id: str
    state: str
    name: str | None
    detached: bool

    @property
    def label(self) -> str:
        kind = "detached placement group" if self.detached else "placement group"
        return f"{kind} {self.name or self.group_id}"


@dataclass(frozen=True)
class Worker:
    node_id: str
    pid: int
    alive: bool
    worker_type: str  # WORKER, DRIVER, SPILL_WORKER, RESTORE_WORKER


@dataclass(frozen=True)
class NodeAnswer:
    """What the task on a node did: the pids it killed, and nvidia-smi's answer (None: no nvidia-smi)."""

    killed: list[int]
    gpu: gpus.Answer | None


class Cluster(Protocol):
    """The Ray calls the clean-up makes (RayCluster; the unit tests' fake has the same)."""

    def jobs(self, timeout: float) -> list[Job]: ...
    def actors(self, job_id: str, timeout: float) -> list[Actor]: ...
    def groups(self, job_id: str, timeout: float) -> list[Group]: ...
    def task_workers(self, job_id: str, timeout: float) -> set[NodePid]: ...
    def workers(self, timeout: float) -> list[Worker]: ...
    def nodes(self) -> list[Node]: ...
    def kill_actor(self, actor: Actor) -> None: ...
    def remove_group(self, group: Group) -> None: ...
    def on_nodes(self, kill: Mapping[str, list[int]], timeout: float) -> dict[str, NodeAnswer | None]: ...


# ---- the choices: pure functions of those records ----


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists here (someone else's counts too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def previous_jobs(
    jobs: Iterable[Job], since: float, own: str, node_ip: str, alive: Callable[[int], bool] = pid_alive
) -> list[str]:
    """The ids of the previous run's jobs among ``jobs`` (see the module's doc), oldest first."""
    chosen = []
    for job in sorted(jobs, key=lambda j: j.start_ms or 0):
        if job.job_id == own or not job.driver_type or job.driver_ip != node_ip:
            continue
        if job.start_ms is None or job.start_ms < since * 1000:
            continue
        if job.running and job.driver_pid is not None and alive(job.driver_pid):
            continue
        chosen.append(job.job_id)
    return chosen


def worker_keys(actors: Iterable[Actor], task_workers: Iterable[NodePid]) -> set[NodePid]:
    """The processes that ran those jobs' actors and tasks."""
    keys = {(a.node_id, a.pid) for a in actors if a.node_id and a.pid}
    return keys | set(task_workers)


def alive_workers(workers: Iterable[Worker], keys: set[NodePid]) -> dict[str, list[int]]:
    """The alive Ray workers among ``keys``, by node."""
    found: dict[str, list[int]] = {}
    for worker in workers:
        if worker.alive and worker.worker_type == "WORKER" and (worker.node_id, worker.pid) in keys:
            found.setdefault(worker.node_id, []).append(worker.pid)
    return {node: sorted(pids) for node, pids in found.items()}


def gpu_holders(answers: Mapping[str, NodeAnswer | None], keys: set[NodePid]) -> dict[str, list[Process]]:
    """The GPU compute processes that are those jobs' workers, by node."""
    held: dict[str, list[Process]] = {}
    for node_id, answer in answers.items():
        if answer is None or answer.gpu is None or answer.gpu.failure() is not None:
            continue
        for process in gpus.parse_processes(answer.gpu.output):
            if process.pid is not None and (node_id, process.pid) in keys:
                held.setdefault(node_id, []).append(process)
    return held


def merge(*kills: Mapping[str, Iterable[int]]) -> dict[str, list[int]]:
    merged: dict[str, set[int]] = {}
    for kill in kills:
        for node_id, pids in kill.items():
            merged.setdefault(node_id, set()).update(pids)
    return {node_id: sorted(pids) for node_id, pids in merged.items() if pids}


# ---- what was done, and what is left ----


@dataclass
class Outcome:
    jobs: list[str] = field(default_factory=list)
    cleared: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    problem: str | None = None  # why it could not check at all

    @property
    def ok(self) -> bool:
        return self.problem is None and not self.left

    def note(self, said: str, left: bool = False) -> None:
        """Adds a line to what was cleared (or is left), once."""
        lines = self.left if left else self.cleared
        if said not in lines:
            lines.append(said)

    def line(self) -> str:
        """One line for the head's log and the timeline."""
        if self.problem is not None:
            done = f"; before that: {'; '.join(self.cleared)}" if self.cleared else ""
            return f"could not clean up: {self.problem}{done}"
        if not self.jobs:
            return "no Ray job of the previous run"
        said = f"Ray job{'s' if len(self.jobs) > 1 else ''} {', '.join(self.jobs)}: "
        said += "; ".join(self.cleared) if self.cleared else "nothing left"
        if self.left:
            said += f"; still there: {'; '.join(self.left)}"
        return said


def where(pids: Mapping[str, Iterable[int]], names: Mapping[str, str]) -> str:
    return ", ".join(f"{' '.join(map(str, sorted(p)))} on {names.get(n, n)}" for n, p in sorted(pids.items()))


# ---- the clean-up ----


@dataclass(frozen=True)
class Pace:
    """How long a clean-up may take in all, how long Ray gets to stop a dead job's workers itself (a kill of
    ours before then would race it, and say "killed" of what Ray was stopping anyway), and how often it
    looks again; and how long nvidia-smi may take on a node (seconds; the head passes JobSpec.timing's)."""

    timeout: float
    worker_grace: float
    look: float
    nvidia_smi_timeout: float


class Cleanup:
    """One clean-up of ``jobs`` on ``cluster``, at ``pace``."""

    def __init__(self, cluster: Cluster, jobs: list[str], pace: Pace) -> None:
        self.cluster = cluster
        self.pace = pace
        self.deadline = time.monotonic() + pace.timeout
        self.outcome = Outcome(jobs=jobs)
        self.names = {node.node_id: node.name for node in cluster.nodes()}
        self.keys: set[NodePid] = set()
        self.killed: dict[str, set[int]] = {}
        self.on_gpus: dict[str, dict[int, Process]] = {}

    def remaining(self) -> float:
        return max(1.0, self.deadline - time.monotonic())

    def run(self) -> Outcome:
        for job_id in self.outcome.jobs:
            self.keys |= self.cluster.task_workers(job_id, self.remaining())
            for group in self.cluster.groups(job_id, self.remaining()):
                if group.state != "REMOVED":
                    self.attempt(self.cluster.remove_group, group, "remove", "removed", group.label)
        self.rounds()
        if self.killed:
            self.outcome.note(f"killed Ray workers {where(self.killed, self.names)}")
        if self.on_gpus:
            held = {n: [p.label() for p in ps.values()] for n, ps in sorted(self.on_gpus.items())}
            self.outcome.note(
                "on the GPUs: "
                + "; ".join(f"{', '.join(ls)} on {self.names.get(n, n)}" for n, ls in held.items())
            )
        return self.outcome

    def live_actors(self) -> tuple[list[Actor], dict[str, list[int]]]:
        """The jobs' actors that are not dead, each named one killed (again); and the processes of the
        unnamed ones, which only a kill on their node can stop. Asked every round: an actor killed so may
        be restarted (max_restarts), in a new process."""
        live: list[Actor] = []
        unnamed: dict[str, list[int]] = {}
        for job_id in self.outcome.jobs:
            actors = self.cluster.actors(job_id, self.remaining())
            self.keys |= worker_keys(actors, ())
            for actor in (a for a in actors if a.state != "DEAD"):
                live.append(actor)
                if actor.name:
                    self.attempt(self.cluster.kill_actor, actor, "kill", "killed", actor.label)
                elif actor.node_id and actor.pid and actor.state == "ALIVE":
                    unnamed.setdefault(actor.node_id, []).append(actor.pid)
                    self.outcome.note(f"killed {actor.label}")
        return live, unnamed

    def attempt(self, action: Any, record: Any, verb: str, done: str, label: str) -> None:
        """``action(record)``, said as done; a failure is said at the end if the thing is still there."""
        try:
            action(record)
        except Exception as error:  # one that fails must not keep the others
            self.outcome.note(f"could not {verb} {label}: {one_line(error, 200)}", left=True)
            return
        self.outcome.note(f"{done} {label}")

    def rounds(self) -> None:
        """Rounds until none of the jobs' actors lives, none of their workers is alive and none holds a
        GPU. Ray stops a dead job's workers itself, so for the pace's worker_grace a round only looks;
        after that it kills what is left, on its node. A process seen on a GPU is killed in the next round."""
        grace_end = time.monotonic() + self.pace.worker_grace
        force: dict[str, list[int]] = {}
        while True:
            live, unnamed = self.live_actors()
            alive = alive_workers(self.cluster.workers(self.remaining()), self.keys)
            late = time.monotonic() >= grace_end
            force = merge(force, unnamed, alive if late else {})
            held: dict[str, list[Process]] = {}
            answers: dict[str, NodeAnswer | None] = {}
            if force or not (live or alive):
                answers = self.cluster.on_nodes(force, self.remaining())
                held = self.look(answers)
                force = {node_id: [p.pid for p in ps if p.pid] for node_id, ps in held.items()}
                if not (live or alive or held):
                    self.unchecked(answers)
                    return
            if time.monotonic() >= self.deadline:
                self.left(live, alive, held)
                self.unchecked(answers)
                return
            time.sleep(self.pace.look)

    def look(self, answers: Mapping[str, NodeAnswer | None]) -> dict[str, list[Process]]:
        """Records what a round killed; returns the jobs' workers it saw on the GPUs."""
        for node_id, answer in answers.items():
            if answer is not None and answer.killed:
                self.killed.setdefault(node_id, set()).update(answer.killed)
        held = gpu_holders(answers, self.keys)
        for node_id, processes in held.items():
            self.on_gpus.setdefault(node_id, {}).update((p.pid or 0, p) for p in processes)
        return held

    def left(
        self, live: list[Actor], alive: Mapping[str, list[int]], held: Mapping[str, list[Process]]
    ) -> None:
        for actor in live:
            self.outcome.note(f"{actor.label} ({actor.state.lower()})", left=True)
        if alive:
            self.outcome.note(f"Ray workers {where(alive, self.names)}", left=True)
        for node_id, processes in sorted(held.items()):
            labels = ", ".join(p.label() for p in processes)
            self.outcome.note(f"on the GPUs of {self.names.get(node_id, node_id)}: {labels}", left=True)

    def unchecked(self, answers: Mapping[str, NodeAnswer | None]) -> None:
        """Says which nodes' GPUs could not be checked in the last round, and why."""
        for node_id, answer in sorted(answers.items()):
            name = self.names.get(node_id, node_id)
            if answer is None:
                self.outcome.note(f"{name} did not answer", left=True)
            elif answer.gpu is not None and answer.gpu.failure() is not None:
                self.outcome.note(f"on {name}: {answer.gpu.failure()}", left=True)


def clean(cluster: Cluster, since: float, own: str, node_ip: str, pace: Pace) -> Outcome:
    jobs = previous_jobs(cluster.jobs(pace.timeout), since, own, node_ip)
    if not jobs:
        return Outcome()
    return Cleanup(cluster, jobs, pace).run()


# ---- on each node: a Ray task ----


def on_node(kill: list[int], query: list[str], nvidia_timeout: float) -> tuple[list[int], int | None, str]:
    """Runs on a node, as a Ray task: kills the pids in ``kill`` that are Ray workers of this user (their
    command line says so; a pid that is anything else by now is left alone), then asks nvidia-smi
    ``query``. Returns the pids it killed, nvidia-smi's exit status and what it said: status None where
    there is no nvidia-smi, -1 when it did not answer in time (killed and abandoned: run_bounded). Only the
    standard library, imported here, and run_bounded: the function travels by value to nodes that have no
    raysub, and so does run_bounded's module (NODE_TASK_MODULES)."""
    import os as os_
    import shutil
    import signal
    from pathlib import Path

    killed = []
    for pid in kill:
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
            mine = Path(f"/proc/{pid}").stat().st_uid == os_.getuid()
        except OSError:
            continue  # gone already
        worker = command.startswith(b"ray::") or b"default_worker.py" in command
        if mine and worker and pid != os_.getpid():
            try:
                os_.kill(pid, signal.SIGKILL)
            except OSError:
                continue
            killed.append(pid)
    path = shutil.which("nvidia-smi")
    if path is None:
        return killed, None, ""
    status, output = run_bounded([path, *query], nvidia_timeout)
    return killed, -1 if status is None else status, output


def node_answer(killed: list[int], status: int | None, output: str, nvidia_timeout: float) -> NodeAnswer:
    """on_node's answer as a record: nvidia-smi's part as the GPU preflight's Answer."""
    gpu = None if status is None else gpus.Answer(None if status < 0 else status, output, nvidia_timeout)
    return NodeAnswer(list(killed), gpu)


class RayCluster:
    """Cluster through Ray's public APIs, from a process connected to the job's Ray."""

    def __init__(self, nvidia_smi_timeout: float) -> None:
        import ray
        from ray.util import state

        self.nvidia_smi_timeout = nvidia_smi_timeout
        self.ray: Any = ray
        self.state: Any = state
        # By value: the node task must not need raysub where it runs (a module's functions otherwise travel
        # by reference, and a worker node has no raysub to import them from).
        for module in NODE_TASK_MODULES:
            self.ray.cloudpickle.register_pickle_by_value(module)
        self.task: Any = ray.remote(num_cpus=0, max_retries=0)(on_node)

    def _list(self, what: str, timeout: float, **kwargs: Any) -> list[Any]:
        lister = getattr(self.state, f"list_{what}")
        seconds = max(1, int(timeout))
        return list(lister(limit=LIST_LIMIT, timeout=seconds, raise_on_missing_output=False, **kwargs))

    def jobs(self, timeout: float) -> list[Job]:
        jobs = []
        for job in self._list("jobs", timeout, detail=True):
            driver = job.driver_info
            pid = str(getattr(driver, "pid", "") or "")
            jobs.append(
                Job(
                    job_id=job.job_id or "",
                    driver_type=str(getattr(job.type, "value", job.type)) == "DRIVER",
                    running=str(getattr(job.status, "value", job.status)) == "RUNNING",
                    driver_ip=getattr(driver, "node_ip_address", None),
                    driver_pid=int(pid) if pid.isdigit() else None,
                    start_ms=job.start_time,
                )
            )
        return jobs

    def actors(self, job_id: str, timeout: float) -> list[Actor]:
        listed = self._list("actors", timeout, filters=[("job_id", "=", job_id)], detail=True)
        return [
            Actor(
                actor_id=a.actor_id,
                job_id=a.job_id,
                state=str(a.state),
                name=a.name or None,
                namespace=a.ray_namespace,
                node_id=a.node_id or None,
                pid=a.pid or None,
                detached=bool(a.is_detached),
            )
            for a in listed
        ]

    def groups(self, job_id: str, timeout: float) -> list[Group]:
        listed = self._list(
            "placement_groups", timeout, filters=[("creator_job_id", "=", job_id)], detail=True
        )
        return [
            Group(g.placement_group_id, g.creator_job_id, str(g.state), g.name or None, bool(g.is_detached))
            for g in listed
        ]

    def task_workers(self, job_id: str, timeout: float) -> set[NodePid]:
        tasks = self._list("tasks", timeout, filters=[("job_id", "=", job_id)])
        return {(t.node_id, t.worker_pid) for t in tasks if t.node_id and t.worker_pid}

    def workers(self, timeout: float) -> list[Worker]:
        listed = self._list("workers", timeout, filters=[("is_alive", "=", "true")])
        return [Worker(w.node_id, w.pid, bool(w.is_alive), str(w.worker_type)) for w in listed]

    def nodes(self) -> list[Node]:
        return alive_nodes(self.ray.nodes())

    def own_job(self) -> str:
        return str(self.ray.get_runtime_context().get_job_id())

    def node_ip(self) -> str:
        """This node's address, as Ray knows it (and as the job table has a driver's)."""
        return str(self.ray.util.get_node_ip_address())

    def kill_actor(self, actor: Actor) -> None:
        try:
            handle = self.ray.get_actor(actor.name, namespace=actor.namespace)
        except ValueError:  # gone already
            return
        self.ray.kill(handle, no_restart=True)

    def remove_group(self, group: Group) -> None:
        from ray.util.placement_group import PlacementGroup, remove_placement_group

        remove_placement_group(PlacementGroup(self.ray.PlacementGroupID.from_hex(group.group_id)))

    def on_nodes(self, kill: Mapping[str, list[int]], timeout: float) -> dict[str, NodeAnswer | None]:
        """on_node on every alive node at once; None for a node that did not answer in time."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nvidia_timeout = min(timeout, self.nvidia_smi_timeout)
        refs = {}
        for node in self.nodes():
            pinned = self.task.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False)
            )
            refs[pinned.remote(kill.get(node.node_id, []), list(gpus.APPS_QUERY), nvidia_timeout)] = (
                node.node_id
            )
        ready, _ = self.ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
        answers: dict[str, NodeAnswer | None] = dict.fromkeys(refs.values())
        for ref in ready:
            try:
                killed, status, output = self.ray.get(ref, timeout=timeout)
                answers[refs[ref]] = node_answer(killed, status, output, nvidia_timeout)
            except self.ray.exceptions.RayError:
                continue
        return answers


# ---- the program ----


def stop_at(seconds: float) -> threading.Timer:
    """Ends the process ``seconds`` from now, saying so, whatever it is doing then."""

    def stop() -> None:
        print(f"could not clean up: still not done after {seconds:.0f} s", flush=True)
        os._exit(CLEANUP_FAILED)

    timer = threading.Timer(seconds, stop)
    timer.daemon = True
    timer.start()
    return timer


def run(since: float, pace: Pace) -> Outcome:
    """Connects to the job's Ray (RAY_ADDRESS), cleans up, disconnects."""
    import ray

    address = os.environ.get("RAY_ADDRESS") or "auto"
    try:
        gcs_answers(address, pace.timeout)
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    except Exception as error:
        return Outcome(problem=f"cannot connect to Ray at {address}: {one_line(error)}")
    outcome = Outcome()
    try:
        cluster = RayCluster(pace.nvidia_smi_timeout)
        outcome = clean(cluster, since, cluster.own_job(), cluster.node_ip(), pace)
    except Exception as error:  # the state API without a dashboard, a Ray that changed: said, not raised
        outcome.problem = f"{type(error).__name__}: {one_line(error)}"
    finally:
        ray.shutdown()
    return outcome


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m raysub.job.programs.cleanup",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--since", type=float, required=True, help="when the previous driver run started (epoch seconds)"
    )
    # The head passes the pace (JobSpec.timing), the one place it is written.
    parser.add_argument("--timeout", type=float, required=True, help="seconds it may take")
    parser.add_argument(
        "--worker-grace", type=float, required=True, help="seconds Ray gets to stop the workers itself"
    )
    parser.add_argument("--look", type=float, required=True, help="seconds between two looks at what is left")
    parser.add_argument("--nvidia-smi-timeout", type=float, required=True, help="seconds nvidia-smi may take")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    stop_at(args.timeout + HARD_STOP_MARGIN_S)
    outcome = run(args.since, Pace(args.timeout, args.worker_grace, args.look, args.nvidia_smi_timeout))
    print(outcome.line(), flush=True)
    return 0 if outcome.ok else CLEANUP_FAILED


if __name__ == "__main__":
    sys.exit(main())
