"""A stand-in for ray._raylet in bats tests, with the shapes of the real one's GcsClient.get_all_node_info
(node id -> GcsNodeInfo with state, node_name, node_manager_address, metrics_export_port, resources_total)
and of its token-authentication check.

Each call of get_all_node_info takes the next word of $FAKE_UNITS: N answers N alive nodes of one GPU each
(so N units whether GPUs or nodes are counted), "oops" fails as a busy GCS does; after the last word it
keeps answering that. With $FAKE_RAY_NODES instead (benchmarks/scale_sim.py), the alive nodes are the files
that the fake 'ray start' (tests/fakes/ray) left in that directory, one per node, named after it.
$FAKE_UNPROTECTED makes this Ray one that does not enforce tokens.
"""

import enum
import os
from dataclasses import dataclass, field
from pathlib import Path


class AuthenticationMode(enum.Enum):
    DISABLED = 0
    TOKEN = 1


def get_authentication_mode() -> AuthenticationMode:
    return AuthenticationMode.DISABLED if os.environ.get("FAKE_UNPROTECTED") else AuthenticationMode.TOKEN


@dataclass
class GcsNodeInfo:
    node_name: str
    node_manager_address: str
    metrics_export_port: int = 0
    state: int = 0  # ALIVE
    resources_total: dict[str, float] = field(default_factory=lambda: {"GPU": 1.0})


class GcsClient:
    def __init__(self, address: str) -> None:
        self.address = address
        self.nodes = os.environ.get("FAKE_RAY_NODES")
        self.answers = [] if self.nodes else os.environ["FAKE_UNITS"].split()
        self.calls = 0

    def get_all_node_info(self, timeout: float) -> dict[str, GcsNodeInfo]:
        if self.nodes:
            names = sorted(p.name for p in Path(self.nodes).iterdir() if not p.name.startswith("."))
            return {f"id{k}": GcsNodeInfo(name, "127.0.0.1") for k, name in enumerate(names)}
        word = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        if word == "oops":
            raise RuntimeError("the GCS did not answer in time")
        return {f"id{k}": GcsNodeInfo(f"node{k}", f"10.0.0.{k + 1}") for k in range(int(word))}
