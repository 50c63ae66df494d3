"""--autoscale: Ray's own autoscaler on the job's head, with raysub's node provider for Slurm
(raysub/job/lib/slurm_provider.py). Demand that the cluster cannot hold submits grow jobs of one node each,
up to the most nodes given; grow nodes idle past --autoscale-idle are released (docs/elastic.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from raysub.errors import SpecError

DEFAULT_IDLE_S = 300
# A grow job still waiting in Slurm's queue this long is cancelled (its pending reason in autoscale.log).
DEFAULT_QUEUE_TIMEOUT_S = 900
# The suffixes of render's option names after "autoscale", in autoscale_from_options' order.
AUTOSCALE_OPTIONS = ("", "_idle", "_partition", "_queue_timeout")
_PARTITION = re.compile(r"[^\s#'\",\\=]+")


@dataclass(frozen=True)
class Autoscale:
    """The most nodes of the cluster, the job's own included; how long a grow node may idle; the partitions
    grow jobs may run in (Slurm's default when none); how long one may wait in the queue."""

    max_nodes: int
    idle: int = DEFAULT_IDLE_S
    partitions: tuple[str, ...] = field(default_factory=tuple)
    queue_timeout: int = DEFAULT_QUEUE_TIMEOUT_S

    def check(self, nodes: int) -> None:
        """SpecError naming the option whose value cannot be used, for a job of ``nodes`` nodes."""
        if self.max_nodes <= nodes:
            raise SpecError(
                "--autoscale",
                f"{self.max_nodes} is not more than the job's own {nodes} nodes: it is the most nodes the "
                "cluster may grow to, the job's own included",
            )
        waits = (("--autoscale-idle", self.idle), ("--autoscale-queue-timeout", self.queue_timeout))
        for option, value in waits:
            if value < 1:
                raise SpecError(option, f"must be at least 1 second, not {value}")
        for partition in self.partitions:
            if not _PARTITION.fullmatch(partition):
                raise SpecError("--autoscale-partition", f"{partition!r} is not a partition name")


def autoscale_from_options(
    max_nodes: int | None, idle: int, partitions: tuple[str, ...], queue_timeout: int
) -> Autoscale | None:
    """The Autoscale of ``raysub render``'s options; None without --autoscale (the others then need it)."""
    if max_nodes is None:
        if partitions:
            raise SpecError("--autoscale-partition", "needs --autoscale")
        return None
    return Autoscale(max_nodes, idle, tuple(partitions), queue_timeout)
