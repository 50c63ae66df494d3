"""A base for LOG_DIR that someone else could swap is refused (docs/security.md, "A shared submit
directory"): the batch script, run here with fake srun and scontrol, does not start a job whose base,
or a directory above it, lets anyone but the job's user (or root) rename what it holds, and with
--private-log-dir puts the logs there instead, saying where. raysub.log_base, which raysub submit asks
before sbatch, gives the same verdict in the same words. The tests run as root: "someone else" is a uid
of nobody's and the group bits."""

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from raysub import protocol, submit
from raysub.job.render import render
from raysub.log_base import swappable
from raysub.protocol.logdir import LogDir
from tests.support import batch

JOB_ID = "4242"
STRANGER = 12345  # a uid nobody has: "another user"
USER = 12346  # another uid of nobody's, the job's user where root would not do
REFUSED = "raysub: the job does not start: "

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the tests chown to another user")


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Path]:
    """A directory under which the tests build bases: root's, 0755, as are all above it (pytest's 0700)."""
    where = tmp_path / "site"
    where.mkdir(mode=0o755)
    yield where
    shutil.rmtree(where, ignore_errors=True)


def run_job(
    submit: Path, tmp_path: Path, umask: int = 0o022, user: int | None = None, **overrides: object
) -> subprocess.CompletedProcess[str]:
    """Render a small job (its --log-dir and --private-log-dir as given) and run its batch script in
    ``submit``, as Slurm would, as root or as uid ``user``; every step returns at once."""
    spec = batch.job_spec("rsb", **{"log_dir": None, **overrides})
    job = tmp_path / "job.sub"
    job.write_text(render(spec))
    srun_dir = tmp_path / "srun"
    shutil.rmtree(srun_dir, ignore_errors=True)
    srun_dir.mkdir()
    argv = ["bash", str(job)]
    if user is not None:
        os.chown(srun_dir, user, user)
        argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *argv]
    env = {**batch.environment(spec, JOB_ID, srun_dir), "SLURM_SUBMIT_DIR": str(submit)}
    old = os.umask(umask)
    try:
        return batch.run(argv, env, submit)
    finally:
        os.umask(old)
        shutil.rmtree(f"/tmp/rsb{JOB_ID}", ignore_errors=True)


def started(done: subprocess.CompletedProcess[str], base: Path) -> bool:
    """The job made its LOG_DIR under ``base`` and got as far as starting its steps (and the submit host
    finds the base safe too)."""
    logs = LogDir.of(base, JOB_ID)
    return REFUSED not in done.stderr and logs.ended.exists() and swappable(base) is None


def refused(done: subprocess.CompletedProcess[str], base: Path, why: str) -> bool:
    """The job did not start, for ``why``, which the submit host says of ``base`` too."""
    return done.returncode == 1 and f"{REFUSED}{why}" in done.stderr and swappable(base) == why


def project_dir(where: Path, mode: int) -> Path:
    path = where / "project"
    path.mkdir()
    path.chmod(mode)
    return path


@pytest.mark.parametrize("mode", [0o2770, 0o0775, 0o0757, 0o2777])
def test_a_base_others_may_write_without_the_sticky_bit_is_refused_naming_it(
    site: Path, tmp_path: Path, mode: int
) -> None:
    submit = project_dir(site, mode)
    done = run_job(submit, tmp_path)
    who = "anyone" if mode & 0o002 else "group root"
    assert refused(done, submit, f"{submit} (mode {mode:04o}) lets {who} rename what it holds")
    assert "--private-log-dir DIR" in done.stderr and "Traceback" not in done.stderr
    assert list(submit.iterdir()) == []  # no LOG_DIR, no latest link


@pytest.mark.parametrize("mode", [0o0755, 0o0700, 0o3770, 0o1777])
def test_a_base_only_its_user_may_change_or_a_sticky_one_is_taken(
    site: Path, tmp_path: Path, mode: int
) -> None:
    submit = project_dir(site, mode)
    assert started(run_job(submit, tmp_path), submit)


def test_a_directory_above_the_base_counts_too(site: Path, tmp_path: Path) -> None:
    project = project_dir(site, 0o2770)
    mine = project / "alice"
    mine.mkdir(mode=0o755)  # the user's own, but its parent lets the group rename it
    done = run_job(mine, tmp_path)
    assert refused(done, mine, f"{project} (mode 2770) lets group root rename what it holds")
    assert list(mine.iterdir()) == []


def test_a_directory_of_another_users_is_refused_whatever_its_mode(site: Path, tmp_path: Path) -> None:
    theirs = project_dir(site, 0o755)
    os.chown(theirs, STRANGER, 0)
    mine = theirs / "mine"
    mine.mkdir(mode=0o700)
    done = run_job(mine, tmp_path)
    assert refused(done, mine, f"{theirs} belongs to uid {STRANGER}, who may rename what it holds")


def test_a_link_is_judged_by_where_it_stands_and_where_it_leads(site: Path, tmp_path: Path) -> None:
    safe = site / "safe"
    safe.mkdir(mode=0o755)
    project = project_dir(site, 0o2770)
    # A link in a safe directory to a swappable one: the resolved path is at fault.
    (safe / "to-project").symlink_to(project)
    done = run_job(safe, tmp_path, log_dir=str(safe / "to-project"))
    why = f"{project} (mode 2770) lets group root rename what it holds"
    assert refused(done, safe / "to-project", why)
    # A link to a safe directory, standing in a swappable one: the group could replace the link.
    (project / "to-safe").symlink_to(safe)
    done = run_job(safe, tmp_path, log_dir=str(project / "to-safe"))
    assert refused(done, project / "to-safe", why)
    assert not LogDir.of(safe, JOB_ID).path.exists()


def test_private_log_dir_takes_the_logs_and_says_where(site: Path, tmp_path: Path) -> None:
    submit = project_dir(site, 0o2770)
    private = site / "home" / "raysub-logs"  # made by the job, its user's alone
    done = run_job(submit, tmp_path, private_log_dir=str(private))
    assert started(done, private), done.stderr[-2000:]
    assert (
        f"raysub: {submit} (mode 2770) lets group root rename what it holds: this job's logs go "
        in done.stderr
    )
    assert f"under --private-log-dir {private} instead" in done.stderr
    assert f"logs in {private}/{JOB_ID}-logs" in done.stdout
    assert list(submit.iterdir()) == []
    assert private.stat().st_mode & 0o777 == 0o700


def test_private_log_dir_is_not_used_when_the_base_is_safe(site: Path, tmp_path: Path) -> None:
    submit = project_dir(site, 0o755)
    private = site / "private"
    done = run_job(submit, tmp_path, private_log_dir=str(private))
    assert started(done, submit)
    assert not private.exists()


def test_a_private_log_dir_others_may_swap_is_refused_too(site: Path, tmp_path: Path) -> None:
    submit = project_dir(site, 0o2770)
    shared = site / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    done = run_job(submit, tmp_path, private_log_dir=str(shared / "logs"))
    assert done.returncode == 1
    assert (
        f"{REFUSED}{shared} (mode 0777) lets anyone rename what it holds (--private-log-dir)" in done.stderr
    )


def test_a_base_the_job_makes_under_umask_002_is_its_users_alone(site: Path, tmp_path: Path) -> None:
    submit = project_dir(site, 0o755)
    done = run_job(submit, tmp_path, umask=0o002, log_dir="runs/today")
    assert started(done, submit / "runs" / "today"), done.stderr[-2000:]
    assert [(submit / p).stat().st_mode & 0o777 for p in ("runs", "runs/today")] == [0o755, 0o755]


def test_submit_says_so_before_sbatch_and_follows_the_private_base(site: Path) -> None:
    submit_dir = project_dir(site, 0o2770)
    spec = batch.job_spec("rsb", log_dir=None)
    with pytest.raises(submit.SubmitError, match=r"would not start: .* \(mode 2770\) lets group root rename"):
        submit.log_base(spec, submit_dir)
    private = site / "private"
    assert submit.log_base(replace(spec, private_log_dir=str(private)), submit_dir) == private
    (site / "safe").mkdir()
    safe = project_dir(site / "safe", 0o755)
    assert submit.log_base(replace(spec, log_dir=str(safe), private_log_dir=str(private)), submit_dir) == safe


def test_a_private_log_dir_from_home_is_taken_where_it_is_rendered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/al ice")
    spec = batch.job_spec("rsb", private_log_dir="~/raysub-logs")
    assert "  LOG_BASE='/home/al ice/raysub-logs'\n" in render(spec)


@pytest.mark.skipif(shutil.which("setfacl") is None, reason="needs setfacl (Debian's acl; scripts/setup)")
def test_bases_the_job_makes_under_a_default_acl_are_its_users_alone(site: Path, tmp_path: Path) -> None:
    home = site / "home"
    home.mkdir(mode=0o755)
    subprocess.run(["setfacl", "-d", "-m", "g:root:rwx", str(home)], check=True)  # it ignores the umask
    done = run_job(home, tmp_path, log_dir=str(home / "runs"))
    assert started(done, home / "runs"), done.stderr[-2000:]
    done = run_job(project_dir(site, 0o2770), tmp_path, private_log_dir=str(home / "private"))
    assert started(done, home / "private"), done.stderr[-2000:]
    assert (home / "private").stat().st_mode & 0o777 == 0o700


def test_in_a_sticky_base_another_users_entries_stay_theirs(tmp_path: Path) -> None:
    """A project directory made sticky (the fix docs/security.md suggests) is shared: another user's
    latest link leaves the job running, and a LOG_DIR another user made first keeps it out, saying so.
    As a user other than root, whom the sticky bit does not hold back."""
    where = Path(tempfile.mkdtemp(prefix="rsb-", dir="/tmp"))
    try:
        where.chmod(0o755)
        submit = project_dir(where, 0o3777)
        (submit / protocol.LATEST).symlink_to("theirs")
        os.chown(submit / protocol.LATEST, STRANGER, STRANGER, follow_symlinks=False)
        done = run_job(submit, where, user=USER)
        assert started(done, submit), done.stderr[-2000:]
        said = f"warning: {submit / protocol.LATEST} (owner UNKNOWN) could not be replaced: it does not point"
        assert said in done.stderr
        assert (submit / protocol.LATEST).readlink() == Path("theirs")
        shutil.rmtree(LogDir.of(submit, JOB_ID).path)
        planted = LogDir.of(submit, JOB_ID).path
        planted.mkdir()
        os.chown(planted, STRANGER, STRANGER)
        done = run_job(submit, where, user=USER)
        assert done.returncode == 1 and planted.stat().st_uid == STRANGER
        assert (
            f"{REFUSED}{planted} is there already and could not be moved aside (owner UNKNOWN)" in done.stderr
        )
    finally:
        shutil.rmtree(where)
