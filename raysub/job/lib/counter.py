"""The head's unit counter: how many GPUs (or, for CPU-only jobs, nodes) have joined Ray, and which nodes.

It loads Ray's GCS client at once, with only the CPU nobody else wants (raysub/job/lib/waits.py's
Background: the head's own start comes first), then waits for ``--address-file`` (node-local), where the
head script writes the GCS address once its Ray is ready, and takes its usual share of the CPU back. From
then on it keeps ray_worker_units (the head waits on it before starting the driver) and ray_joined_nodes
(raysub status) up to date, both written atomically, and adds a timeline line for each node that joins. It
looks briskly until the cluster is whole, then slowly to keep the count live, and ends when ENDED appears
or the head script goes away. The head runs it as raysub/job/programs/units.py, or with the monitor
sidecar as raysub/job/programs/monitor.py: one Python process on the head holds Ray's GCS client, not two.

Exit status: 0 when it ended so; UNPROTECTED when --auth token was asked for and this Ray does not
enforce it (before Ray 2.52 RAY_AUTH_MODE is ignored); 1 on any other error. On failure its only line on
stdout says why, for the head to end the job with.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

from raysub import protocol
from raysub.job.lib import gcs
from raysub.job.lib.waits import Background, wait_address

UNPROTECTED = 3
# Called once every unit has joined, with the GCS address and whether the counter still goes on.
OnWhole = Callable[[str, Callable[[], bool]], None]
# Ray versions whose bring-up is known to collapse when many nodes join, each with what was seen and
# where (docs/configuration.md, At scale): (first, last) major.minor, inclusive.
COLLAPSES_AT_SCALE = (
    (
        (2, 56),
        (2, 56),
        "bring-up collapsed at 400 nodes on Ray 2.56: reads of the cluster id timed out, unretried, while "
        "the nodes registered (ray-project/ray#64845)",
    ),
)


def loaded_ray_version() -> str:
    """The version of the Ray loaded with its GCS client ("" when it does not say: no reason to stop)."""
    return str(getattr(sys.modules.get("ray"), "__version__", ""))


def collapse_known(version: str) -> str | None:
    """What is known of Ray ``version`` collapsing at scale, or None."""
    parts = version.split(".")
    try:
        minor = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        return None
    return next((said for first, last, said in COLLAPSES_AT_SCALE if first <= minor <= last), None)


def token_enforced() -> bool:
    """Whether this Ray enforces token authentication (the API to ask arrived with it, in Ray 2.52)."""
    try:
        from ray._raylet import AuthenticationMode, get_authentication_mode  # type: ignore[attr-defined]
    except ImportError:
        return False
    return bool(get_authentication_mode() == AuthenticationMode.TOKEN)


class Counter:
    """What the counter has published: the set of alive nodes and the unit count."""

    def __init__(self, log_dir: Path, host: str, count_gpus: bool) -> None:
        self.log_dir = log_dir
        self.host = host
        self.count_gpus = count_gpus
        self.names: set[str] = set()
        self.units: int | None = None

    def update(self, alive: list[gcs.Node]) -> None:
        """Publish what changed since the last update."""
        names = {node.name for node in alive}
        if names != self.names:
            protocol.write_joined_nodes(self.log_dir, names)
            for name in sorted(names - self.names):
                protocol.append_timeline(self.log_dir, protocol.PHASE_WORKER_JOINED, self.host, name)
            for name in sorted(self.names - names):
                protocol.append_timeline(self.log_dir, protocol.PHASE_WORKER_LEFT, self.host, name)
            self.names = names
        units = sum(node.gpus for node in alive) if self.count_gpus else len(alive)
        if units != self.units:
            protocol.write_units(self.log_dir, units)
            self.units = units


def count(
    args: argparse.Namespace,
    client: Any,
    address: str,
    on_whole: OnWhole | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Look at the node table until the job ends or the process that started this one is gone; call
    ``on_whole`` (the monitor sidecar's start) once, when every unit has joined."""
    counter = Counter(args.log_dir, args.node, args.kind == "gpu")
    parent = os.getppid()

    def going() -> bool:
        return os.getppid() == parent and not (args.log_dir / protocol.ENDED).exists()

    while going():
        try:
            counter.update(gcs.alive_nodes(client))
        except Exception as error:  # the GCS may be briefly busy: a failed read is never a count
            print(f"raysub: cannot read Ray's node table: {error}", file=sys.stderr)
        whole = (counter.units or 0) >= args.expected
        if whole and on_whole is not None:
            on_whole(address, going)
            on_whole = None
        sleep(args.slow if whole else args.brisk)


def parser(prog: str, description: str | None) -> argparse.ArgumentParser:
    """The unit counter's command line, which the programs that run it extend."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--log-dir", type=Path, required=True)
    parser.add_argument(
        "--address-file",
        type=Path,
        required=True,
        help="where the GCS address (ip:port) comes once Ray is up",
    )
    parser.add_argument("--expected", type=int, required=True, help="units the job waits for")
    parser.add_argument("--kind", choices=get_args(protocol.UnitKind), required=True, help="what a unit is")
    parser.add_argument("--auth", choices=get_args(protocol.AuthMode), required=True)
    parser.add_argument("--node", required=True, help="this node's name, for the timeline")
    # No defaults here or below: the head passes render's (JobSpec and its Timing), the one place they are
    # written.
    parser.add_argument(
        "--ready-look", type=float, required=True, help="seconds between looks for the address"
    )
    parser.add_argument("--brisk", type=float, required=True, help="seconds between reads until all joined")
    parser.add_argument("--slow", type=float, required=True, help="seconds between reads afterwards")
    parser.add_argument(
        "--large-scale",
        action="store_true",
        help="name a Ray version known to collapse at scale (--scale large)",
    )
    return parser


def run(
    args: argparse.Namespace,
    background: Background | None = None,
    on_whole: OnWhole | None = None,
) -> int:
    """The counter, from loading Ray's GCS client to the end of the job; its exit status."""
    parent = os.getppid()
    try:
        if background is not None:
            background.lower()
        gcs.load()  # first: a Ray without this API is no Ray to check the token of
        address = wait_address(args.address_file, parent, args.ready_look)
        if address is None:
            return 0
        if background is not None and not background.restore():
            raise RuntimeError(f"cannot set {background.path} back to nice 0")
        client = gcs.connect(address)
        if args.large_scale:
            known = collapse_known(loaded_ray_version())
            if known:
                print(
                    f"raysub: warning: {known}; the join waves keep fewer nodes joining at once",
                    file=sys.stderr,
                )
        if args.auth == "token" and not token_enforced():
            print("unprotected", loaded_ray_version() or "of unknown version", flush=True)
            return UNPROTECTED
        count(args, client, address, on_whole)
    except Exception as error:  # its last word, on one line: the head ends the job with it
        print(*f"{type(error).__name__}: {error}".split(), flush=True)
        raise
    return 0
