"""A job's secrets and the files it trusts stay its user's alone at real sites (docs/security.md): a job
submitted by a second, unprivileged user from a directory with a default group ACL, under umask 002, or
after another user planted a temp dir for it in /tmp, runs with nothing of them open to the group or to
others; raysub attach and attach.sh refuse a signal file that someone else could have written."""

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from raysub import protocol
from raysub.protocol import LogDir, file_table
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


def user_dir(user: users.User, acl: bool = False) -> Path:
    workdir = Path(tempfile.mkdtemp(prefix="raysub-submit-", dir="/tmp"))
    os.chown(workdir, user.uid, user.gid)
    workdir.chmod(0o2770 if acl else 0o755)
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
        assert_clean_except(minicluster, job_id)
    finally:
        shutil.rmtree(planted, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)


def assert_clean_except(cluster: MiniCluster, job_id: int) -> None:
    """Nothing of the job runs on any node (its planted temp dir is another user's, and stays)."""
    left = cluster.wait_no_leftovers()
    assert left == [], left
    assert not list(Path("/tmp").glob("rs-??????")), "the job's own temp dirs were not removed"
