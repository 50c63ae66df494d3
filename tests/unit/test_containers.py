"""pyxis containers: the options of every step the batch script starts (recorded by the fake srun), for
each combination of job image, mounts, workdir and sandbox image; the head's container name; the one
list of options that raysub attach and attach.sh both use; and the removal of the head's container."""

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from raysub import protocol
from raysub.attach import command as attach_command
from raysub.job.render import render
from raysub.jobs import Job
from raysub.spec import JobSpec, Sandbox, SandboxNodes
from tests.support.batch import BatchRun, Step, environment, job_spec, recorded_steps, run, run_batch_script

JOB_ID = str(os.getpid())
IMAGE = "nvcr.io#nvidia/pytorch:25.01-py3"
SANDBOX_IMAGE = "docker://python:3.12-slim"
IMAGE_OPTION = "--container-image="
NAME_OPTION = protocol.CONTAINER_NAME_OPTION


def spec_of(**overrides: object) -> JobSpec:
    return job_spec("rsc", **overrides)


def sandbox(nodes: SandboxNodes = "1", container: str | None = None) -> Sandbox:
    return Sandbox(command="sleep 1", port=9000, container=container, nodes=nodes, timeout=60)


def run_job(tmp_path: Path, spec: JobSpec, env: dict[str, str] | None = None) -> BatchRun:
    try:
        return run_batch_script(tmp_path, spec, {"HOME": str(tmp_path), **(env or {})}, JOB_ID)
    finally:
        shutil.rmtree(f"/tmp/rsc{JOB_ID}", ignore_errors=True)


def mounts(log_dir: Path, extra: str = "", submit_dir: bool = True) -> str:
    """The mounts of a step: the submit directory first (with the job's image and no --container-workdir),
    then LOG_DIR, then --container-mounts."""
    submit = log_dir.parent.parent  # <submit dir>/runs/<jobid>-logs
    first = f"{submit}:{submit}," if submit_dir else ""
    return f"--container-mounts={first}{log_dir}:{log_dir}{extra}"


def workdir(log_dir: Path) -> str:
    return f"--container-workdir={log_dir.parent.parent}"


# For each combination: the container options each step must carry, but the head's name (checked apart).
Expected = Callable[[Path], dict[str, list[str]]]
COMBINATIONS: dict[str, tuple[dict[str, object], Expected]] = {
    "bare metal": ({}, lambda d: {"head.sh": [], "worker.sh": []}),
    "image": (
        {"container_image": IMAGE},
        lambda d: {
            "head.sh": [IMAGE_OPTION + IMAGE, mounts(d), workdir(d)],
            "worker.sh": [IMAGE_OPTION + IMAGE, mounts(d), workdir(d)],
        },
    ),
    "image, mounts and workdir": (
        {
            "container_image": IMAGE,
            "container_mounts": "/lustre:/lustre,/d:/data:ro",
            "container_workdir": "/w s",
        },
        lambda d: {
            step: [
                IMAGE_OPTION + IMAGE,
                mounts(d, ",/lustre:/lustre,/d:/data:ro", submit_dir=False),
                "--container-workdir=/w s",
            ]
            for step in ("head.sh", "worker.sh")
        },
    ),
    "image, sandbox on the head in it": (
        {"container_image": IMAGE, "sandbox": sandbox()},
        lambda d: {
            step: [IMAGE_OPTION + IMAGE, mounts(d), workdir(d)]
            for step in ("head.sh", "worker.sh", "sandbox.sh")
        },
    ),
    "image, sandbox image on every node": (
        {"container_image": IMAGE, "sandbox": sandbox("all", SANDBOX_IMAGE)},
        lambda d: {
            "head.sh": [IMAGE_OPTION + IMAGE, mounts(d), workdir(d)],
            "worker.sh": [IMAGE_OPTION + IMAGE, mounts(d), workdir(d)],
            "sandbox.sh": [IMAGE_OPTION + SANDBOX_IMAGE, mounts(d, submit_dir=False)],
        },
    ),
    "sandbox image only": (
        {"sandbox": sandbox("all", SANDBOX_IMAGE)},
        lambda d: {
            "head.sh": [],
            "worker.sh": [],
            "sandbox.sh": [IMAGE_OPTION + SANDBOX_IMAGE, mounts(d, submit_dir=False)],
        },
    ),
}


def container_options(step: Step) -> list[str]:
    return [a for a in step.options("--container-") if not a.startswith(NAME_OPTION)]


@pytest.mark.parametrize("combination", list(COMBINATIONS))
def test_every_step_carries_exactly_its_own_image(tmp_path: Path, combination: str) -> None:
    overrides, expected = COMBINATIONS[combination]
    spec = spec_of(**overrides)
    job = run_job(tmp_path, spec)
    want = expected(job.log_dir.path)
    assert sorted(job.steps) == sorted(want)
    for script, options in want.items():
        assert container_options(job.steps[script]) == options, script
        assert len(job.steps[script].options(IMAGE_OPTION)) == len(options[:1])
    # Only the head's container is named (workers' and sandboxes' are unnamed, removed with their step).
    names = {script: step.options(NAME_OPTION) for script, step in job.steps.items()}
    assert {script for script, name in names.items() if name} == (
        {"head.sh"} if spec.container_image else set()
    )
    published = job.log_dir.file(protocol.CONTAINER_ARGS)
    if spec.container_image:
        assert published.read_text().splitlines() == job.steps["head.sh"].options("--container-")
    else:
        assert not published.exists()


def test_the_head_container_name_is_this_attempts_own(tmp_path: Path) -> None:
    spec = spec_of(container_image=IMAGE, sandbox=sandbox())
    names = []
    for _ in range(2):  # the same job id twice, as after a controller reset: a new name
        job = run_job(tmp_path, spec)
        (name,) = job.steps["head.sh"].options(NAME_OPTION)
        names.append(name.removeprefix(NAME_OPTION))
    canary = job.log_dir.file(protocol.CANARY).read_text().strip()
    assert names[1] == protocol.CONTAINER_NAME_PREFIX + canary
    assert names[1].startswith(f"{protocol.CONTAINER_NAME_PREFIX}{JOB_ID}-0-")
    assert names[0] != names[1]


def test_attach_sh_and_raysub_attach_run_the_same_srun(tmp_path: Path) -> None:
    spec = spec_of(container_image=IMAGE, container_mounts="/lustre:/lustre", command=())
    job = run_job(tmp_path, spec)
    logs = job.log_dir
    logs.started_ray_head.write_text("127.0.0.1:6379\n")
    srun_dir = tmp_path / "attach"
    srun_dir.mkdir()
    env = {**job.steps["head.sh"].env, "FAKE_SRUN_DIR": str(srun_dir)}
    for argv in ([], ["ray", "status"]):
        shutil.rmtree(srun_dir)
        srun_dir.mkdir()
        done = run(["bash", str(logs.file(protocol.ATTACH_SCRIPT)), *argv], env)
        assert done.returncode == 0, done.stderr
        (step,) = recorded_steps(srun_dir)
        python = attach_command(Job(JOB_ID, 0, logs), None, None, argv)
        assert ["srun", *step.argv] == python
        assert mounts(logs.path, ",/lustre:/lustre") in python
        assert any(a.startswith(NAME_OPTION) for a in python)
    # On a worker's node a new container from the job's image: same image and mounts, no name.
    worker = attach_command(Job(JOB_ID, 0, logs), None, 0, [])
    assert "--nodelist=nodeB" in worker
    assert [a for a in worker if a.startswith("--container-")] == [
        IMAGE_OPTION + IMAGE,
        mounts(logs.path, ",/lustre:/lustre"),
        workdir(logs.path),
    ]


def test_every_step_takes_the_users_srun_options_and_leaves_home_out_when_asked(tmp_path: Path) -> None:
    """--mpi and --srun-arg go to every step (ray.sub's --mpi=pmix); --no-container-mount-home to every
    container, the sandbox's own image's too, and to raysub attach's (it reads the head's options)."""
    spec = spec_of(
        container_image=IMAGE,
        container_mount_home=False,
        sandbox=sandbox("all", SANDBOX_IMAGE),
        mpi="pmix",
        srun_args=("--cpu-bind=none", "--network=single_node_vni"),
    )
    job = run_job(tmp_path, spec)
    assert sorted(job.steps) == ["head.sh", "sandbox.sh", "worker.sh"]
    for script, step in job.steps.items():
        assert step.options("--mpi") == ["--mpi=pmix"], script
        assert step.options("--cpu-bind") + step.options("--network") == [
            "--cpu-bind=none",
            "--network=single_node_vni",
        ], script
        assert step.options("--no-container-mount-home") == ["--no-container-mount-home"], script
    logs = job.log_dir
    logs.started_ray_head.write_text("127.0.0.1:6379\n")
    assert "--no-container-mount-home" in attach_command(Job(JOB_ID, 0, logs), None, 0, [])


def test_without_those_options_steps_carry_neither(tmp_path: Path) -> None:
    job = run_job(tmp_path, spec_of(container_image=IMAGE))
    for script, step in job.steps.items():
        assert step.options("--mpi") == step.options("--no-container-mount-home") == [], script


@pytest.mark.parametrize("scope", ["global", "job", None])
def test_the_head_container_is_removed_under_global_scope(tmp_path: Path, scope: str | None) -> None:
    removed = tmp_path / "removed"
    env = {"FAKE_ENROOT_REMOVED": str(removed), **({"FAKE_ENROOT_SCOPE": scope} if scope else {})}
    job = run_job(tmp_path, spec_of(container_image=IMAGE), env)
    (name,) = job.steps["head.sh"].options(NAME_OPTION)
    if scope == "global":
        assert removed.read_text() == f"pyxis_{name.removeprefix(NAME_OPTION)}\n"
    else:  # pyxis' own epilog removes job-scoped containers; other jobs' are never touched
        assert not removed.exists()


@pytest.mark.parametrize(
    ("log_dir", "submit_dir"), [("runs,1", "submit"), ("a:b", "submit"), ("{tmp}/logs", "sub,mit")]
)
def test_a_directory_pyxis_cannot_mount_is_refused(tmp_path: Path, log_dir: str, submit_dir: str) -> None:
    """LOG_DIR, and the submit directory that the containers start in, are mounted at their own paths."""
    spec = spec_of(container_image=IMAGE, log_dir=log_dir.format(tmp=tmp_path))
    submit = tmp_path / submit_dir
    submit.mkdir()
    script = submit / "job.sub"
    script.write_text(render(spec))
    env = {**environment(spec, JOB_ID, tmp_path), "HOME": str(tmp_path), "SLURM_SUBMIT_DIR": str(submit)}
    done = run(["bash", str(script)], env, submit)
    assert done.returncode == 1
    assert "which pyxis --container-mounts cannot take; pass --log-dir or --container-workdir" in done.stderr
    assert not list(tmp_path.glob("*.argv")), "no step may start"
