"""Keeps the files a Ray node reads at start-up in memory, for benchmarks/bringup_vs.py.

This machine is a virtual machine whose host takes the guest's page cache back within a minute or two,
and its disk reads some 40 MB/s: a job that finds Ray's files dropped since the last job spends seconds
reading them again, and those seconds land on whichever kind of job came next. While this program runs,
the files stay in memory (mapped and locked), as on a node that has run a Ray job before; every kind of
job finds them there alike.

Which files: every file of each package that Ray's node processes import (it imports the same modules
first, to find them), the standard library modules among them, and the shared libraries it then has
mapped. It prints one line once they are locked, then waits until its standard input closes.

    python benchmarks/page_cache.py
"""

from __future__ import annotations

import ctypes
import importlib
import mmap
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

# What `ray start` and the processes it starts on a node (the head's included) import.
RAY_MODULES = (
    "ray.scripts.scripts",
    "ray.dashboard.dashboard",
    "ray.dashboard.agent",
    "ray._private.log_monitor",
    "ray._private.runtime_env.agent.main",
    "ray.autoscaler._private.monitor",
    "ray.util.client.server.server",
)
MCL_CURRENT = 1


def module_files(module: ModuleType) -> Iterator[Path]:
    """The files of ``module``: all of its package's directory, or the module file and its bytecode."""
    paths = getattr(module, "__path__", None)
    if paths is not None:
        for directory in paths:
            yield from (Path(root) / name for root, _, names in os.walk(directory) for name in names)
        return
    for attribute in ("__file__", "__cached__"):
        path = getattr(module, attribute, None)
        if path:
            yield Path(path)


def mapped_libraries() -> Iterator[Path]:
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].startswith("/"):
            yield Path(fields[5])


def files_to_keep() -> set[Path]:
    for name in RAY_MODULES:
        importlib.import_module(name)
    tops = {name.partition(".")[0] for name in sys.modules}
    files = {path for top in tops if (module := sys.modules.get(top)) for path in module_files(module)}
    return {path for path in files | set(mapped_libraries()) if path.is_file()}


def lock(files: set[Path]) -> tuple[list[mmap.mmap], int]:
    """Maps every file and locks all this process has mapped; the maps (to keep) and the bytes kept."""
    maps = []
    for path in sorted(files):
        try:
            with path.open("rb") as file:
                size = os.fstat(file.fileno()).st_size
                if size:
                    maps.append(mmap.mmap(file.fileno(), size, prot=mmap.PROT_READ))
        except OSError:
            continue
    if ctypes.CDLL(None, use_errno=True).mlockall(MCL_CURRENT) != 0:
        raise OSError(ctypes.get_errno(), "mlockall failed (needs root, or a high enough ulimit -l)")
    return maps, sum(len(m) for m in maps)


def main() -> int:
    maps, size = lock(files_to_keep())
    print(f"page_cache: keeping {len(maps)} files, {size / 2**20:.0f} MiB, in memory", flush=True)
    sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(main())
