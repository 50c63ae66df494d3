"""Ray's alive nodes as a driver sees them (``ray.nodes()``), and whether a GCS address answers at all: the
smoke test and the clean-up before a driver restart connect to the job's Ray as drivers do.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence
from typing import Any

from raysub.protocol import Node

HEAD_RESOURCE = "node:__internal_head__"  # Ray gives this resource to the head node only


def alive_nodes(table: Sequence[Mapping[str, Any]]) -> list[Node]:
    """The alive nodes of ``ray.nodes()``, by name."""
    nodes = [
        Node(
            node_id=entry["NodeID"],
            name=entry.get("NodeName") or entry["NodeManagerAddress"],
            ip=entry["NodeManagerAddress"],
            gpus=int(entry.get("Resources", {}).get("GPU", 0)),
            head=HEAD_RESOURCE in entry.get("Resources", {}),
        )
        for entry in table
        if entry.get("Alive")
    ]
    return sorted(nodes, key=lambda node: (not node.head, node.name))


def gcs_answers(address: str, timeout: float) -> None:
    """Raises OSError unless the GCS at ``address`` (``host:port``) takes a connection within ``timeout``
    s: ray.init retries a dead address for minutes. Other forms ("auto", ray://) are left to ray.init."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or "/" in address:
        return
    with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
        return
