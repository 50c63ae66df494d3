"""The GPU preflight gate: before ``ray start``, are this node's GPUs there, and free?

Run by the head and worker scripts as ``python -m raysub.node.preflight --log-dir DIR --node NAME --gpus N
--mode warn|fail [--min-free-gpu-mem MIB] [--wait-gpus SECONDS] --first-pause S --max-pause S
--nvidia-smi-timeout S``, before Ray starts on the node (the head passes the timings). It asks
nvidia-smi for the GPUs (GPU_QUERY) and for the processes on them (APPS_QUERY), keeps the job's GPUs
(given_gpus: by CUDA_VISIBLE_DEVICES, else Slurm's GPU list; the node's others are said as information),
and finds:

- error: nvidia-smi fails (driver not loaded, no devices, driver/library version mismatch, ...: its own
  words); fewer GPUs than ``--gpus``; a GPU that any process holds (every compute process there is before
  Ray starts belongs to someone else); a GPU with less free memory than ``--min-free-gpu-mem``;
- warn: a GPU that does not report its memory use (its free memory is unchecked); the processes cannot be
  listed; a process on a device that is none of the GPUs listed;
- info: no nvidia-smi on PATH (then nothing else is checked and the gate passes); a GPU that does not report
  its utilisation (MIG-enabled GPUs never do).

With ``--wait-gpus S`` it checks again while an error remains, after --first-pause seconds, twice that, and
so on (at most --max-pause apart), until none remains or S seconds have passed. Every check appends one line
to LOG_DIR/preflight.jsonl, whose format, writer and reader are raysub/protocol/preflight_log.py. The
verdict is ``fail`` when an error remains and ``--mode fail``, ``warn`` when any error or warning remains,
``ok`` otherwise.

Exit status, and stdout (the node script ends the job with what is printed, adding "<role> on <node>: "):

- 0: the gate passed, or ``--mode warn`` (the findings are on stderr and in preflight.jsonl), or ``--mode
  off`` (nothing is checked or written); nothing on stdout;
- GATE_FAILED (3): ``--mode fail`` and an error remained; the only line on stdout is the first error, e.g.
  ``GPU 3 is held by pid 4242 (python3, 30000 MiB)``;
- 1: the program itself failed; the only line on stdout is its last word;
- 2: wrong arguments (argparse).

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

import argparse
import functools
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional, get_args

from raysub import protocol
from raysub.node import bounded
from raysub.protocol.preflight_log import (
    DEFAULT_MIN_FREE_MIB,
    GATE_FAILED,
    Check,
    Finding,
    Gpu,
    Process,
    append_check,
)

GPU_FIELDS = (
    *("index", "uuid", "name", "utilization.gpu", "memory.used", "memory.total", "temperature.gpu"),
    *("power.draw", "power.limit"),
)
APP_FIELDS = ("pid", "process_name", "used_memory", "gpu_uuid")
GPU_QUERY = (f"--query-gpu={','.join(GPU_FIELDS)}", "--format=csv")
APPS_QUERY = (f"--query-compute-apps={','.join(APP_FIELDS)}", "--format=csv")
LIST_QUERY = ("--list-gpus",)  # asked only when the job's GPUs are MIG devices, to find their GPUs
# Where the job's GPUs are named, first found first (Slurm sets all three when it manages the node's GPUs:
# CUDA_VISIBLE_DEVICES as CUDA and Ray will count them, the others as its global indexes).
GIVEN_GPUS = ("CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS")
# Header names that differ from the field asked for (nvidia-smi heads a column with the canonical name).
GPU_ALIASES = {"gpu_name": "name", "gpu_uuid": "uuid"}
APP_ALIASES = {"used_gpu_memory": "used_memory", "name": "process_name"}

Cell = tuple[str, str]  # a value as printed, and its column's unit from the header ("" when none)

UNKNOWN = re.compile(r"\[.*\]|N/A|")
HEADER_CELL = re.compile(r"([a-z][a-z_.]*)(?: \[([^\]]*)\])?")
NUMBER = re.compile(r"([-+]?\d+(?:\.\d+)?)\s*([A-Za-z%]*)")
TO_MIB = {"KiB": 1 / 1024, "GiB": 1024.0, "TiB": 1024.0**2}  # other units are taken as they are


def _count(n: int, noun: str, plural: str = "s") -> str:
    return f"{n} {noun}{'' if n == 1 else plural}"


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


# ---- the job's GPUs ----


@dataclass(frozen=True)
class Given:
    """The GPUs this job was given on this node, of those nvidia-smi lists."""

    gpus: list[Gpu]  # the job's GPUs, in index order: whole, or cut into MIG devices it was given
    devices: int  # how many devices the job has here: a whole GPU or a MIG device each
    sliced: frozenset[int] = frozenset()  # the GPUs (indexes) the job has MIG devices of
    findings: tuple[Finding, ...] = ()
    named: str = ""  # where the job's GPUs are named, e.g. "CUDA_VISIBLE_DEVICES=0,1"; "" for all GPUs


class _Devices:
    """Finds the GPU a device name of CUDA_VISIBLE_DEVICES means: an index (nvidia-smi's, which Slurm's
    global indexes are too: both count in PCI bus order), a GPU UUID or a MIG device's UUID, each UUID
    or a unique start of one, as CUDA takes them."""

    def __init__(self, gpus: Sequence[Gpu], query: Query) -> None:
        self.gpus, self.query = gpus, query
        self.findings: list[Finding] = []
        self._migs: dict[str, int] | None = None

    def migs(self) -> dict[str, int]:
        if self._migs is None:
            answer = self.query(LIST_QUERY)
            failure = "nvidia-smi is gone" if answer is None else answer.failure()
            if answer is None or failure is not None:
                self.findings.append(Finding("warn", None, f"cannot list the MIG devices: {failure}"))
                self._migs = {}
            else:
                self._migs = parse_mig_devices(answer.output)
        return self._migs

    def find(self, name: str) -> list[Gpu] | None:
        """The GPUs ``name`` may mean (one when it is known); None when it is no device name at all."""
        if name.isdigit():
            return [gpu for gpu in self.gpus if gpu.index == int(name)]
        if name.startswith("GPU-"):
            return [gpu for gpu in self.gpus if gpu.uuid and gpu.uuid.startswith(name)]
        if name.startswith("MIG-"):
            parents = [index for uuid, index in self.migs().items() if uuid.startswith(name)]
            return [gpu for gpu in self.gpus if len(parents) == 1 and gpu.index == parents[0]]
        return None


def _mixed_models(gpus: Sequence[Gpu], names: Sequence[str], environ: Mapping[str, str]) -> list[Finding]:
    """CUDA numbers GPUs fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, nvidia-smi and Slurm in PCI
    bus order: the same order only where all GPUs are one model."""
    models = {gpu.name for gpu in gpus}
    if len(models) < 2 or environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID":
        return []
    if not any(name.isdigit() for name in names):
        return []
    reason = (
        f"the node's GPUs are of {len(models)} models and CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA may "
        "number them otherwise than nvidia-smi, whose numbers are judged"
    )
    return [Finding("info", None, reason)]


def given_gpus(gpus: Sequence[Gpu], environ: Mapping[str, str], query: Query) -> Given:
    """The job's GPUs among ``gpus``: those CUDA_VISIBLE_DEVICES names (CUDA and Ray use no others), else
    SLURM_STEP_GPUS or SLURM_JOB_GPUS, else all of them. The others are the node's, and said as
    information. Under a device cgroup (Slurm's ConstrainDevices) nvidia-smi lists only the job's GPUs
    while CUDA_VISIBLE_DEVICES numbers them from 0: as many GPUs listed as named, but other numbers,
    are all the job's."""
    variable = next((name for name in GIVEN_GPUS if name in environ), None)
    if variable is None:
        return Given(list(gpus), len(gpus))
    named = f"{variable}={environ[variable]}"
    names = [name.strip() for name in environ[variable].split(",")] if environ[variable].strip() else []
    devices = _Devices(gpus, query)
    mine: dict[int, Gpu] = {}
    sliced, missing, count = set(), [], 0
    for name in names:
        found = devices.find(name)
        if found is None:
            reason = f"{named}: {name!r} is no GPU index or UUID, and CUDA uses only the devices before it"
            devices.findings.append(Finding("warn", None, reason))
            break
        if len(found) != 1:
            missing.append(name)
            continue
        mine[found[0].index], count = found[0], count + 1
        if name.startswith("MIG-"):
            sliced.add(found[0].index)
    findings = [*devices.findings, *_mixed_models(gpus, names, environ)]
    if missing and len(gpus) == len(names) and all(name.isdigit() for name in names):
        listed = _count(len(gpus), "GPU")
        reason = f"nvidia-smi lists only {listed}, numbered otherwise than {named}: all are this job's"
        return Given(list(gpus), len(gpus), findings=(*findings, Finding("info", None, reason)), named=named)
    findings += [
        Finding("error", None, f"{named} names {name}, which nvidia-smi does not list") for name in missing
    ]
    others = [gpu for gpu in gpus if gpu.index not in mine]
    if others:
        held = sum(len(gpu.processes) for gpu in others)
        busy = f"; {_count(held, 'process', 'es')} run on them" if held else ""
        listing = ", ".join(str(gpu.index) for gpu in others)
        findings.append(
            Finding("info", None, f"GPUs {listing} are not this job's ({named}): not judged{busy}")
        )
    chosen = sorted(mine.values(), key=lambda gpu: gpu.index)
    return Given(chosen, count, frozenset(sliced), tuple(findings), named)


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


Query = Callable[[Sequence[str]], Optional[Answer]]


def nvidia_smi(args: Sequence[str], timeout: float) -> Answer | None:
    """Runs ``nvidia-smi ARGS``, for ``timeout`` seconds at most (raysub/node/bounded.py: one that does
    not answer in time is killed and abandoned); None when there is no nvidia-smi on PATH."""
    path = shutil.which("nvidia-smi")
    if path is None:
        return None
    status, output = bounded.run([path, *args], timeout)
    return Answer(None, "", timeout) if status is None else Answer(status, output)


# ---- the checks ----


def _holders(gpu: Gpu) -> str:
    """``pid 4242 (python3, 30000 MiB) and 2 more processes``: the biggest process on the GPU first."""
    biggest = sorted(gpu.processes, key=lambda p: -(p.used_mib or 0.0))
    more = f" and {_count(len(biggest) - 1, 'more process', 'es')}" if len(biggest) > 1 else ""
    return biggest[0].label() + more


def _memory(gpu: Gpu, min_free_mib: float) -> list[Finding]:
    free = gpu.free_mib
    if free is None:
        reason = f"GPU {gpu.index} does not report its memory use: its free memory is unchecked"
        return [Finding("warn", gpu.index, reason)]
    if free < min_free_mib:
        reason = (
            f"GPU {gpu.index} has {free:.0f} MiB free of {gpu.mem_total_mib:.0f} MiB, "
            f"less than --min-free-gpu-mem {min_free_mib:.0f}"
        )
        return [Finding("error", gpu.index, reason)]
    return []


def judge(gpu: Gpu, min_free_mib: float, sliced: bool = False) -> list[Finding]:
    """What is wrong with one GPU: someone else's processes, too little free memory, readings it lacks.
    A GPU the job has only MIG devices of (``sliced``) is not judged by its processes and memory, which
    its other MIG devices share: nvidia-smi does not say which device a process runs on."""
    if sliced:
        shared = f"GPU {gpu.index} is cut into MIG devices, some of them maybe another job's"
        who = f": {_holders(gpu)} runs on one of them" if gpu.processes else ""
        findings = [Finding("info", gpu.index, f"{shared}{who}; its processes and memory are unchecked")]
    else:
        findings = _memory(gpu, min_free_mib)
        if gpu.processes:
            findings.insert(0, Finding("error", gpu.index, f"GPU {gpu.index} is held by {_holders(gpu)}"))
    if gpu.util_pct is None:
        reason = (
            f"GPU {gpu.index} does not report its utilisation (as with MIG enabled); its score counts it busy"
        )
        findings.append(Finding("info", gpu.index, reason))
    return findings


def _processes(query: Query) -> tuple[list[Process], list[Finding]]:
    answer = query(APPS_QUERY)
    failure = "nvidia-smi is gone" if answer is None else answer.failure()
    if answer is None or failure is not None:
        return [], [Finding("warn", None, f"cannot list the processes on the GPUs: {failure}")]
    return parse_processes(answer.output), []


def observe(
    query: Query, wanted: int, min_free_mib: float, environ: Mapping[str, str] | None = None
) -> tuple[list[Gpu], list[Finding]]:
    """One check: the job's GPUs (given_gpus: all that nvidia-smi lists when ``environ`` names none), with
    their processes, and the findings."""
    answer = query(GPU_QUERY)
    if answer is None:
        return [], [Finding("info", None, "nvidia-smi not found")]
    failure = answer.failure()
    if failure is not None:
        return [], [Finding("error", None, failure)]
    processes, findings = _processes(query)
    listed, strays = attach(parse_gpus(answer.output), processes)
    given = given_gpus(listed, environ or {}, query)
    findings += given.findings
    for gpu in given.gpus:
        findings += judge(gpu, min_free_mib, gpu.index in given.sliced)
    for process in strays:
        reason = (
            f"{process.label()} runs on {process.gpu_uuid or 'an unknown device'}, none of the GPUs listed"
        )
        findings.append(Finding("warn", None, reason))
    if given.devices < wanted:
        named = f" ({given.named})" if given.named else ""
        reason = f"{_count(given.devices, 'GPU')} visible{named}, the job asked for {wanted} per node"
        findings.append(Finding("error", None, reason))
    return given.gpus, findings


def verdict(findings: Sequence[Finding], mode: str) -> str:
    if any(f.severity == "error" for f in findings):
        return "fail" if mode == "fail" else "warn"
    return "warn" if any(f.severity == "warn" for f in findings) else "ok"


# ---- the gate ----


def first_error(check: Check, waited: float) -> str:
    """The line the job ends with: the first error, how long the gate waited, how many more there are."""
    errors = [f.reason for f in check.findings if f.severity == "error"]
    line = errors[0] + (f", still after waiting {waited:.0f} s" if waited > 0 else "")
    return line + (f" ({len(errors) - 1} more in {protocol.PREFLIGHT})" if len(errors) > 1 else "")


def gate(
    args: argparse.Namespace,
    query: Query | None = None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    environ: Mapping[str, str] | None = None,
) -> Check:
    """Checks the job's GPUs (named in ``environ``: given_gpus) until no error remains or --wait-gpus has
    passed; each check goes to preflight.jsonl. Returns the last check."""
    path = protocol.LogDir(args.log_dir).preflight
    query = query or functools.partial(nvidia_smi, timeout=args.nvidia_smi_timeout)
    deadline = clock() + args.wait_gpus
    pause = args.first_pause
    count = 0
    while True:
        count += 1
        gpus, findings = observe(query, args.gpus, args.min_free_gpu_mem, environ)
        now = clock()
        final = now >= deadline or not any(f.severity == "error" for f in findings)
        check = Check(
            round(now, 3), args.node, count, final, tuple(gpus), tuple(findings), verdict(findings, args.mode)
        )
        append_check(path, check)
        if final:
            return check
        wait = min(pause, deadline - now)
        print(
            f"raysub preflight on {args.node}: {first_error(check, 0)}; next check in {wait:.0f} s",
            file=sys.stderr,
        )
        sleep(wait)
        pause = min(pause * 2, args.max_pause)


def _not_negative(value: str) -> float:
    number = float(value)
    if not number >= 0:
        raise argparse.ArgumentTypeError(f"{value} is not a number >= 0")
    return number


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m raysub.node.preflight",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument("--log-dir", type=Path, required=True)
    parser.add_argument("--node", required=True, help="this node's name, for preflight.jsonl")
    parser.add_argument("--gpus", type=int, required=True, help="the GPUs the job asked for on each node")
    parser.add_argument(
        "--mode",
        choices=get_args(protocol.PreflightMode),
        required=True,
        help=f"off: check nothing; warn: say what is found; fail: and exit {GATE_FAILED}",
    )
    parser.add_argument(
        "--min-free-gpu-mem",
        type=_not_negative,
        default=DEFAULT_MIN_FREE_MIB,
        metavar="MIB",
        help="a GPU with less free memory fails the gate (default: %(default).0f)",
    )
    parser.add_argument(
        "--wait-gpus",
        type=_not_negative,
        default=0.0,
        metavar="SECONDS",
        help="check again, backing off, until the GPUs are free or this long has passed (default: 0)",
    )
    # The head passes these (JobSpec.timing), the one place they are written.
    parser.add_argument(
        "--first-pause", type=_not_negative, required=True, help="seconds before the 2nd check"
    )
    parser.add_argument(
        "--max-pause", type=_not_negative, required=True, help="seconds between checks at most"
    )
    parser.add_argument(
        "--nvidia-smi-timeout", type=_not_negative, required=True, help="seconds nvidia-smi may take"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    if args.mode == "off":
        return 0
    try:
        check = gate(args, environ=os.environ)
    except Exception as error:  # its last word, on one line: the node script ends the job with it
        print(*f"{type(error).__name__}: {error}".split(), flush=True)
        raise
    for finding in check.findings:
        print(f"raysub preflight on {args.node}: {finding.severity}: {finding.reason}", file=sys.stderr)
    if check.verdict == "fail":
        print(first_error(check, args.wait_gpus), flush=True)
        return GATE_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main())
