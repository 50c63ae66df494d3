"""Ray's node table, read straight from the GCS: one cheap RPC, no driver, unlike ``ray status``.

The head's unit counter and the monitor sidecar both read it. ``ray._raylet.GcsClient`` is a private API;
its import is the first thing to fail on a Ray that changed it, and the callers say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ALIVE = 0  # GcsNodeInfo.state of a node that is up
GCS_TIMEOUT_S = 5


@dataclass(frozen=True)
class Node:
    """One alive node of the table: its name (Ray's default: its IP), address, metrics port and GPUs."""

    name: str
    address: str
    metrics_port: int
    gpus: int


def load() -> None:
    """Imports the client now (Ray's compiled core: about half a second of CPU), so that connect does not."""
    import ray._raylet  # type: ignore[import-not-found,unused-ignore] # noqa: F401


def connect(address: str) -> Any:
    """A client of the GCS at ``address`` (``ip:port``)."""
    from ray._raylet import GcsClient  # type: ignore[attr-defined]

    return GcsClient(address=address)


def alive_nodes(client: Any) -> list[Node]:
    """The nodes that are up now; raises what the client raises when the GCS does not answer."""
    return [
        Node(
            name=info.node_name or info.node_manager_address,
            address=info.node_manager_address,
            metrics_port=info.metrics_export_port,
            gpus=int(info.resources_total.get("GPU", 0)),
        )
        for info in client.get_all_node_info(timeout=GCS_TIMEOUT_S).values()
        if info.state == ALIVE
    ]


def metrics_url(address: str, port: int) -> str:
    """A node's Prometheus endpoint."""
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}:{port}/metrics"


def endpoints(client: Any) -> dict[str, str]:
    """Every alive node's metrics URL, by node name."""
    return {n.name: metrics_url(n.address, n.metrics_port) for n in alive_nodes(client) if n.metrics_port}
