"""The clean-up before a driver restart (raysub/job/programs/cleanup.py): which Ray jobs are the previous
run's, its rounds against a fake cluster (what it kills, what it waits for, what it gives up on), the task
each node runs (on this machine, with the fake nvidia-smi), and one whole clean-up of a real Ray that a killed
driver left a named and an unnamed detached actor, a detached placement group and a GPU process in."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from raysub.job.lib import gpus as smi
from raysub.job.manifest import timing_args
from raysub.job.programs import cleanup
from raysub.job.programs.cleanup import Actor, Cleanup, Group, Job, NodeAnswer, Outcome, Worker
from raysub.protocol import Node
from raysub.protocol.preflight_log import Process
from raysub.spec import JobSpec
from tests.support.prereq import REPO

FIXTURES = REPO / "tests" / "fixtures" / "nvidia-smi"
FAKE_NVIDIA_SMI = REPO / "tests" / "fakes" / "nvidia-smi"
HEAD_IP = "10.0.0.1"
SINCE = 1_800_000_000.0  # epoch seconds: the previous run's start


def job(job_id: str, start: float = SINCE + 5, **changes: object) -> Job:
    base = Job(
        job_id,
        driver_type=True,
        running=False,
        driver_ip=HEAD_IP,
        driver_pid=4711,
        start_ms=int(start * 1000),
    )
    return replace(base, **changes)  # type: ignore[arg-type]


# ---- which jobs ----


def test_the_previous_runs_jobs_are_ended_drivers_on_this_node_since_the_run_started() -> None:
    jobs = [
        job("01000000", start=SINCE - 60),  # an earlier run's
        job("02000000"),  # the previous run's
        job("03000000", start=SINCE + 9, running=True, driver_pid=1),  # its driver still runs: someone else's
        job("04000000", running=True, driver_pid=99999999),  # the GCS has not seen the driver go yet
        job("05000000", driver_ip="10.0.0.2"),  # a driver on another node
        job("06000000", driver_type=False),  # a Jobs API submission
        job("07000000"),  # the clean-up's own
        job("08000000", start_ms=None),
    ]
    alive = {1}.__contains__
    assert cleanup.previous_jobs(jobs, SINCE, "07000000", HEAD_IP, alive) == ["02000000", "04000000"]


def test_a_real_pid_counts_as_running() -> None:
    assert cleanup.pid_alive(os.getpid())
    assert not cleanup.pid_alive(2**22 + 1)  # above the kernel's largest pid


# ---- whose workers, and which on the GPUs ----


def actor(
    name: str | None, pid: int, state: str = "ALIVE", node: str = "n1", job_id: str = "02000000"
) -> Actor:
    return Actor(f"id-{pid}", job_id, state, name, "ns", node, pid, detached=True)


def test_the_jobs_workers_are_those_that_ran_their_actors_and_tasks() -> None:
    keys = cleanup.worker_keys([actor("a", 11), actor(None, 0, state="PENDING_CREATION")], {("n2", 21)})
    assert keys == {("n1", 11), ("n2", 21)}
    workers = [
        Worker("n1", 11, True, "WORKER"),
        Worker("n2", 21, True, "WORKER"),
        Worker("n2", 22, True, "WORKER"),  # another job's
        Worker("n1", 21, True, "WORKER"),  # the same pid on another node is another process
        Worker("n1", 30, True, "DRIVER"),
    ]
    assert cleanup.alive_workers(workers, keys | {("n1", 30)}) == {"n1": [11], "n2": [21]}


def answer(fixture: str, status: int = 0, killed: tuple[int, ...] = ()) -> NodeAnswer:
    return NodeAnswer(list(killed), smi.Answer(status, (FIXTURES / fixture).read_text()))


def test_only_the_jobs_workers_count_among_the_gpu_processes() -> None:
    # apps.csv lists pid 4242 on GPU 3.
    answers: dict[str, NodeAnswer | None] = {
        "n1": answer("apps.csv"),
        "n2": answer("apps-noheader-nounits.csv"),
        "n3": answer("apps-none.csv"),
        "n4": answer("driver-not-loaded.txt", status=9),
        "n5": NodeAnswer([], None),  # no nvidia-smi
        "n6": None,  # did not answer
    }
    held = cleanup.gpu_holders(answers, {("n1", 4242), ("n3", 4242), ("n4", 4242)})
    assert held == {"n1": [Process(4242, "/usr/bin/python3", 30000.0, held["n1"][0].gpu_uuid)]}
    assert held["n1"][0].label() == "pid 4242 (python3, 30000 MiB)"


def test_an_answer_of_the_node_task_becomes_the_preflights_answer() -> None:
    assert cleanup.node_answer([5], None, "", 10) == NodeAnswer([5], None)
    assert cleanup.node_answer([], 0, "x", 10) == NodeAnswer([], smi.Answer(0, "x", 10))
    timed_out = cleanup.node_answer([], -1, "", 10)
    assert timed_out.gpu is not None and timed_out.gpu.failure() == "nvidia-smi did not answer within 10 s"


# ---- the rounds, against a fake cluster ----


@dataclass
class FakeCluster:
    """A cluster whose actors, groups and workers the calls change as Ray would: a named actor dies of
    kill_actor, a killed pid's worker dies (unless ``stubborn``), and Ray itself stops the workers of
    ``ray_stops`` after the first round. nvidia-smi lists ``on_gpu`` (node -> apps.csv's rows) until
    those pids are killed."""

    actors_: list[Actor]
    groups_: list[Group]
    alive: set[tuple[str, int]]
    task_pids: set[tuple[str, int]]
    ray_stops: set[tuple[str, int]]
    on_gpu: dict[str, int]
    stubborn: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        self.calls: list[tuple[str, object]] = []
        self.rounds = 0

    def jobs(self, timeout: float) -> list[Job]:
        return [job("02000000")]

    def actors(self, job_id: str, timeout: float) -> list[Actor]:
        return [a for a in self.actors_ if a.job_id == job_id]

    def groups(self, job_id: str, timeout: float) -> list[Group]:
        return [g for g in self.groups_ if g.job_id == job_id]

    def task_workers(self, job_id: str, timeout: float) -> set[tuple[str, int]]:
        return set(self.task_pids)

    def workers(self, timeout: float) -> list[Worker]:
        if self.rounds:
            self.alive -= self.ray_stops
        self.rounds += 1
        return [Worker(node, pid, True, "WORKER") for node, pid in sorted(self.alive)]

    def nodes(self) -> list[Node]:
        return [Node("n1", "node1", "10.0.0.1", 1, head=True), Node("n2", "node2", "10.0.0.2", 1)]

    def kill_actor(self, actor: Actor) -> None:
        self.calls.append(("kill_actor", actor.name))
        self._dies(actor.pid)

    def remove_group(self, group: Group) -> None:
        self.calls.append(("remove_group", group.name))
        self.groups_ = [replace(g, state="REMOVED") if g == group else g for g in self.groups_]

    def _dies(self, pid: int | None) -> None:
        self.actors_ = [replace(a, state="DEAD") if a.pid == pid else a for a in self.actors_]
        self.alive = {(node, p) for node, p in self.alive if p != pid}

    def on_nodes(self, kill: Mapping[str, list[int]], timeout: float) -> dict[str, NodeAnswer | None]:
        self.calls.append(("on_nodes", dict(kill)))
        answers: dict[str, NodeAnswer | None] = {}
        for node in ("n1", "n2"):
            killed = [pid for pid in kill.get(node, []) if (node, pid) in self.alive]
            for pid in killed:
                if pid not in self.stubborn:
                    self._dies(pid)
            apps = "pid, process_name, used_gpu_memory [MiB], gpu_uuid\n"
            on_gpu = self.on_gpu.get(node)
            if on_gpu is not None and (node, on_gpu) in self.alive:
                apps += f"{on_gpu}, /usr/bin/python3, 30000 MiB, GPU-6a1f0c2e-3b4d-4e5f-8a9b-0c1d2e3f4a53\n"
            answers[node] = NodeAnswer(killed, smi.Answer(0, apps))
        return answers


TIMING = timing_args(JobSpec(nodes=2).timing, "cleanup")


def quick(timeout: float) -> cleanup.Pace:
    """A pace for tests: a short grace and quick looks."""
    return cleanup.Pace(timeout, worker_grace=0.2, look=0.01, nvidia_smi_timeout=10)


def scene(**changes: object) -> FakeCluster:
    cluster = FakeCluster(
        actors_=[
            actor("keeper", 11),
            actor(None, 12, node="n2"),  # unnamed: killed by its pid, on its node
            actor("gone", 13, state="DEAD"),
        ],
        groups_=[
            Group("pg1", "02000000", "CREATED", "pgkeep", detached=True),
            Group("pg2", "02000000", "REMOVED", None, detached=False),
        ],
        alive={("n1", 11), ("n2", 12), ("n2", 21), ("n1", 40)},  # 40: another job's
        task_pids={("n2", 21)},
        ray_stops=set(),
        on_gpu={"n2": 21},
    )
    for name, value in changes.items():
        setattr(cluster, name, value)
    return cluster


def test_a_clean_up_kills_the_actors_removes_the_groups_and_kills_the_workers_ray_left() -> None:
    cluster = scene()
    outcome = cleanup.clean(cluster, SINCE, "07000000", HEAD_IP, quick(10))
    assert outcome.ok, outcome.line()
    assert ("kill_actor", "keeper") in cluster.calls
    assert ("remove_group", "pgkeep") in cluster.calls
    assert ("remove_group", None) not in cluster.calls
    assert cluster.alive == {("n1", 40)}
    # The unnamed actor's pid goes in the first round; the task's worker only after the grace.
    first_round = next(kill for call, kill in cluster.calls if call == "on_nodes")
    assert first_round == {"n2": [12]}
    assert outcome.line() == (
        "Ray job 02000000: removed detached placement group pgkeep; killed detached actor keeper; "
        "killed detached actor id-12; killed Ray workers 12 21 on node2; "
        "on the GPUs: pid 21 (python3, 30000 MiB) on node2"
    )


def test_workers_ray_stops_itself_within_the_grace_are_not_killed() -> None:
    cluster = scene(actors_=[], alive={("n2", 21)}, ray_stops={("n2", 21)}, on_gpu={})
    outcome = cleanup.clean(cluster, SINCE, "07000000", HEAD_IP, quick(10))
    assert outcome.line() == "Ray job 02000000: removed detached placement group pgkeep"
    assert [kill for call, kill in cluster.calls if call == "on_nodes"] == [{}]


def test_what_will_not_die_is_said_when_the_time_is_up() -> None:
    cluster = scene(stubborn=frozenset({21}))
    outcome = cleanup.clean(cluster, SINCE, "07000000", HEAD_IP, quick(0.5))
    assert not outcome.ok
    assert outcome.line().endswith(
        "; still there: Ray workers 21 on node2; on the GPUs of node2: pid 21 (python3, 30000 MiB)"
    )


def test_no_job_of_the_previous_run_is_nothing_to_do() -> None:
    cluster = scene()
    assert cleanup.clean(cluster, SINCE + 3600, "07000000", HEAD_IP, quick(1)).line() == (
        "no Ray job of the previous run"
    )
    assert cluster.calls == []


def test_a_failed_kill_is_said_and_does_not_stop_the_rest() -> None:
    cluster = scene()

    def refuse(actor: Actor) -> None:
        raise RuntimeError("the GCS said no")

    cluster.kill_actor = refuse  # type: ignore[method-assign]
    outcome = Cleanup(cluster, ["02000000"], quick(0.5)).run()
    assert "could not kill detached actor keeper: the GCS said no" in outcome.left
    assert ("remove_group", "pgkeep") in cluster.calls


def test_the_outcome_says_why_it_could_not_check() -> None:
    outcome = Outcome(jobs=["02000000"], cleared=["killed actor a"], problem="ValueError: no dashboard")
    assert not outcome.ok
    assert outcome.line() == "could not clean up: ValueError: no dashboard; before that: killed actor a"


def test_without_ray_at_the_address_it_says_so_and_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")  # nothing listens there: refused at once
    outcome = cleanup.run(SINCE, quick(5))
    assert outcome.problem is not None and outcome.problem.startswith("cannot connect to Ray at 127.0.0.1:1")


# ---- the task on a node, here ----


def test_the_node_task_kills_only_ray_workers_of_this_user_then_asks_nvidia_smi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Ray worker's command line names default_worker.py (until it is renamed ray::...); sleep is none.
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "default_worker.py"])
    bystander = subprocess.Popen(["sleep", "60"])
    bin_dir, scenarios = tmp_path / "bin", tmp_path / "smi"
    bin_dir.mkdir()
    scenarios.mkdir()
    (bin_dir / "nvidia-smi").symlink_to(FAKE_NVIDIA_SMI)
    (scenarios / "default").write_text(
        f"app {worker.pid}, /usr/bin/python3, 30000, GPU-00000000-0000-4000-8000-000000000000\n"
    )
    monkeypatch.setenv("FAKE_NVIDIA_SMI_DIR", str(scenarios))
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    try:
        killed, status, output = cleanup.on_node(
            [worker.pid, bystander.pid, 2**22 + 1], list(smi.APPS_QUERY), 10
        )
        assert killed == [worker.pid]
        assert worker.wait(timeout=5) == -signal.SIGKILL
        assert bystander.poll() is None
        assert status == 0
        assert [p.pid for p in smi.parse_processes(output)] == [worker.pid]
        monkeypatch.setenv("PATH", "/nonexistent")
        assert cleanup.on_node([], list(smi.APPS_QUERY), 10) == ([], None, "")
    finally:
        worker.kill()
        bystander.kill()
        worker.wait()
        bystander.wait()


# Loads the pickled node task from stdin where raysub cannot be imported (no site: the editable install's
# .pth file is not read; Ray's site-packages put on sys.path by hand), checks that, and runs it.
LOAD_AND_RUN = """
import pickle, sys
sys.path.append(sys.argv[1])
try:
    import raysub.job.programs
except ImportError:
    pass
else:
    sys.exit("raysub.job.programs is importable here")
task = pickle.loads(sys.stdin.buffer.read())
print(repr(task([], sys.argv[2:], 1.0)))
"""


def test_the_node_task_travels_without_raysub_and_abandons_a_hung_nvidia_smi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fake's hang leaves a child holding nvidia-smi's output for 10 minutes: a task that waited for
    # the output to close would outlive this test's limit.
    ray = pytest.importorskip("ray")
    bin_dir, scenarios = tmp_path / "bin", tmp_path / "smi"
    bin_dir.mkdir()
    scenarios.mkdir()
    (bin_dir / "nvidia-smi").symlink_to(FAKE_NVIDIA_SMI)
    (scenarios / "default").write_text("fail hang\n")
    for module in cleanup.NODE_TASK_MODULES:
        ray.cloudpickle.register_pickle_by_value(module)
    try:
        task = ray.cloudpickle.dumps(cleanup.on_node)
    finally:
        for module in cleanup.NODE_TASK_MODULES:
            ray.cloudpickle.unregister_pickle_by_value(module)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env |= {"PATH": f"{bin_dir}:{env['PATH']}", "FAKE_NVIDIA_SMI_DIR": str(scenarios)}
    site_packages = str(Path(ray.__file__).parents[1])
    done = subprocess.run(
        [sys.executable, "-S", "-c", LOAD_AND_RUN, site_packages, *smi.APPS_QUERY],
        input=task, capture_output=True, cwd=tmp_path, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().strip() == "([], -1, '')"


def test_the_program_needs_since() -> None:
    with pytest.raises(SystemExit) as exited:
        cleanup.parse([])
    assert exited.value.code == 2


# ---- against a real Ray: a head on this machine, a driver killed with what it left ----


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass(frozen=True)
class RayHead:
    address: str
    env: dict[str, str]
    smi: Path  # the fake nvidia-smi's scenarios


@pytest.fixture
def ray_head(tmp_path: Path) -> Iterator[RayHead]:
    """`ray start --head` with its own ports and temp dir, one logical GPU, the dashboard (the state API
    needs it), and the fake nvidia-smi first on its PATH."""
    pytest.importorskip("ray")
    ray_command = Path(sys.executable).with_name("ray")
    temp = Path(tempfile.mkdtemp(prefix="rsc", dir="/tmp"))  # short: Ray's socket paths
    bin_dir, smi = tmp_path / "bin", tmp_path / "smi"
    bin_dir.mkdir()
    smi.mkdir()
    (bin_dir / "nvidia-smi").symlink_to(FAKE_NVIDIA_SMI)
    (smi / "default").write_text("")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("RAY_", "_RAYSUB_")) and key != "PYTHONPATH"
    }
    env |= {
        "HOME": str(tmp_path),
        "RAY_AUTH_MODE": "disabled",
        "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
        "PATH": f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}",
        "FAKE_NVIDIA_SMI_DIR": str(smi),
    }
    gcs, dashboard, agent, agent_grpc, client, metrics, runtime_env, node_manager, objects = free_ports(9)
    head = subprocess.Popen(
        [str(ray_command), "start", "--head", "--block", f"--port={gcs}", f"--temp-dir={temp}",
         "--node-ip-address=127.0.0.1", "--num-cpus=2", "--num-gpus=1", "--disable-usage-stats",
         "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}",
         f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={agent_grpc}",
         f"--ray-client-server-port={client}", f"--metrics-export-port={metrics}",
         f"--runtime-env-agent-port={runtime_env}", f"--node-manager-port={node_manager}",
         f"--object-manager-port={objects}"],
        env=env, stdout=(tmp_path / "head.log").open("w"), stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while not (temp / "ray_current_cluster").exists():
            assert head.poll() is None, (tmp_path / "head.log").read_text()
            assert time.monotonic() < deadline, "the Ray head did not start"
            time.sleep(0.2)
        yield RayHead(f"127.0.0.1:{gcs}", {**env, "RAY_ADDRESS": f"127.0.0.1:{gcs}"}, smi)
    finally:
        # The head's processes share its group; its workers (each in its own group) leave with the raylet.
        os.killpg(head.pid, signal.SIGKILL)
        head.wait()
        shutil.rmtree(temp, ignore_errors=True)


PREVIOUS_RUN = """
import json, os, sys, time, ray
from ray.util.placement_group import placement_group
ray.init()

@ray.remote
class Keeper:
    def pid(self):
        return os.getpid()

keeper = Keeper.options(name="keeper", lifetime="detached", num_gpus=1).remote()
unnamed = Keeper.options(lifetime="detached", max_restarts=1, num_cpus=0).remote()
group = placement_group([{"CPU": 1}], lifetime="detached", name="pgkeep")
ray.get(group.ready())
pids = {"keeper": ray.get(keeper.pid.remote()), "unnamed": ray.get(unnamed.pid.remote())}
with open(sys.argv[1], "w") as out:
    json.dump(pids, out)
time.sleep(600)
"""

CHECK = """
import json, ray
from ray.util.state import list_actors, list_placement_groups
ray.init()
print(json.dumps({
    "actors": sorted((a.name or "", a.state) for a in list_actors(filters=[("class_name", "=", "Keeper")])),
    "groups": sorted((g.name, g.state) for g in list_placement_groups(filters=[("name", "=", "pgkeep")])),
}))
"""


def python(
    code: str, env: Mapping[str, str], *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_real_ray_is_left_with_nothing_of_a_killed_driver(ray_head: RayHead, tmp_path: Path) -> None:
    since = time.time()
    pids_file = tmp_path / "pids.json"
    driver = subprocess.Popen(
        [sys.executable, "-c", PREVIOUS_RUN, str(pids_file)],
        env=ray_head.env, stdout=(tmp_path / "driver.log").open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while not pids_file.exists() or not pids_file.read_text():
            assert driver.poll() is None, (tmp_path / "driver.log").read_text()
            assert time.monotonic() < deadline, "the driver did not get its actors"
            time.sleep(0.2)
    finally:
        driver.kill()
        driver.wait()
    pids = json.loads(pids_file.read_text())
    # nvidia-smi lists the keeper on the GPU, once (as Ray frees it then).
    (ray_head.smi / "default").write_text(
        "apps-for 1\n"
        f"app {pids['keeper']}, /usr/bin/python3, 30000, GPU-00000000-0000-4000-8000-000000000000\n"
    )
    env = {**ray_head.env, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "raysub.job.programs.cleanup", f"--since={since}", *TIMING]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=150, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    said = done.stdout.strip()
    assert said.startswith("Ray job "), said
    for part in (
        "removed detached placement group pgkeep",
        "killed detached actor keeper",
        "killed Ray workers",
        f"on the GPUs: pid {pids['keeper']} (python3, 30000 MiB) on ",
    ):
        assert part in said, said
    assert len(said.splitlines()) == 1
    checked = python(CHECK, ray_head.env)
    assert checked.returncode == 0, checked.stderr
    state = json.loads(checked.stdout.splitlines()[-1])
    assert state["groups"] == [["pgkeep", "REMOVED"]]
    assert {tuple(a) for a in state["actors"]} == {("keeper", "DEAD"), ("", "DEAD")}
    assert gone(pids["keeper"]) and gone(pids["unnamed"])
    # Again: the same jobs, with nothing left in them.
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=150, check=False)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.strip().endswith(": nothing left"), again.stdout
