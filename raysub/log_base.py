"""Whether a base directory for LOG_DIR is safe from other users, judged on the submit host as the batch
script judges it on the head node (raysub/job/templates/ray.sub.j2, ``swappable``; docs/security.md, "A shared
submit directory"): so that ``raysub submit`` says so before the job waits in the queue, and follows the
job to where its logs really go."""

import grp
import os
import pwd
import stat
from pathlib import Path


def user_name(uid: int) -> str:
    """The user's name, or "uid N" for a uid without one."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _fault(path: Path) -> str | None:
    """Why ``path`` lets someone other than this user or root rename what it holds; None if it does not."""
    try:
        st = path.lstat()
    except OSError as error:
        return f"{path} cannot be read ({error.strerror})"
    if stat.S_ISLNK(st.st_mode):  # as safe as the directory holding it; where it leads is the other walk's
        return None
    if st.st_uid not in (os.getuid(), 0):
        return f"{path} belongs to {user_name(st.st_uid)}, who may rename what it holds"
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022 and not mode & stat.S_ISVTX:
        who = "anyone" if mode & 0o002 else f"group {_group_name(st.st_gid)}"
        return f"{path} (mode {mode:04o}) lets {who} rename what it holds"
    return None


def swappable(base: Path) -> str | None:
    """Why someone other than this user or root could put a directory of their own in the place of a
    LOG_DIR under ``base``: the first directory, from ``base`` up to /, as given and with links resolved,
    that they may rename entries of. None when there is none. A base that does not exist yet is judged
    by the directories the job would make it in (it makes them writable by its user alone)."""
    given = Path(os.path.normpath(base.absolute()))  # '..' taken away as bash's cd does, links kept
    while not given.exists() and given != given.parent:
        given = given.parent
    for path in (given, given.resolve()):
        for directory in (path, *path.parents):
            fault = _fault(directory)
            if fault is not None:
                return fault
    return None
