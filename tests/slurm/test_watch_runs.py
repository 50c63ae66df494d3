"""raysub watch keeping real runs going on the minicluster (issue 22): a Slurm requeue resumes from the
newest checkpoint, a missing checkpoint directory is refused, a long step that keeps printing is not a
stall, a driver that fails at once is not resubmitted for ever, an sbatch that hangs after queueing the
job leaves one job, and a driver interrupted by the warning signal is resubmitted and resumes."""

import json
import os
import shutil
import subprocess
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from raysub.protocol.logdir import LogDir
from tests.support.minicluster import MiniCluster
from tests.support.raysub_jobs import assert_clean, wait_for

pytestmark = pytest.mark.slurm

NO_GPUS = ["--gpus-per-node", "0"]
# Quick resubmissions and a question to Slurm every 2 s.
FAST = ["--backoff", "1", "--backoff-max", "2", "--interval", "2"]


def render(cluster: MiniCluster, workdir: Path, *args: str) -> Path:
    script = workdir / "job.sub"
    script.write_text(cluster.run("raysub", "render", "--nodes", "2", *NO_GPUS, "--time=5", *args).stdout)
    return script


def checkpointing_job(
    cluster: MiniCluster, workdir: Path, driver_text: str, *args: str
) -> tuple[Path, Path, Path]:
    """A job script whose driver is ``driver_text`` run with a checkpoint directory (made) and a file it
    touches once it trains: (checkpoints, running, script)."""
    checkpoints, running, driver = workdir / "ckpt", workdir / "running", workdir / "driver.py"
    checkpoints.mkdir()
    driver.write_text(driver_text)
    script = render(cluster, workdir, *args, "--", "python", str(driver), str(checkpoints), str(running))
    return checkpoints, running, script


@contextmanager
def watching(
    cluster: MiniCluster, script: Path, *args: str, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[str]]:
    """raysub watch SCRIPT ARGS, running in the script's directory; killed if still running at the end."""
    watch = subprocess.Popen(
        ["raysub", "watch", str(script), *FAST, *args],
        cwd=script.parent,
        env={**cluster.env, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield watch
    finally:
        watch.kill()
        watch.communicate()


def finish(watch: subprocess.Popen[str], timeout: float = 240) -> str:
    output, _ = watch.communicate(timeout=timeout)
    return output


def state_of(script: Path) -> dict[str, object]:
    state: dict[str, object] = json.loads(script.with_name(f"{script.name}.watch.json").read_text())
    return state


def history(script: Path) -> list[dict[str, object]]:
    entries = state_of(script)["history"]
    assert isinstance(entries, list)
    return entries


def job_ids(script: Path) -> list[int]:
    return [int(str(entry["job_id"])) for entry in history(script)]


def current_job(script: Path, timeout: float = 60) -> int:
    """The job the run watches now, once the state file names one."""
    deadline = time.monotonic() + timeout
    while True:
        path = script.with_name(f"{script.name}.watch.json")
        if path.exists() and (job := state_of(script).get("job_id")):
            return int(str(job))
        assert time.monotonic() < deadline, "watch named no job"
        time.sleep(0.5)


# Saves step_2 and step_4 (NeMo-RL's layout), then trains on until Slurm takes the job back. Run again, it
# must have been told the newest, step_4.
CHECKPOINTING_DRIVER = textwrap.dedent(
    """
    import os, pathlib, sys, time
    checkpoints, running = map(pathlib.Path, sys.argv[1:3])
    resume = os.environ.get("RAYSUB_RESUME_FROM")
    if resume:
        print("resumed from", resume, flush=True)
        sys.exit(0)
    for step in (2, 4):
        (checkpoints / f"step_{step}").mkdir()
        (checkpoints / f"step_{step}" / "training_info.json").write_text("{}")
    running.touch()
    time.sleep(3600)
    """
)


def test_a_watched_job_slurm_requeues_resumes_from_the_newest_checkpoint(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    checkpoints, running, script = checkpointing_job(
        minicluster, slurm_tmp, CHECKPOINTING_DRIVER, "--requeue"
    )
    with watching(
        minicluster, script, "--checkpoint-dir", str(checkpoints), "--max-resubmissions", "1"
    ) as watch:
        wait_for(running)
        job_id = current_job(script)
        minicluster.run("scontrol", "requeue", str(job_id))
        # Slurm holds a requeued job back for its credential lifetime (20 min by default in 22.05): let it
        # start again now, as an administrator would, once it is pending again.
        deadline = time.monotonic() + 120
        requeued = LogDir.of(slurm_tmp, job_id, requeues=1)
        while not requeued.path.exists():
            assert time.monotonic() < deadline, "the requeued job did not start again"
            minicluster.run("scontrol", "update", f"JobId={job_id}", "StartTime=now", check=False)
            time.sleep(2)
        output = finish(watch)
    assert watch.returncode == 0, output
    assert job_ids(script) == [job_id], "a requeue is the same job: nothing was resubmitted"
    assert requeued.driver_log.read_text() == f"resumed from {checkpoints / 'step_4'}\n", output
    assert_clean(minicluster, job_id)


def test_a_missing_checkpoint_dir_is_refused_and_nothing_is_submitted(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    script = render(minicluster, slurm_tmp, "--", "true")
    typo = slurm_tmp / "chekpoints"
    done = minicluster.run(
        "raysub", "watch", str(script), "--checkpoint-dir", str(typo), check=False, cwd=slurm_tmp
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{typo} does not exist" in done.stderr and "--create-checkpoint-dir" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not script.with_name("job.sub.watch.json").exists()
    rendered = minicluster.run(
        "raysub", "render", "-N", "2", "--checkpoint-dir", str(typo), "--", "x", check=False
    )
    assert rendered.returncode == 2 and f"{typo} does not exist" in rendered.stderr


# verl's step lines, then a long step: 15 s of rollout output (or of silence), then the next step.
LONG_STEP_DRIVER = textwrap.dedent(
    """
    import sys, time
    for step in range(1, 4):
        print(f"step:{step} - actor/loss:{1 / step:.3f} - timing_s/step:1.0", flush=True)
        time.sleep(1)
    for second in range(15):
        if sys.argv[1] == "printing":
            print(f"generating rollouts: {second * 64} of 1024 prompts done", flush=True)
        time.sleep(1)
    print("step:4 - actor/loss:0.200 - timing_s/step:16.0", flush=True)
    """
)


@pytest.mark.parametrize("output", ["printing", "silent"])
def test_a_long_step_that_keeps_printing_is_not_cancelled_but_a_silent_one_is(
    minicluster: MiniCluster, slurm_tmp: Path, output: str
) -> None:
    driver = slurm_tmp / "driver.py"
    driver.write_text(LONG_STEP_DRIVER)
    script = render(minicluster, slurm_tmp, "--", "python", str(driver), output)
    with watching(minicluster, script, "--stall-after", "6", "--max-resubmissions", "0") as watch:
        text = finish(watch)
    outcomes = [entry["outcome"] for entry in history(script)]
    if output == "printing":
        assert (watch.returncode, outcomes) == (0, ["COMPLETED"]), text
    else:
        assert (watch.returncode, outcomes) == (1, ["STALLED"]), text
    assert_clean(minicluster, job_ids(script)[-1])


def test_a_driver_that_fails_at_once_is_submitted_at_most_twice_despite_its_restarts(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    driver = slurm_tmp / "driver.py"
    driver.write_text("import ray\nmodle.fit()\n")
    # Three runs in each job, 4 s and 8 s apart: the job's driver fails 12 s after it first started (past
    # --quick-failure 8), its last run at once.
    script = render(
        minicluster,
        slurm_tmp,
        "--driver-restarts",
        "2",
        "--restart-backoff",
        "4",
        "--",
        "python",
        str(driver),
    )
    with watching(minicluster, script, "--quick-failure", "8", "--max-resubmissions", "5") as watch:
        output = finish(watch, timeout=300)
    assert watch.returncode == 1, output
    assert len(job_ids(script)) == 2, output
    assert "NameError: name 'modle' is not defined" in output
    assert "it will fail again" in str(state_of(script)["stopped"])


def test_an_sbatch_that_queues_the_job_then_hangs_leaves_exactly_one_job_watched(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    real = shutil.which("sbatch", path=minicluster.env["PATH"])
    assert real is not None
    stand_in = slurm_tmp / "bin" / "sbatch"
    stand_in.parent.mkdir()
    # Queues the job, then hangs without a word, as sbatch does on a controller that stops answering.
    stand_in.write_text(f'#!/bin/bash\n{real} "$@" >/dev/null || exit\nexec sleep 300\n')
    stand_in.chmod(0o755)
    name = f"hung-sbatch-{os.getpid()}"
    script = render(minicluster, slurm_tmp, "--job-name", name, "--", "python", "-c", "print('trained')")
    path = f"{stand_in.parent}{os.pathsep}{minicluster.env['PATH']}"
    with watching(minicluster, script, "--sbatch-timeout", "3", env={"PATH": path}) as watch:
        output = finish(watch)
    assert watch.returncode == 0, output
    queued = minicluster.run("squeue", "-h", "--states=all", "--name", name, "--format=%i").stdout.split()
    assert len(queued) == 1 and job_ids(script) == [int(queued[0])], output
    assert "sbatch queued it" in output
    assert LogDir.of(slurm_tmp, queued[0]).driver_log.read_text() == "trained\n"


# Catches the warning signal, saves step_7 and exits 0, as a trainer that checkpoints before its time
# limit does. Run again, it resumes and says the training is over.
SIGNALLED_DRIVER = textwrap.dedent(
    """
    import os, pathlib, signal, sys, time
    checkpoints, running = map(pathlib.Path, sys.argv[1:3])
    resume = os.environ.get("RAYSUB_RESUME_FROM")
    if resume:
        print("resumed from", resume, flush=True)
        pathlib.Path(os.environ["RAYSUB_FINISHED"]).touch()
        sys.exit(0)

    def save(signum, frame):
        (checkpoints / "step_7").mkdir()
        (checkpoints / "step_7" / "training_info.json").write_text("{}")
        print("saved step_7 on the warning signal", flush=True)
        sys.exit(0)

    signal.signal(signal.SIGUSR1, save)
    running.touch()
    time.sleep(3600)
    """
)


def test_a_driver_that_saves_on_the_warning_signal_and_exits_0_is_resubmitted_and_resumes(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    checkpoints, running, script = checkpointing_job(
        minicluster, slurm_tmp, SIGNALLED_DRIVER, "--forward-signal", "USR1"
    )
    with watching(
        minicluster, script, "--checkpoint-dir", str(checkpoints), "--max-resubmissions", "1"
    ) as watch:
        wait_for(running)
        minicluster.run("scancel", "--batch", "--signal=USR1", str(current_job(script)))
        output = finish(watch)
    assert watch.returncode == 0, output
    _, second = job_ids(script)
    assert [entry["outcome"] for entry in history(script)] == ["INTERRUPTED", "COMPLETED"], output
    logs = LogDir.of(slurm_tmp, second)
    assert logs.driver_log.read_text() == f"resumed from {checkpoints / 'step_7'}\n", output
    assert_clean(minicluster, second)
