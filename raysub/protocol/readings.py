"""One node's readings from Ray's Prometheus endpoint: GPU, CPU and memory, parsed from the exposition text.

Ray's units: host memory in bytes; GPU memory in MiB although the metric says bytes; utilisation in percent,
negative when the device does not report it (unknown, not idle).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

GIB = 2**30
MIB_PER_GIB = 1024

# Ray's metric names (the reporter agent's gauges, exported with the ray_ prefix).
CPU_UTIL = "ray_node_cpu_utilization"
RAM_USED = "ray_node_mem_used"
RAM_TOTAL = "ray_node_mem_total"
GPU_AVAILABLE = "ray_node_gpus_available"
GPU_UTIL = "ray_node_gpus_utilization"
GPU_MEM_USED = "ray_node_gram_used"
GPU_MEM_AVAILABLE = "ray_node_gram_available"
# Since Ray 2.5x, where the device reports them (reporter_agent's node_gpu_power_milliwatts and
# node_gpu_temperature_celsius gauges).
GPU_POWER = "ray_node_gpu_power_milliwatts"
GPU_TEMPERATURE = "ray_node_gpu_temperature_celsius"
MILLIWATTS_PER_WATT = 1000
NODE_METRICS = (CPU_UTIL, RAM_USED, RAM_TOTAL)
GPU_METRICS = (GPU_AVAILABLE, GPU_UTIL, GPU_MEM_USED, GPU_MEM_AVAILABLE)
# A GPU exists when any of the node's series carries its index: the four above, and whatever else a Ray
# version adds per GPU (ray_node_gpu_power_milliwatts and ray_node_gpu_temperature_celsius in Ray 2.60).
# Some Ray versions serve only some of them (2.49 on H200 nodes: ray_node_gpus_available alone).
NODE_PREFIX = "ray_node_"
GPU_INDEX = "GpuIndex"
_GPU_INDEX_LABEL = f'{GPU_INDEX}="'
# Ray's logical resources, one sample per Name (CPU, GPU, memory, ...) and State (AVAILABLE, USED) on each
# node's raylet. Only the ones raysub shows are kept.
RESOURCES = "ray_resources"
RESOURCE_NAMES = ("CPU", "GPU")
RESOURCE_STATES = {"AVAILABLE": "available", "USED": "used"}


@dataclass(frozen=True)
class GpuMetrics:
    """One GPU as Ray labels it: ``index`` is GpuIndex (MIG devices: gpu * 1000 + mig)."""

    index: str
    name: str | None
    util_pct: float | None
    mem_used_gib: float | None
    mem_total_gib: float | None
    temperature_c: float | None = None
    power_w: float | None = None


@dataclass(frozen=True)
class NodeMetrics:
    """One node's reading; a field Ray did not report is None."""

    ip: str | None
    cpu_util_pct: float | None
    ram_used_gib: float | None
    ram_total_gib: float | None
    gpus: list[GpuMetrics] = field(default_factory=list)
    # Ray's logical resources: {"GPU": {"used": 2.0, "available": 6.0}, "CPU": {...}}
    resources: dict[str, dict[str, float]] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NodeMetrics:
        """The inverse of ``dataclasses.asdict``, for snapshots read back from metrics.jsonl."""
        gpus = [GpuMetrics(**gpu) for gpu in data.get("gpus", [])]
        return cls(
            data.get("ip"),
            data.get("cpu_util_pct"),
            data.get("ram_used_gib"),
            data.get("ram_total_gib"),
            gpus,
            {name: dict(states) for name, states in data.get("resources", {}).items()},
        )


def _wanted(line: str) -> bool:
    return (
        line.startswith(NODE_METRICS)
        or (line.startswith(NODE_PREFIX) and _GPU_INDEX_LABEL in line)
        or line.startswith(RESOURCES + "{")
    )


def _wanted_lines(text: str) -> str:
    # An endpoint serves hundreds of metrics (~250 KB) and the parser is pure Python: hand it only the
    # node's own readings and its per-GPU samples (no # HELP or # TYPE: every family parses as untyped).
    return "\n".join(line for line in text.splitlines() if _wanted(line)) + "\n"


def _gpu_sort_key(index: str) -> tuple[int, str]:
    return (int(index), index) if index.isdigit() else (sys.maxsize, index)


def parse_node_metrics(text: str) -> NodeMetrics:
    """One node's metrics from its endpoint's exposition text; raises ValueError when it is malformed or holds
    none of Ray's node metrics (another exporter on the port, or a Ray whose metrics agent has not reported
    yet): such a page is a failed scrape, not a node with nothing to say."""
    from prometheus_client.parser import text_string_to_metric_families

    ip: str | None = None
    node: dict[str, float] = {}
    gpus: dict[str, dict[str, Any]] = {}
    resources: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(_wanted_lines(text)):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == RESOURCES:
                name, state = labels.get("Name", ""), RESOURCE_STATES.get(labels.get("State", ""))
                if name in RESOURCE_NAMES and state:
                    resources.setdefault(name, {})[state] = sample.value
                continue
            if GPU_INDEX in labels:  # any per-GPU series names a GPU, whether or not it has our readings
                gpu = gpus.setdefault(labels[GPU_INDEX], {"name": None})
                gpu["name"] = gpu["name"] or labels.get("GpuDeviceName")
                gpu[sample.name] = sample.value
            elif sample.name in NODE_METRICS:
                node[sample.name] = sample.value
            else:
                continue  # a longer name with our prefix: ray_node_mem_used_host
            ip = ip or labels.get("ip")

    if not (node or gpus or resources):
        raise ValueError("the page holds none of Ray's node metrics")

    def known(value: float | None) -> float | None:
        return None if value is None or math.isnan(value) or value < 0 else value

    def scaled(value: float | None, per_unit: float) -> float | None:
        return None if value is None or math.isnan(value) else value / per_unit

    def gpu_metrics(index: str, values: dict[str, Any]) -> GpuMetrics:
        util = values.get(GPU_UTIL)
        used, available = values.get(GPU_MEM_USED), values.get(GPU_MEM_AVAILABLE)
        total = used + available if used is not None and available is not None else None
        return GpuMetrics(
            index=index,
            name=values["name"],
            util_pct=None if util is None or math.isnan(util) or util < 0 else util,
            mem_used_gib=scaled(used, MIB_PER_GIB),
            mem_total_gib=scaled(total, MIB_PER_GIB),
            temperature_c=known(values.get(GPU_TEMPERATURE)),
            power_w=scaled(values.get(GPU_POWER), MILLIWATTS_PER_WATT),
        )

    return NodeMetrics(
        ip=ip,
        cpu_util_pct=node.get(CPU_UTIL),
        ram_used_gib=scaled(node.get(RAM_USED), GIB),
        ram_total_gib=scaled(node.get(RAM_TOTAL), GIB),
        gpus=[gpu_metrics(index, gpus[index]) for index in sorted(gpus, key=_gpu_sort_key)],
        resources=resources,
    )
