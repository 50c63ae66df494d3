"""Clean restarts and the warning signal on the real minicluster: a driver restarted in its allocation
finds nothing of its first run (no detached actor or placement group, no Ray worker, no process that left
the driver's group and ignores TERM); a driver that exits 0 after the warning signal was interrupted, not
finished, also when the signal came before it started, unless it declared itself finished."""

import textwrap
import time
from pathlib import Path

import pytest

from raysub import protocol
from raysub.protocol.logdir import LogDir
from tests.support.minicluster import MiniCluster
from tests.support.raysub_jobs import assert_clean, job_report, run_job, submit, wait_for

pytestmark = pytest.mark.slurm

NO_GPUS = ["--gpus-per-node", "0"]
INTERRUPTED = (
    f"the driver exited with status 0 after SIGUSR1: interrupted, not finished (it did not create "
    f"${protocol.FINISHED_ENV})\n"
)

# First run: a detached named actor and a detached placement group, a task's worker on the other node, and
# a child in a session of its own that ignores TERM; their pids go to first_run.json; then it fails.
# Second run: none of that is left, as Ray's state API and /proc see it.
RESTARTED_DRIVER = textwrap.dedent(
    """
    import json, os, pathlib, signal, subprocess, sys, time
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.state import list_actors, list_placement_groups, list_workers

    record = pathlib.Path(sys.argv[1])
    ray.init(namespace="raysub-restarts")


    def gone(pid):
        try:
            return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except FileNotFoundError:
            return True


    if not record.exists():
        @ray.remote(num_cpus=0)
        class Keeper:
            def pid(self):
                return os.getpid()

        @ray.remote(num_cpus=1)
        def hold(path):
            pathlib.Path(path).write_text(str(os.getpid()))
            time.sleep(600)

        keeper = Keeper.options(name="keeper", lifetime="detached").remote()
        group = placement_group([{"CPU": 1}], lifetime="detached", name="pgkeep")
        ray.get(group.ready())
        task_pid = record.with_name("task_pid")
        held = hold.remote(str(task_pid))
        deaf = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
        child = subprocess.Popen([sys.executable, "-c", deaf], start_new_session=True)
        while not task_pid.exists() or not task_pid.read_text():
            time.sleep(0.1)
        record.write_text(json.dumps({
            "job": ray.get_runtime_context().get_job_id(),
            "keeper": ray.get(keeper.pid.remote()),
            "task": int(task_pid.read_text()),
            "child": child.pid,
        }))
        print("first run: leaving", record.read_text(), flush=True)
        sys.exit(1)

    first = json.loads(record.read_text())
    try:
        ray.get_actor("keeper")
        problems = ["the detached actor keeper is alive"]
    except ValueError:
        problems = []
    actors = list_actors(filters=[("job_id", "=", first["job"])])
    problems += [f"actor {a.name or a.actor_id} is {a.state}" for a in actors if a.state != "DEAD"]
    groups = list_placement_groups(filters=[("name", "=", "pgkeep")])
    problems += [f"placement group pgkeep is {g.state}" for g in groups if g.state != "REMOVED"]
    alive = {w.pid for w in list_workers(filters=[("is_alive", "=", "true")])}
    for what in ("keeper", "task"):
        if first[what] in alive or not gone(first[what]):
            problems.append(f"the first run's {what} worker {first[what]} is alive")
    if not gone(first["child"]):
        problems.append(f"the first run's child {first['child']} is alive")
    print("second run:", problems or "nothing of the first run is left", flush=True)
    sys.exit(1 if problems else 0)
    """
)


def test_a_restarted_driver_finds_nothing_of_its_first_run(minicluster: MiniCluster, slurm_tmp: Path) -> None:
    driver = slurm_tmp / "driver.py"
    driver.write_text(RESTARTED_DRIVER)
    result, logs = run_job(
        minicluster,
        slurm_tmp,
        [*("--nodes", "2", *NO_GPUS, "--driver-restarts", "1", "--restart-backoff", "1"),
         "--", "python", str(driver), str(slurm_tmp / "first_run.json")],
    )  # fmt: skip
    report = job_report(minicluster, slurm_tmp, result.job_id)
    second = logs.file(protocol.driver_log_name(1)).read_text()
    assert "second run: nothing of the first run is left" in second, second + report
    assert (result.state, result.exit_code) == ("COMPLETED", 0), report
    cleanups = [e.detail for e in logs.timeline() if e.phase == protocol.PHASE_DRIVER_CLEANUP]
    assert len(cleanups) == 1, report
    for part in ("killed detached actor keeper", "removed detached placement group pgkeep"):
        assert part in cleanups[0], cleanups[0]
    head_log = logs.head_log.read_text()
    assert "the driver's processes did not all stop within 3 s of TERM: killing them" in head_log
    assert minicluster.steps(result.job_id) == 2, "a restart in the allocation starts no new step"
    assert_clean(minicluster, result.job_id)


# Saves a marker and exits 0 when SIGUSR1 comes; with "finished", declares the training over first.
CATCHING_DRIVER = textwrap.dedent(
    """
    import pathlib, signal, sys, time
    import ray

    ray.init()

    def stop(*_):
        if sys.argv[1] == "finished":
            from raysub.driver import declare_finished
            print("declared finished:", declare_finished(), flush=True)
        pathlib.Path("got_usr1").touch()
        sys.exit(0)

    signal.signal(signal.SIGUSR1, stop)
    pathlib.Path("driver_running").touch()
    time.sleep(300)
    """
)


def usr1_job(minicluster: MiniCluster, slurm_tmp: Path, how: str) -> tuple[int, LogDir]:
    driver = slurm_tmp / "driver.py"
    driver.write_text(CATCHING_DRIVER)
    args = ["--nodes", "2", *NO_GPUS, "--forward-signal", "USR1", "--", "python", str(driver), how]
    return submit(minicluster, slurm_tmp, args)


def test_a_driver_that_exits_0_after_the_warning_was_interrupted_not_finished(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    job_id, logs = usr1_job(minicluster, slurm_tmp, "interrupted")
    wait_for(slurm_tmp / "driver_running")
    minicluster.run("scancel", "--batch", "--signal=USR1", str(job_id))
    result = minicluster.wait(job_id)
    assert (slurm_tmp / "got_usr1").exists()
    assert (result.state, result.exit_code) == ("COMPLETED", 0), job_report(minicluster, slurm_tmp, job_id)
    assert logs.ended.read_text() == INTERRUPTED
    assert logs.file(protocol.SIGNAL_DELIVERED).read_text() == "SIGUSR1\n"
    assert not logs.file(protocol.DRIVER_FINISHED).exists()
    assert_clean(minicluster, job_id)


def test_a_warning_before_the_driver_starts_waits_for_it(minicluster: MiniCluster, slurm_tmp: Path) -> None:
    job_id, logs = usr1_job(minicluster, slurm_tmp, "interrupted")
    # The head's canary check comes after the batch script set its trap, and seconds before the driver.
    deadline = time.monotonic() + 90
    while not any(e.phase == protocol.PHASE_CANARY_OK for e in logs.timeline()):
        assert time.monotonic() < deadline, job_report(minicluster, slurm_tmp, job_id)
        time.sleep(0.05)
    assert not logs.file(protocol.DRIVER_PID).exists(), "too late: the driver runs already"
    minicluster.run("scancel", "--batch", "--signal=USR1", str(job_id))
    result = minicluster.wait(job_id)
    report = job_report(minicluster, slurm_tmp, job_id)
    assert (result.state, result.exit_code) == ("COMPLETED", 0), report
    assert (slurm_tmp / "got_usr1").exists(), report
    assert logs.ended.read_text() == INTERRUPTED
    output = (slurm_tmp / f"slurm-{job_id}.out").read_text()
    assert "got SIGUSR1 while no driver runs: it goes to the next driver" in output, report
    assert "forwarded SIGUSR1 (held while no driver ran) to the driver's processes that handle it" in output
    assert not logs.file(protocol.SIGNAL_PENDING).exists()
    assert_clean(minicluster, job_id)


def test_a_driver_that_declares_itself_finished_ends_as_a_plain_exit_0(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    job_id, logs = usr1_job(minicluster, slurm_tmp, "finished")
    wait_for(slurm_tmp / "driver_running")
    minicluster.run("scancel", "--batch", "--signal=USR1", str(job_id))
    result = minicluster.wait(job_id)
    assert (result.state, result.exit_code) == ("COMPLETED", 0), job_report(minicluster, slurm_tmp, job_id)
    assert "declared finished: True" in logs.driver_log.read_text()
    assert logs.file(protocol.DRIVER_FINISHED).exists()
    assert logs.ended.read_text() == "driver exited with status 0\n"
    assert_clean(minicluster, job_id)
