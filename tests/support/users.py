"""A second, unprivileged user (and a hostile third) for the minicluster's real-site tests, with a Python
they can run: the project's venv lives under /root, which only root may enter, so each test user gets a
venv of Debian's /usr/bin/python3 (the same 3.11) that reads the project venv's packages."""

import grp
import pwd
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

GROUP = "raysubproj"  # the project group a default ACL opens the submit directory to
JOB_USER = "raysub-alice"  # submits the jobs
OTHER_USER = "raysub-mallory"  # in the same group; plants files, tries to get in


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    home: Path


def ensure_user(name: str) -> User:
    """The user ``name`` in GROUP, made (with a home) if missing."""
    try:
        grp.getgrnam(GROUP)
    except KeyError:
        subprocess.run(["groupadd", GROUP], check=True)
    try:
        pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--gid", GROUP, "--shell", "/bin/bash", name], check=True)
    entry = pwd.getpwnam(name)
    return User(name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir))


def remove_users() -> None:
    for name in (JOB_USER, OTHER_USER):
        subprocess.run(["userdel", "--remove", name], check=False, capture_output=True)
    subprocess.run(["groupdel", GROUP], check=False, capture_output=True)


def user_python(where: Path) -> Path:
    """A venv at ``where`` (world-readable) whose Python finds this project's packages; returns its bin."""
    venv = where / "venv"
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    system = subprocess.run(
        ["/usr/bin/python3", "-c", "import sys; print(f'python{sys.version_info[0]}.{sys.version_info[1]}')"],
        check=True, text=True, capture_output=True,
    ).stdout.strip()  # fmt: skip
    if system != version:  # the project's compiled packages (Ray's) load only into the same minor version
        raise RuntimeError(f"/usr/bin/python3 is {system}, the project's venv {version}: set PYTHON to it")
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(sysconfig.get_paths()["purelib"])  # the project venv's site-packages (this Python's)
    (venv / "lib" / version / "site-packages" / "raysub_project.pth").write_text(
        f"import site; site.addsitedir({str(site)!r})\n"
    )
    bin_dir = venv / "bin"
    project_bin = Path(sys.executable).parent
    for command in ("ray", "raysub"):
        lines = (project_bin / command).read_text().splitlines(keepends=True)
        (bin_dir / command).write_text(f"#!{bin_dir / 'python'}\n" + "".join(lines[1:]))
        (bin_dir / command).chmod(0o755)
    return bin_dir


def run_as(
    user: User,
    argv: list[str],
    cwd: Path,
    path: Path,
    slurm_conf: str,
    umask: str = "022",
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """``argv`` as ``user`` (with the user's groups), in ``cwd``, under ``umask``, with a clean login-like
    environment whose PATH starts with ``path``."""
    env = [
        f"PATH={path}:/usr/bin:/bin:/usr/sbin:/sbin",
        f"HOME={user.home}",
        f"USER={user.name}",
        f"LOGNAME={user.name}",
        f"SLURM_CONF={slurm_conf}",
    ]
    shell = f'umask {umask} && exec "$@"'
    command = ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--init-groups"]
    command += ["env", "-i", *env, "sh", "-c", shell, "sh", *argv]
    return subprocess.run(
        command, cwd=cwd, check=check, text=True, capture_output=True, stdin=subprocess.DEVNULL, timeout=120
    )
