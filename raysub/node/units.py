"""The head's unit counter: how many GPUs (or, for CPU-only jobs, nodes) have joined Ray, and which nodes.

Run by the head script as ``python -m raysub.node.units`` while its Ray starts. It loads Ray's GCS client
at once, with only the CPU nobody else wants (raysub/node/join.py's Background: the head's own start comes
first), then waits for ``--address-file`` (node-local), where the head script writes the GCS address once
its Ray is ready, and takes its usual share of the CPU back. From then on it keeps ray_worker_units (the
head waits on it before starting the driver) and ray_joined_nodes (raysub status) up to date, both written
atomically, and adds a timeline line for each node that joins. It polls briskly until the cluster is
whole, then slowly to keep the count live, and ends when ENDED appears or the head script goes away. With
--monitor-interval it also runs the monitor sidecar (raysub/node/sidecar.py) in a thread once the cluster
is whole: one Python process on the head holds Ray's GCS client, not two.

Exit status: 0 when it ended so; UNPROTECTED when --auth token was asked for and this Ray does not
enforce it (before Ray 2.52 RAY_AUTH_MODE is ignored); 1 on any other error. On failure its only line on
stdout says why, for the head to end the job with.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, get_args

from raysub import protocol
from raysub.node import sidecar
from raysub.node.join import Background, wait_address
from raysub.protocol import gcs
from raysub.protocol.ray_metrics import gcs_endpoints

UNPROTECTED = 3
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

    def __init__(self, logs: protocol.LogDir, host: str, count_gpus: bool) -> None:
        self.logs = logs
        self.host = host
        self.count_gpus = count_gpus
        self.names: set[str] = set()
        self.units: int | None = None

    def update(self, alive: list[gcs.Node]) -> None:
        """Publish what changed since the last update."""
        names = {node.name for node in alive}
        if names != self.names:
            self.logs.write_joined_nodes(names)
            for name in sorted(names - self.names):
                self.logs.append_timeline(protocol.PHASE_WORKER_JOINED, self.host, name)
            self.names = names
        units = sum(node.gpus for node in alive) if self.count_gpus else len(alive)
        if units != self.units:
            self.logs.write_units(units)
            self.units = units


def count(
    args: argparse.Namespace, client: Any, address: str, sleep: Callable[[float], None] = time.sleep
) -> None:
    """Poll the node table until the job ends or the process that started this one is gone; start the
    monitor sidecar (with --monitor-interval) once every unit has joined."""
    counter = Counter(protocol.LogDir(args.log_dir), args.node, args.kind == "gpu")
    parent = os.getppid()

    def going() -> bool:
        return os.getppid() == parent and not counter.logs.ended.exists()

    monitor = args.monitor_interval is not None
    while going():
        try:
            counter.update(gcs.alive_nodes(client))
        except Exception as error:  # the GCS may be briefly busy: a failed read is never a count
            print(f"raysub: cannot read Ray's node table: {error}", file=sys.stderr)
        whole = (counter.units or 0) >= args.expected
        if whole and monitor:
            idle = sidecar.IdleAlarm(args.idle_threshold, args.idle_after)
            sidecar.start(counter.logs, args.node, args.monitor_interval, idle, gcs_endpoints(address), going)
            monitor = False
        sleep(args.slow if whole else args.brisk)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m raysub.node.units", description=__doc__)
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
    parser.add_argument(
        "--monitor-interval", type=float, help="with it, the monitor sidecar: seconds between its snapshots"
    )
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
    parser.add_argument("--idle-threshold", type=float, help="GPU utilisation %% below which it idles")
    parser.add_argument("--idle-after", type=float, help="seconds of idling before the warning")
    args = parser.parse_args(argv)
    if args.monitor_interval is not None and None in (args.idle_threshold, args.idle_after):
        parser.error("--monitor-interval needs --idle-threshold and --idle-after")
    return args


def main(argv: Sequence[str] | None = None, background: Background | None = None) -> int:
    args = parse(argv)
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
        count(args, client, address)
    except Exception as error:  # its last word, on one line: the head ends the job with it
        print(*f"{type(error).__name__}: {error}".split(), flush=True)
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main(background=Background()))
