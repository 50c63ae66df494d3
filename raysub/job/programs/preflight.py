"""The GPU preflight gate: before ``ray start``, are this node's GPUs there, and free?

Run by the head and worker scripts as ``python -m raysub.job.programs.preflight --log-dir DIR --node NAME
--gpus N --mode warn|fail [--min-free-gpu-mem MIB] [--wait-gpus SECONDS] --first-pause S --max-pause S
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

nvidia-smi is asked and read by raysub/job/lib/gpus.py.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

from raysub import protocol
from raysub.job.lib.gpus import (
    APPS_QUERY,
    GPU_QUERY,
    LIST_QUERY,
    Query,
    attach,
    nvidia_smi,
    parse_gpus,
    parse_mig_devices,
    parse_processes,
)
from raysub.protocol.preflight_log import (
    DEFAULT_MIN_FREE_MIB,
    GATE_FAILED,
    Check,
    Finding,
    Gpu,
    Process,
    append_check,
    log_path,
)

# Where the job's GPUs are named, first found first (Slurm sets all three when it manages the node's GPUs:
# CUDA_VISIBLE_DEVICES as CUDA and Ray will count them, the others as its global indexes).
GIVEN_GPUS = ("CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS")


def _count(n: int, noun: str, plural: str = "s") -> str:
    return f"{n} {noun}{'' if n == 1 else plural}"


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
    path = log_path(args.log_dir)
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
        prog="python -m raysub.job.programs.preflight",
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
