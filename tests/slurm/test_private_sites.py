"""A job's secrets and the files it trusts stay its user's alone at real sites (docs/security.md): a job
submitted by a second, unprivileged user from a directory with a default group ACL, under umask 002, or
after another user planted a temp dir for it in /tmp, runs with nothing of them open to the group or to
others; raysub attach and attach.sh refuse a signal file that someone else could have written."""

import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from raysub import protocol
from raysub.protocol import file_table
from raysub.protocol.logdir import LogDir
from tests.support import users
from tests.support.minicluster import MiniCluster
from tests.support.raysub_jobs import assert_clean

pytestmark = pytest.mark.slurm

TWO_NODES = ["--nodes", "2", "--gpus-per-node", "0"]
DRIVER = "import ray; ray.init(); print('alive', sum(n['Alive'] for n in ray.nodes()))"
# What must exist in a finished job's LOG_DIR, so that a check of what exists is never vacuous.
EXPECTED = [
    protocol.AUTH_TOKEN,
    protocol.STAGE_DIR,
    protocol.HEAD_SCRIPT,
    protocol.STARTED_RAY_HEAD,
    protocol.WORKER_UNITS,
    protocol.NODE_MAP,
    protocol.CANARY,
    f"{protocol.NODE_PYTHON_DIR}/raysub/",
]


def job_paths(logs: LogDir, private: bool) -> list[Path]:
    """Every path of LOG_DIR that docs/security.md's table (file_table.FILES) says is the owner's alone
    (``private``) or a log, with the directories of the private ones and what they hold."""
    paths = []
    for doc in file_table.FILES:
        if doc.private != private:
            continue
        for name in doc.files:
            found = sorted(logs.path.glob(re.sub(r"<[^>]+>", "*", name.rstrip("/"))))
            for path in found:
                paths.append(path)
                if private and path.parent != logs.path:
                    paths.append(path.parent)
                if private and path.is_dir():  # what raysub ships (Python's own __pycache__ is behind it)
                    paths += [p for p in path.rglob("*") if "__pycache__" not in p.parts]
    return sorted(set(paths))


@pytest.fixture(scope="module")
def site(minicluster: MiniCluster) -> Iterator[tuple[users.User, users.User, Path]]:
    """The job's user, the other user, and the bin directory of a Python they can run."""
    if shutil.which("setfacl") is None or shutil.which("useradd") is None:
        pytest.fail("needs setfacl (Debian's acl) and useradd (passwd); scripts/setup installs them")
    alice, mallory = users.ensure_user(users.JOB_USER), users.ensure_user(users.OTHER_USER)
    where = Path(tempfile.mkdtemp(prefix="raysub-site-", dir="/tmp"))
    where.chmod(0o755)
    try:
        yield alice, mallory, users.user_python(where)
    finally:
        shutil.rmtree(where, ignore_errors=True)
        users.remove_users()


def submit_as(
    cluster: MiniCluster,
    user: users.User,
    bin_dir: Path,
    workdir: Path,
    render: list[str],
    umask: str = "022",
) -> tuple[int, LogDir]:
    """``raysub render ... > job.sub && sbatch job.sub`` as ``user`` in ``workdir``."""
    conf = cluster.env["SLURM_CONF"]
    script = users.run_as(user, ["raysub", "render", *render], workdir, bin_dir, conf, umask).stdout
    (workdir / "job.sub").write_text(script)
    os.chown(workdir / "job.sub", user.uid, user.gid)
    out = users.run_as(user, ["sbatch", "--parsable", "--time=5", "job.sub"], workdir, bin_dir, conf, umask)
    job_id = int(out.stdout.strip().split(";")[0])
    return job_id, LogDir.of(workdir, job_id)


def user_dir(user: users.User, acl: bool = False, mode: int = 0o755) -> Path:
    """A submit directory of ``user``'s. With ``acl``, a project directory the group may write, with the
    sticky bit (without it a job does not start there: see test_a_shared_submit_directory_*)."""
    workdir = Path(tempfile.mkdtemp(prefix="raysub-submit-", dir="/tmp"))
    os.chown(workdir, user.uid, user.gid)
    workdir.chmod(0o3770 if acl else mode)
    if acl:  # a project directory: the group may do anything, and so, by default, in what is made in it
        entry = f"g:{users.GROUP}:rwx"
        subprocess.run(["setfacl", "-m", entry, "-d", "-m", entry, str(workdir)], check=True)
    return workdir


def open_to_others(path: Path, owner: int) -> list[str]:
    """What lets anyone but ``owner`` at ``path``: the owner, the mode's group and other bits, and every
    ACL entry but the owner's that grants anything once the mask applies (getfacl's #effective)."""
    found = []
    st = path.lstat()
    if st.st_uid != owner:
        found.append(f"owned by uid {st.st_uid}")
    if st.st_mode & 0o077:
        found.append(f"mode {st.st_mode & 0o7777:04o}")
    acl = subprocess.run(["getfacl", "-cp", str(path)], check=True, text=True, capture_output=True).stdout
    for line in acl.splitlines():
        if not line or line.startswith(("user::", "mask::", "default:")):
            continue
        entry, _, effective = line.partition("#effective:")
        perms = effective.strip() or entry.split()[0].rsplit(":", 1)[1]
        if perms != "---":
            found.append(f"ACL {entry.split()[0]}")
    return found


def assert_private(logs: LogDir, owner: int) -> None:
    """Nothing private of the job's is open to anyone else; no log is writable by anyone else."""
    paths = job_paths(logs, private=True)
    for name in EXPECTED:
        assert logs.file(name.rstrip("/")) in paths, name
    problems = {str(p.relative_to(logs.path)): found for p in paths if (found := open_to_others(p, owner))}
    assert problems == {}
    for log in job_paths(logs, private=False):
        assert log.stat().st_mode & 0o022 == 0, log


def wait_done(cluster: MiniCluster, job_id: int, logs: LogDir, workdir: Path) -> None:
    result = cluster.wait(job_id)
    out = next(workdir.glob(f"slurm-{job_id}.out"), None)
    report = (out.read_text() if out else "") + (logs.head_log.read_text() if logs.head_log.exists() else "")
    assert (result.state, result.exit_code) == ("COMPLETED", 0), report
    assert "alive 2\n" in logs.driver_log.read_text()


def test_a_default_group_acl_on_the_submit_directory_reaches_none_of_the_jobs_secrets(
    minicluster: MiniCluster, site: tuple[users.User, users.User, Path]
) -> None:
    alice, _, bin_dir = site
    workdir = user_dir(alice, acl=True)
    # The job index goes under the home directory, which a default ACL may reach too.
    shutil.rmtree(alice.home / ".local", ignore_errors=True)
    subprocess.run(["setfacl", "-d", "-m", f"g:{users.GROUP}:rwx", str(alice.home)], check=True)
    try:
        job_id, logs = submit_as(
            minicluster, alice, bin_dir, workdir, [*TWO_NODES, "--", "python", "-c", DRIVER]
        )
        wait_done(minicluster, job_id, logs, workdir)
        assert_private(logs, alice.uid)
        assert logs.file(protocol.ENDED).exists() and logs.file(protocol.DRIVER_EXIT_CODE).exists()
        index = alice.home / protocol.STATE_HOME_DEFAULT / protocol.JOB_INDEX_DIR
        assert (open_to_others(index, alice.uid), open_to_others(index / protocol.JOB_INDEX, alice.uid)) == (
            [],
            [],
        )
        # The logs: the group may read them (--log-mode 0750), never write.
        for name in (protocol.HEAD_LOG, protocol.DRIVER_LOG, protocol.TIMELINE):
            assert logs.file(name).stat().st_mode & 0o7777 == 0o640, name
        assert_clean(minicluster, job_id)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def test_under_umask_002_nothing_trusted_is_group_writable_and_attach_refuses_a_tampered_file(
    minicluster: MiniCluster, site: tuple[users.User, users.User, Path]
) -> None:
    alice, mallory, bin_dir = site
    conf = minicluster.env["SLURM_CONF"]
    workdir = user_dir(alice)
    job_id, logs = submit_as(
        minicluster, alice, bin_dir, workdir, ["--nodes", "2", "--gpus-per-node", "0"], "002"
    )
    try:
        deadline = time.monotonic() + 90
        while "cluster ready" not in (logs.head_log.read_text() if logs.head_log.exists() else ""):
            assert time.monotonic() < deadline, "the interactive cluster did not come up"
            time.sleep(0.2)
        assert_private(logs, alice.uid)
        assert logs.file(protocol.ATTACH_SCRIPT).exists()
        attach = ["raysub", "attach", str(job_id), "--", "hostname"]
        assert users.run_as(alice, attach, workdir, bin_dir, conf, "002").stdout.strip() == "node1"
        # A group member who could write nodes.tsv could send attach elsewhere: refused, naming it.
        node_map = logs.file(protocol.NODE_MAP)
        node_map.chmod(0o620)
        refused = users.run_as(alice, attach, workdir, bin_dir, conf, check=False)
        assert refused.returncode == 1
        assert f"refusing {node_map}" in refused.stderr and "Traceback" not in refused.stderr
        node_map.chmod(0o600)
        # attach.env, which attach.sh reads, rewritten by another user: refused, naming it.
        attach_env = logs.file(protocol.ATTACH_ENV)
        os.chown(attach_env, mallory.uid, mallory.gid)
        helper = ["bash", str(logs.file(protocol.ATTACH_SCRIPT)), "hostname"]
        refused = users.run_as(alice, helper, workdir, bin_dir, conf, check=False)
        assert refused.returncode == 1
        assert f"refusing {attach_env}" in refused.stderr
        os.chown(attach_env, alice.uid, alice.gid)
        assert users.run_as(alice, helper, workdir, bin_dir, conf).stdout.strip() == "node1"
    finally:
        minicluster.run("scancel", str(job_id))
        minicluster.wait(job_id)
        shutil.rmtree(workdir, ignore_errors=True)
    assert_clean(minicluster, job_id)


def test_a_temp_dir_another_user_made_for_the_next_job_is_not_used(
    minicluster: MiniCluster, site: tuple[users.User, users.User, Path]
) -> None:
    alice, mallory, bin_dir = site
    held = minicluster.run("sbatch", "--parsable", "--hold", "--wrap=true").stdout.strip()
    minicluster.run("scancel", held)
    next_id = int(held.split(";")[0]) + 1
    planted = Path(f"/tmp/rs-{next_id}")  # the default --ray-temp-dir's per-job directory
    for path in (planted, planted / "node1", planted / "node2"):
        path.mkdir(mode=0o777)
        path.chmod(0o777)
        (path / protocol.LOCAL_HEAD_ADDRESS).write_text("198.18.0.99:6379\n")
    for path in [planted, *planted.rglob("*")]:
        os.chown(path, mallory.uid, mallory.gid)
    workdir = user_dir(alice)
    try:
        job_id, logs = submit_as(
            minicluster, alice, bin_dir, workdir, [*TWO_NODES, "--", "python", "-c", DRIVER]
        )
        assert job_id == next_id
        wait_done(minicluster, job_id, logs, workdir)
        replaced = [e for e in logs.timeline() if e.phase == protocol.PHASE_TEMP_DIR_REPLACED]
        assert sorted(e.node for e in replaced) == ["node1", "node2"]
        assert {e.detail for e in replaced} == {str(planted)}
        assert "198.18.0.99" not in logs.head_log.read_text()
        # What was planted is as it was: nothing of the job went there.
        assert sorted(p.name for p in planted.iterdir()) == ["node1", "node2", protocol.LOCAL_HEAD_ADDRESS]
        assert_clean_except(minicluster, logs)
    finally:
        shutil.rmtree(planted, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)


def assert_clean_except(cluster: MiniCluster, logs: LogDir) -> None:
    """Nothing of the job runs on any node (its planted temp dir is another user's, and stays), and the
    private temp dirs its nodes made instead, which their logs name, are gone. Only those: a bats test
    beside this one makes /tmp/rs-XXXXXX directories of its own (tests/bats/node_scripts.bats)."""
    left = cluster.wait_no_leftovers()
    assert left == [], left
    logs_text = "".join(
        path.read_text(errors="replace") for path in [logs.head_log, *logs.path.glob("nodes/*.log")]
    )
    made = re.findall(r"; using (/tmp/rs-[A-Za-z0-9]{6}) instead", logs_text)
    assert len(made) == 2, logs_text
    assert not [path for path in made if Path(path).exists()], "the job's own temp dirs were not removed"


# The driver of a job with --driver-restarts: each run waits until the test says the group member has
# had her go at the job's LOG_DIR (a file named after the run in the submit directory), then the first
# run fails (a restart: the checkpoint finder and the clean-up run) and the second ends the job (every
# node keeps its Ray logs as it leaves).
RESTARTING = (
    "import pathlib, sys, time\n"
    "run = 'second' if pathlib.Path('first-run').exists() else 'first'\n"
    "pathlib.Path(run + '-run').touch()\n"
    "deadline = time.time() + 120\n"
    "while not pathlib.Path(run + '-swapped').exists() and time.time() < deadline:\n"
    "    time.sleep(0.2)\n"
    "print(run, 'run', flush=True)\n"
    "sys.exit(1 if run == 'first' else 0)\n"
)


def swap_log_dir(
    cluster: MiniCluster, mallory: users.User, bin_dir: Path, workdir: Path, job_id: int
) -> None:
    """As the group member: move ``<job_id>-logs`` away if it is there, and put her own in its place,
    every script and node program of a job in it writing her mark (``id -u``) into /tmp."""
    mark = PWNED
    py = f"import os; open({str(mark)!r}, 'a').write(str(os.getuid()) + '\\n')\n"
    sh = f"id -u >>{mark}\n"
    plant = {
        **{f"{protocol.NODE_PYTHON_DIR}/raysub/{name}": py for name in ("__init__.py", "node/__init__.py")},
        **{
            f"{protocol.NODE_PYTHON_DIR}/raysub/job/programs/{p.name}": py for p in NODE_PROGRAMS.glob("*.py")
        },
        **{f"{protocol.NODE_PYTHON_DIR}/driver_gate/sitecustomize.py": py},
        **{name: sh for name in SCRIPTS},
    }
    target = f"{job_id}{protocol.LOG_DIR_SUFFIX}"
    lines = ["set -e", f"cd {workdir}", f"if [ -e {target} ]; then mv {target} {target}.away; fi"]
    for name, text in plant.items():
        lines.append(f"mkdir -p {target}/{Path(name).parent}")
        lines.append(f"printf %s {shlex.quote(text)} >{target}/{name}")
    lines.append(f"chmod -R a+rwX {target}")
    conf = cluster.env["SLURM_CONF"]
    users.run_as(mallory, ["bash", "-c", "\n".join(lines)], workdir, bin_dir, conf)


PWNED = Path("/tmp/raysub-pwned")


def private_job_report(workdir: Path, logs: LogDir) -> str:
    """How a job whose logs are not in its submit directory ended."""
    job_id = logs.path.name.removesuffix(protocol.LOG_DIR_SUFFIX)
    found = [workdir / f"slurm-{job_id}.out", logs.ended, logs.file(protocol.TIMELINE), logs.head_log]
    return "\n".join(f"--- {p}\n{p.read_text(errors='replace')}" for p in found if p.exists())


NODE_PROGRAMS = Path(__file__).parents[2] / "raysub" / "node"
SCRIPTS = (
    protocol.HEAD_SCRIPT,
    protocol.WORKER_SCRIPT,
    protocol.DRIVER_SCRIPT,
    protocol.SHARED_BASH,
    protocol.NODE_BASH,
)


def test_a_shared_submit_directory_is_refused_and_a_private_base_keeps_a_swap_out(
    minicluster: MiniCluster, site: tuple[users.User, users.User, Path]
) -> None:
    """In a 2770 project directory (the group may rename anything in it) a job does not start; with
    --private-log-dir it runs from there, and the group member's own <jobid>-logs, put in place at the
    first driver restart and again before the job ends, never runs as the job's user."""
    alice, mallory, bin_dir = site
    conf = minicluster.env["SLURM_CONF"]
    workdir = user_dir(alice, mode=0o2770)
    private = alice.home / "raysub-logs"
    checkpoints = alice.home / "ckpt"
    PWNED.unlink(missing_ok=True)
    render = [*TWO_NODES, "--driver-restarts", "2", "--checkpoint-dir", str(checkpoints)]
    try:
        users.run_as(alice, ["mkdir", "-p", str(checkpoints)], workdir, bin_dir, conf)
        refused, _ = submit_as(minicluster, alice, bin_dir, workdir, [*render, "--", "python", "-c", "1"])
        result = minicluster.wait(refused)
        out = (workdir / f"slurm-{refused}.out").read_text()
        assert (result.state, result.exit_code) == ("FAILED", 1), out
        said = f"the job does not start: {workdir} (mode 2770) lets group {users.GROUP} rename what it holds"
        assert f"raysub: {said}" in out
        assert not list(workdir.glob(f"{refused}*{protocol.LOG_DIR_SUFFIX}"))

        job_id, _ = submit_as(
            minicluster,
            alice,
            bin_dir,
            workdir,
            [*render, "--private-log-dir", str(private), "--", "python", "-c", RESTARTING],
        )
        logs = LogDir.of(private, job_id)
        for run in ("first", "second"):
            deadline = time.monotonic() + 120
            while not (workdir / f"{run}-run").exists():
                if not minicluster.is_queued(job_id) or time.monotonic() > deadline:
                    pytest.fail(f"no {run} run of the driver\n{private_job_report(workdir, logs)}")
                time.sleep(0.2)
            swap_log_dir(minicluster, mallory, bin_dir, workdir, job_id)
            (workdir / f"{run}-swapped").touch()
        result = minicluster.wait(job_id)
        out = (workdir / f"slurm-{job_id}.out").read_text()
        assert (result.state, result.exit_code) == ("COMPLETED", 0), private_job_report(workdir, logs)
        assert f"this job's logs go under --private-log-dir {private} instead" in out
        said = "".join(p.read_text() for p in logs.path.glob("ray-driver*.log"))
        assert ("first run\n" in said, "second run\n" in said) == (True, True), said
        restarts = [e for e in logs.timeline() if e.phase == protocol.PHASE_DRIVER_RESTART]
        assert len(restarts) == 1, restarts
        assert not PWNED.exists(), f"the group member's code ran as uid {PWNED.read_text()}"
        assert_private(logs, alice.uid)
        assert_clean(minicluster, job_id)
    finally:
        PWNED.unlink(missing_ok=True)
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(private, ignore_errors=True)
