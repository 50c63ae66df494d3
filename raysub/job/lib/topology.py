"""Where a node sits, from what the node itself can read: its NVLink domain (the Fabric block of each GPU in
``nvidia-smi -q``), its Slurm switch or block (the SLURM_TOPOLOGY_ADDR srun gives each task), its rank in
topology order; and what Ray is told of it: NeMo-RL's per-node resources, node labels, the GPU-to-CPU file.

nvidia-smi -q prints, per GPU (driver R550 and later; tests/fixtures/topology/ holds recorded outputs):

        Fabric
            State                             : Completed
            Status                            : Success
            CliqueId                          : 2
            ClusterUUID                       : dc6e40c4-d722-4357-9ba6-5291dd461278

A GPU of a multi-node NVLink system (GB200/GB300 NVL72) names its NVLink domain by ClusterUUID and its
partition within it by CliqueId. Every other GPU says N/A, or (an HGX H100 with NVSwitches) an all-zero
ClusterUUID: its node is a domain of its own. NeMo-RL's ray.sub takes the first ClusterUUID line as it is,
so it puts every node saying N/A, or zeros, into one pretended domain; here such a node is its own domain.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# NeMo-RL's names (nemo_rl/distributed/virtual_cluster.py reads them; ray.sub sets them).
DOMAIN_RESOURCE_PREFIX = "nvlink_domain_"
RANK_RESOURCE = "topo_rank"
# What ray.sub gives every node besides, and a dedicated head instead.
CLUSTER_RESOURCE = "slurm_managed_ray_cluster"
UNITS_RESOURCE = "worker_units"
HEAD_RESOURCE = "ray_head"
# Ray node labels (Kubernetes syntax; Ray >= 2.49 takes them with --labels-file).
LABEL_PREFIX = "raysub/"
LABEL_VALUE = re.compile(r"[a-zA-Z0-9]([a-zA-Z0-9_.-]{0,61}[a-zA-Z0-9])?")
UUID = re.compile(r"[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")
# ray.sub's block rank: <block digits> * 10**10 + <node digits> (SLURM_TOPOLOGY_ADDR "block3.node42").
BLOCK_RANK_SCALE = 10**10


@dataclass(frozen=True)
class Fabric:
    """One GPU's Fabric block; None for a field it does not print."""

    state: str | None = None
    status: str | None = None
    clique_id: str | None = None
    cluster_uuid: str | None = None

    @property
    def domain(self) -> str | None:
        """The NVLink domain this GPU belongs to beyond its node: a ClusterUUID that is one, and not zeros."""
        uuid = self.cluster_uuid or ""
        return uuid.lower() if UUID.fullmatch(uuid) and uuid.strip("0-") else None


_FABRIC_FIELDS = {
    "State": "state",
    "Status": "status",
    "CliqueId": "clique_id",
    "ClusterUUID": "cluster_uuid",
}


def parse_fabrics(text: str) -> list[Fabric]:
    """Each GPU's Fabric block in ``nvidia-smi -q``'s text, in order (its Health sub-block is left out)."""
    fabrics: list[Fabric] = []
    fields: dict[str, str] | None = None
    depth = 0
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip())
        if line.strip() == "Fabric":
            fields, depth = {}, indent
            fabrics.append(Fabric())
        elif fields is not None and line.strip() and indent > depth:
            name, colon, value = line.partition(":")
            if colon and name.strip() in _FABRIC_FIELDS:
                fields[_FABRIC_FIELDS[name.strip()]] = value.strip()
                fabrics[-1] = Fabric(**fields)
        elif line.strip():
            fields = None
    return fabrics


def node_domain(fabrics: Sequence[Fabric]) -> Fabric | None:
    """The first GPU's fabric when it names a domain (ray.sub reads the first GPU's too), else None."""
    return fabrics[0] if fabrics and fabrics[0].domain else None


def block_rank(address: str, pattern: str) -> int | None:
    """ray.sub's rank under topology/block (SLURM_TOPOLOGY_ADDR_PATTERN "block.node"): the digits of the
    address's first part times 10**10 plus those of its last; None for another pattern, or without digits."""
    if not address or pattern != "block.node":
        return None
    block = re.sub(r"\D", "", address.split(".")[0])
    node = re.sub(r"\D", "", address.split(".")[-1])
    return int(block) * BLOCK_RANK_SCALE + int(node) if block and node else None


def leaf(address: str, pattern: str) -> tuple[str, str] | None:
    """The (kind, name) of the switch or block right above the node in SLURM_TOPOLOGY_ADDR: ("switch", "s1")
    for "root.s1.node1" with pattern "switch.switch.node"; None without a topology plugin (pattern "node")."""
    names, kinds = address.split("."), pattern.split(".")
    if len(names) != len(kinds) or len(kinds) < 2 or kinds[-2] not in ("switch", "block"):
        return None
    return kinds[-2], names[-2]


def label_value(value: str) -> str | None:
    """``value`` when Ray takes it as a label value, else None."""
    return value if LABEL_VALUE.fullmatch(value) else None


def user_resources(text: str) -> dict[str, float] | None:
    """Ray's --resources value (a JSON object of names to numbers) as a mapping; None when it is not one."""
    try:
        parsed = json.loads(text)
    except ValueError:
        return None
    if not isinstance(parsed, dict):
        return None
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in parsed.values())
    return {str(k): v for k, v in parsed.items()} if numbers else None


def resources(
    gpus: int, rank: int | None, domain: str, dedicated_head: bool, extra: Mapping[str, float]
) -> dict[str, float]:
    """The node's custom Ray resources, as NeMo-RL's ray.sub gives them (key order included), then the
    user's own (``extra``, --ray-start-arg --resources), which win."""
    found: dict[str, float] = {CLUSTER_RESOURCE: 1}
    if dedicated_head:
        found[HEAD_RESOURCE] = 1
    else:
        found[UNITS_RESOURCE] = gpus
        found[DOMAIN_RESOURCE_PREFIX + domain] = 1
        if rank is not None:
            found[RANK_RESOURCE] = rank
    return {**found, **extra}


def numa_of_gpus(topo: str) -> list[tuple[str, str]]:
    """(GPU index, NUMA node) for each GPU row of ``nvidia-smi topo -m``. Its last columns are "CPU Affinity
    NUMA Affinity" and, on newer drivers, "GPU NUMA ID": the NUMA node is the first number of the NUMA
    Affinity cell ("0,3-9,11-17" on a Grace node: 0). A row whose cell is no number (N/A) is left out."""
    lines = topo.splitlines()
    header = next((line.split() for line in lines if line.split()[:1] == ["GPU0"]), [])
    if header[-2:] == ["NUMA", "Affinity"]:
        from_end = 1
    elif header[-3:] == ["GPU", "NUMA", "ID"]:
        from_end = 2
    else:
        return []
    pairs = []
    for line in lines:
        cells = line.split()
        if len(cells) > from_end and re.fullmatch(r"GPU\d+", cells[0]):
            numa = re.split(r"[,-]", cells[-from_end])[0]
            if numa.isdigit():
                pairs.append((cells[0][3:], numa))
    return pairs
