"""nvidia-smi on a node: the queries raysub asks, running it with a deadline, and the parser of its answers
(the GPU preflight gate and the clean-up before a driver restart both use them).

nvidia-smi's CSV, as its versions print it (tests/fixtures/nvidia-smi/ imitates each form): a header line
naming each column, with its unit in brackets (``memory.used [MiB]``, ``utilization.gpu [%]``, ``power.draw
[W]``; ``temperature.gpu`` has none), unless ``noheader``; values with their unit (``1234 MiB``, ``45 %``,
``250.00 W``), unless ``nounits``; fields separated by ", ", never quoted. The header names a column by its
canonical name, which may differ from the name asked for (``used_memory`` is headed ``used_gpu_memory``).
A value nvidia-smi cannot give is ``[N/A]``, ``[Not Supported]``, ``[Unknown Error]``, ``[Insufficient
Permissions]`` (any bracketed text), or ``N/A``, or empty. With MIG enabled, the GPU itself reports no
utilisation (``[N/A]``). No process: the header alone. A failure (exit status 9: "NVIDIA-SMI has failed
because it couldn't communicate with the NVIDIA driver. ...", 6: "No devices were found", 18: "Failed to
initialize NVML: Driver/library version mismatch") is said on stdout, with a non-zero exit status.
So the queries ask for the full ``csv`` (a header says which column is which, and in which unit) and the
parser reads every form: with or without a header, units in the header or on the values.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from raysub.job.lib import bounded
from raysub.protocol.preflight_log import Gpu, Process

GPU_FIELDS = (
    *("index", "uuid", "name", "utilization.gpu", "memory.used", "memory.total", "temperature.gpu"),
    *("power.draw", "power.limit"),
)
APP_FIELDS = ("pid", "process_name", "used_memory", "gpu_uuid")
GPU_QUERY = (f"--query-gpu={','.join(GPU_FIELDS)}", "--format=csv")
APPS_QUERY = (f"--query-compute-apps={','.join(APP_FIELDS)}", "--format=csv")
LIST_QUERY = ("--list-gpus",)  # asked only when the job's GPUs are MIG devices, to find their GPUs
# Header names that differ from the field asked for (nvidia-smi heads a column with the canonical name).
GPU_ALIASES = {"gpu_name": "name", "gpu_uuid": "uuid"}
APP_ALIASES = {"used_gpu_memory": "used_memory", "name": "process_name"}

Cell = tuple[str, str]  # a value as printed, and its column's unit from the header ("" when none)

UNKNOWN = re.compile(r"\[.*\]|N/A|")
HEADER_CELL = re.compile(r"([a-z][a-z_.]*)(?: \[([^\]]*)\])?")
NUMBER = re.compile(r"([-+]?\d+(?:\.\d+)?)\s*([A-Za-z%]*)")
TO_MIB = {"KiB": 1 / 1024, "GiB": 1024.0, "TiB": 1024.0**2}  # other units are taken as they are


# ---- nvidia-smi's CSV ----


def _header(cells: Sequence[str], aliases: Mapping[str, str], fields: Sequence[str]) -> list[Cell] | None:
    """The columns' names and units, when ``cells`` are a header line that names one of ``fields`` first."""
    matches = [HEADER_CELL.fullmatch(cell) for cell in cells]
    if not all(matches):
        return None
    columns = [(aliases.get(m.group(1), m.group(1)), m.group(2) or "") for m in matches if m]
    return columns if columns[0][0] in fields else None


def _merge(cells: list[str], at: int, width: int) -> list[str]:
    """``cells`` cut back to ``width`` by joining the extra ones into cell ``at``: nvidia-smi never quotes,
    so a comma in a name splits it."""
    extra = len(cells) - width
    if extra <= 0 or at >= width:
        return cells
    return [*cells[:at], ", ".join(cells[at : at + extra + 1]), *cells[at + extra + 1 :]]


def parse_table(
    text: str, fields: Sequence[str], aliases: Mapping[str, str], wide: str
) -> list[dict[str, Cell]]:
    """The rows of a ``--format=csv`` answer (with or without ``noheader`` and ``nounits``), each a mapping
    of field to its cell. Columns are taken from the header when there is one, else in ``fields``' order;
    ``wide`` is the column that may hold commas. Lines that are no record (too few fields, a warning, "No
    running processes found") are left out."""
    columns: list[Cell] = [(field, "") for field in fields]
    rows = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        header = _header(cells, aliases, fields)
        if header is not None:
            columns = header
        elif len(cells) >= len(columns) > 1:
            names = [name for name, _ in columns]
            cells = _merge(cells, names.index(wide) if wide in names else len(names), len(names))
            rows.append({name: (cell, unit) for (name, unit), cell in zip(columns, cells)})
    return rows


def number(cell: Cell | None, mib: bool = False) -> float | None:
    """The number in a cell (``1234 MiB``, ``1234``, ``45 %``, ``250.00 W``), in MiB when ``mib``; None for
    any form of unknown (``[N/A]``, ``[Not Supported]``, ``N/A``, empty, ...) or anything else."""
    if cell is None:
        return None
    match = NUMBER.fullmatch(cell[0])
    if match is None:
        return None
    value = float(match.group(1))
    return value * TO_MIB.get(match.group(2) or cell[1], 1.0) if mib else value


def text(cell: Cell | None) -> str | None:
    return None if cell is None or UNKNOWN.fullmatch(cell[0]) else cell[0]


def whole(cell: Cell | None) -> int | None:
    value = number(cell)
    return int(value) if value is not None and value.is_integer() else None


def parse_gpus(answer: str) -> list[Gpu]:
    """The GPUs in an answer to GPU_QUERY (rows without a whole index are left out)."""
    gpus = []
    for row in parse_table(answer, GPU_FIELDS, GPU_ALIASES, "name"):
        index = whole(row.get("index"))
        if index is not None:
            gpus.append(
                Gpu(
                    index=index,
                    uuid=text(row.get("uuid")),
                    name=text(row.get("name")),
                    util_pct=number(row.get("utilization.gpu")),
                    mem_used_mib=number(row.get("memory.used"), mib=True),
                    mem_total_mib=number(row.get("memory.total"), mib=True),
                    temperature_c=number(row.get("temperature.gpu")),
                    power_w=number(row.get("power.draw")),
                    power_limit_w=number(row.get("power.limit")),
                )
            )
    return gpus


def parse_processes(answer: str) -> list[Process]:
    """The processes in an answer to APPS_QUERY."""
    processes = []
    for row in parse_table(answer, APP_FIELDS, APP_ALIASES, "process_name"):
        used = number(row.get("used_memory"), mib=True)
        name, uuid = text(row.get("process_name")), text(row.get("gpu_uuid"))
        processes.append(Process(whole(row.get("pid")), name, used, uuid))
    return processes


def attach(gpus: Sequence[Gpu], processes: Sequence[Process]) -> tuple[list[Gpu], list[Process]]:
    """Each GPU with the processes whose GPU uuid is its own; and the processes on no GPU listed."""
    uuids = {gpu.uuid for gpu in gpus if gpu.uuid}
    held = [
        replace(gpu, processes=tuple(p for p in processes if gpu.uuid and p.gpu_uuid == gpu.uuid))
        for gpu in gpus
    ]
    return held, [p for p in processes if p.gpu_uuid not in uuids]


LISTED_GPU = re.compile(r"GPU (\d+): .* \(UUID: (GPU-[^)\s]+)\)")
LISTED_MIG = re.compile(r"\s+MIG .*Device\s+\d+: \(UUID: (MIG-[^)\s]+)\)")


def parse_mig_devices(answer: str) -> dict[str, int]:
    """Each MIG device in an answer to ``nvidia-smi -L`` (LIST_QUERY), by its UUID, with the index of the
    GPU it is a slice of: the devices are listed, indented, under their GPU's line."""
    parents: dict[str, int] = {}
    parent = None
    for line in answer.splitlines():
        gpu, mig = LISTED_GPU.match(line), LISTED_MIG.match(line)
        if gpu is not None:
            parent = int(gpu.group(1))
        elif mig is not None and parent is not None:
            parents[mig.group(1)] = parent
    return parents


# ---- running nvidia-smi ----


@dataclass(frozen=True)
class Answer:
    """What nvidia-smi said (stdout, or stderr when stdout is empty) and its exit status (None: it did not
    answer within ``timeout`` seconds)."""

    status: int | None
    output: str
    timeout: float | None = None

    def failure(self) -> str | None:
        """One line saying how it failed, in its own words; None when it did not."""
        if self.status is None:
            return f"nvidia-smi did not answer within {self.timeout or 0:.0f} s"
        if self.status == 0:
            return None
        said = " ".join(self.output.split()) or "nothing"
        return f"nvidia-smi exited with status {self.status}: {said}"


Query = Callable[[Sequence[str]], Answer | None]


def nvidia_smi(args: Sequence[str], timeout: float) -> Answer | None:
    """Runs ``nvidia-smi ARGS``, for ``timeout`` seconds at most (raysub/job/lib/bounded.py: one that does
    not answer in time is killed and abandoned); None when there is no nvidia-smi on PATH."""
    path = shutil.which("nvidia-smi")
    if path is None:
        return None
    status, output = bounded.run([path, *args], timeout)
    return Answer(None, "", timeout) if status is None else Answer(status, output)
