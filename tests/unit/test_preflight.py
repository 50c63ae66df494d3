"""The GPU preflight gate (raysub/job/programs/preflight.py): nvidia-smi's CSV in each form its versions print
(tests/fixtures/nvidia-smi/, hand-written), the scores and findings, the wait for busy GPUs on a fake clock,
preflight.jsonl's writer and reader, and the program itself against the fake nvidia-smi (tests/fakes/)."""

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raysub import protocol
from raysub.job.lib import gpus as smi
from raysub.job.lib.gpus import Answer
from raysub.job.manifest import timing_args
from raysub.job.programs import preflight
from raysub.protocol import preflight_log
from raysub.protocol.preflight_log import Check, Finding, Gpu, Process
from raysub.spec import JobSpec
from tests.support.batch import FAKES
from tests.support.prereq import REPO
from tests.unit.test_job_poll import FakeClock

SAMPLES = REPO / "tests" / "fixtures" / "nvidia-smi"
H100 = "NVIDIA H100 80GB HBM3"
UUID3 = "GPU-6a1f0c2e-3b4d-4e5f-8a9b-0c1d2e3f4a53"


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


class FakeSmi:
    """Answers the gate's two queries: the GPU query with ``gpus``, the compute-apps query with the next of
    ``apps`` (the last one for ever after); None for a node without nvidia-smi."""

    def __init__(self, gpus: Answer | None, *apps: Answer, listing: Answer | None = None) -> None:
        self.gpus = gpus
        self.apps = list(apps) or [Answer(0, sample("apps-none.csv"))]
        self.listing = listing  # the answer to -L
        self.calls: list[Sequence[str]] = []

    def __call__(self, args: Sequence[str]) -> Answer | None:
        self.calls.append(args)
        if self.gpus is None or tuple(args) == smi.GPU_QUERY:
            return self.gpus
        if tuple(args) == smi.LIST_QUERY:
            return self.listing
        assert tuple(args) == smi.APPS_QUERY
        return self.apps.pop(0) if len(self.apps) > 1 else self.apps[0]


def ok(name: str) -> Answer:
    return Answer(0, sample(name))


TIMING = timing_args(JobSpec(nodes=2).timing, "preflight")


def arguments(log_dir: Path, *extra: str, gpus: int = 8, mode: str = "fail") -> argparse.Namespace:
    return preflight.parse(
        [f"--log-dir={log_dir}", "--node=node3", f"--gpus={gpus}", f"--mode={mode}", *TIMING, *extra]
    )


# ---- nvidia-smi's CSV ----


def test_every_form_of_the_gpu_query_reads_the_same() -> None:
    forms = ["gpus.csv", "gpus-nounits.csv", "gpus-noheader-nounits.csv"]
    parsed = [smi.parse_gpus(sample(name)) for name in forms]
    assert parsed[0] == parsed[1] == parsed[2]
    assert [gpu.index for gpu in parsed[0]] == list(range(8))
    assert parsed[0][3] == Gpu(3, UUID3, H100, 97.0, 30512.0, 81559.0, 58.0, 512.33, 700.0)


def test_every_form_of_the_compute_apps_query_reads_the_same() -> None:
    expected = [Process(4242, "/usr/bin/python3", 30000.0, UUID3)]
    assert smi.parse_processes(sample("apps.csv")) == expected
    assert smi.parse_processes(sample("apps-noheader-nounits.csv")) == expected
    assert smi.parse_processes(sample("apps-none.csv")) == []


def test_every_form_of_unknown_is_unknown() -> None:
    a10, hidden = smi.parse_gpus(sample("gpus-unknown.csv"))
    assert (a10.util_pct, a10.mem_used_mib, a10.power_w, a10.power_limit_w) == (0.0, 0.0, None, None)
    assert hidden == Gpu(1, hidden.uuid, "NVIDIA A10", None, None, None, None, None, 150.0)


def test_a_mig_enabled_gpu_reports_no_utilisation() -> None:
    whole_gpu, mig = smi.parse_gpus(sample("gpus-mig.csv"))
    assert whole_gpu.util_pct == 0.0
    assert (mig.util_pct, mig.mem_used_mib, mig.mem_total_mib) == (None, 13.0, 81920.0)
    findings = preflight.judge(mig, preflight_log.DEFAULT_MIN_FREE_MIB)
    assert [(f.severity, f.gpu) for f in findings] == [("info", 1)]
    assert mig.score == round(0.6 * (81920 - 13) / 81920, 3)  # its idle part counts as busy


def test_columns_are_found_by_the_header_in_any_order_and_by_any_name() -> None:
    answer = (
        "gpu_uuid, used_gpu_memory [MiB], pid, process_name\n"
        "GPU-a, 2 GiB, 17, /opt/my, odd, name\n"  # unquoted commas in the name; memory in GiB
        "No running processes found\n"
        "WARNING: infoROM is corrupted at gpu 0000:04:00.0\n"
        "GPU-b, [N/A], 18, [Not Found]\n"
    )
    assert smi.parse_processes(answer) == [
        Process(17, "/opt/my, odd, name", 2048.0, "GPU-a"),
        Process(18, None, None, "GPU-b"),
    ]


@settings(max_examples=200)
@given(st.text())
def test_no_answer_breaks_the_parser(answer: str) -> None:
    smi.parse_gpus(answer)
    smi.parse_processes(answer)


# ---- scores and findings ----


def test_the_score_weighs_free_memory_and_idleness() -> None:
    free = Gpu(0, "GPU-x", H100, 0.0, 0.0, 81559.0, 30.0, 70.0, 700.0)
    assert free.score == 1.0
    busy = smi.parse_gpus(sample("gpus.csv"))[3]
    assert busy.score == round(0.6 * (81559 - 30512) / 81559 + 0.4 * (100 - 97) / 100, 3)
    unknown = Gpu(0, None, None, None, None, None, None, None, None)
    assert unknown.score == 0.0
    assert Gpu(0, None, None, None, None, 81559.0, None, None, None).score == 0.0  # used unknown: not free


def test_a_gpu_held_by_a_foreign_process_fails_the_gate() -> None:
    gpus, findings = preflight.observe(FakeSmi(ok("gpus.csv"), ok("apps.csv")), 8, 1024)
    assert gpus[3].processes == (Process(4242, "/usr/bin/python3", 30000.0, UUID3),)
    assert all(not gpu.processes for gpu in gpus if gpu.index != 3)
    assert findings == [Finding("error", 3, "GPU 3 is held by pid 4242 (python3, 30000 MiB)")]
    assert preflight.verdict(findings, "fail") == "fail"
    assert preflight.verdict(findings, "warn") == "warn"


def test_the_biggest_of_several_processes_names_the_gpu() -> None:
    gpu = Gpu(2, "GPU-x", H100, 50.0, 9000.0, 81559.0, 40.0, 300.0, 700.0)
    processes = (Process(1, "small", 100.0), Process(2, "/bin/big", 8000.0), Process(3, None, None))
    findings = preflight.judge(replace(gpu, processes=processes), 1024)
    assert findings == [Finding("error", 2, "GPU 2 is held by pid 2 (big, 8000 MiB) and 2 more processes")]
    assert Process(None, None, None).label() == "an unknown pid"


def test_a_nearly_full_gpu_fails_the_gate() -> None:
    full = Gpu(5, "GPU-x", H100, 0.0, 81000.0, 81559.0, 30.0, 70.0, 700.0)
    assert preflight.judge(full, 1024) == [
        Finding("error", 5, "GPU 5 has 559 MiB free of 81559 MiB, less than --min-free-gpu-mem 1024")
    ]
    assert preflight.judge(full, 500) == []


def test_an_unknown_reading_warns_but_does_not_fail() -> None:
    _, findings = preflight.observe(FakeSmi(ok("gpus-unknown.csv")), 2, 1024)
    assert [(f.severity, f.gpu) for f in findings] == [("warn", 1), ("info", 1)]
    assert "free memory is unchecked" in findings[0].reason
    assert preflight.verdict(findings, "fail") == "warn"
    assert preflight.verdict([findings[1]], "fail") == "ok"


def test_fewer_gpus_than_asked_fails_the_gate() -> None:
    _, findings = preflight.observe(FakeSmi(ok("gpus-mig.csv")), 8, 1024)
    assert findings[-1] == Finding("error", None, "2 GPUs visible, the job asked for 8 per node")
    one_gpu = Answer(0, sample("gpus-mig.csv").splitlines(keepends=True)[1])
    _, findings = preflight.observe(FakeSmi(one_gpu), 2, 1024)
    assert findings == [Finding("error", None, "1 GPU visible, the job asked for 2 per node")]


def test_a_process_on_no_gpu_listed_is_a_warning() -> None:
    apps = Answer(0, "pid, process_name, used_gpu_memory [MiB], gpu_uuid\n77, trainer, 10 MiB, MIG-1a2b\n")
    _, findings = preflight.observe(FakeSmi(ok("gpus-mig.csv"), apps), 2, 1024)
    assert (
        Finding("warn", None, "pid 77 (trainer, 10 MiB) runs on MIG-1a2b, none of the GPUs listed")
        in findings
    )


@pytest.mark.parametrize(
    ("sample_name", "status", "words"),
    [
        ("driver-not-loaded.txt", 9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA"),
        ("no-devices.txt", 6, "No devices were found"),
        (
            "version-mismatch.txt",
            18,
            "Failed to initialize NVML: Driver/library version mismatch NVML library",
        ),
    ],
)
def test_each_failure_of_nvidia_smi_is_a_finding_in_its_words(
    sample_name: str, status: int, words: str
) -> None:
    gpus, findings = preflight.observe(FakeSmi(Answer(status, sample(sample_name))), 8, 1024)
    assert gpus == []
    assert len(findings) == 1
    assert (findings[0].severity, findings[0].gpu) == ("error", None)
    assert findings[0].reason.startswith(f"nvidia-smi exited with status {status}: {words}")
    assert "\n" not in findings[0].reason


def test_a_hung_nvidia_smi_and_a_failed_process_list() -> None:
    assert Answer(None, "", 60).failure() == "nvidia-smi did not answer within 60 s"
    _, findings = preflight.observe(
        FakeSmi(ok("gpus.csv"), Answer(15, "Unable to determine the device handle")), 8, 1024
    )
    assert findings == [
        Finding(
            "warn",
            None,
            "cannot list the processes on the GPUs: nvidia-smi exited with status 15: Unable to determine "
            "the device handle",
        )
    ]


def test_without_nvidia_smi_the_gate_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert preflight.observe(FakeSmi(None), 8, 1024) == ([], [Finding("info", None, "nvidia-smi not found")])
    monkeypatch.setenv("PATH", str(tmp_path))
    assert smi.nvidia_smi(smi.GPU_QUERY, 60) is None
    assert preflight.main([f"--log-dir={tmp_path}", "--node=n1", "--gpus=8", "--mode=fail", *TIMING]) == 0
    (check,) = preflight_log.read_checks(tmp_path / protocol.PREFLIGHT)
    assert (check.verdict, check.final, check.findings) == (
        "ok",
        True,
        (Finding("info", None, "nvidia-smi not found"),),
    )


# ---- waiting for the GPUs ----


def test_the_gate_waits_until_the_gpu_is_freed(tmp_path: Path) -> None:
    clock = FakeClock()
    smi = FakeSmi(ok("gpus.csv"), ok("apps.csv"), ok("apps.csv"), ok("apps-none.csv"))
    check = preflight.gate(arguments(tmp_path, "--wait-gpus=600"), smi, clock.monotonic, clock.sleep)
    assert clock.sleeps == [1.0, 2.0]
    assert (check.check, check.final, check.verdict, check.findings) == (3, True, "ok", ())
    lines = preflight_log.read_checks(tmp_path / protocol.PREFLIGHT)
    assert [(c.check, c.final, c.verdict, c.t) for c in lines] == [
        (1, False, "fail", 0.0),
        (2, False, "fail", 1.0),
        (3, True, "ok", 3.0),
    ]


def test_the_gate_gives_up_at_the_deadline(tmp_path: Path) -> None:
    clock = FakeClock()
    smi = FakeSmi(ok("gpus.csv"), ok("apps.csv"))
    check = preflight.gate(arguments(tmp_path, "--wait-gpus=5"), smi, clock.monotonic, clock.sleep)
    assert clock.sleeps == [1.0, 2.0, 2.0]  # checks at 0, 1, 3 and 5 s
    assert (check.check, check.final, check.verdict) == (4, True, "fail")
    assert (
        preflight.first_error(check, 5)
        == "GPU 3 is held by pid 4242 (python3, 30000 MiB), still after waiting 5 s"
    )


def test_the_pauses_double_up_to_a_cap(tmp_path: Path) -> None:
    clock = FakeClock()
    preflight.gate(
        arguments(tmp_path, "--wait-gpus=100"),
        FakeSmi(ok("gpus.csv"), ok("apps.csv")),
        clock.monotonic,
        clock.sleep,
    )
    assert clock.sleeps == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 9.0]


def test_without_a_wait_the_gate_checks_once(tmp_path: Path) -> None:
    clock = FakeClock()
    check = preflight.gate(
        arguments(tmp_path), FakeSmi(ok("gpus.csv"), ok("apps.csv")), clock.monotonic, clock.sleep
    )
    assert (clock.sleeps, check.check, check.final, check.verdict) == ([], 1, True, "fail")


def test_the_reason_counts_the_other_errors() -> None:
    findings = (
        Finding("info", 0, "a"),
        Finding("error", 1, "first"),
        Finding("warn", None, "b"),
        Finding("error", None, "second"),
    )
    check = Check(0.0, "n", 1, True, (), findings, "fail")
    assert preflight.first_error(check, 0) == f"first (1 more in {protocol.PREFLIGHT})"


# ---- preflight.jsonl ----


def a_check(node: str = "node3", check: int = 1) -> Check:
    gpus = smi.parse_gpus(sample("gpus.csv"))
    gpus[3] = replace(gpus[3], processes=(Process(4242, "/usr/bin/python3", 30000.0),))
    findings = (Finding("error", 3, "GPU 3 is held by pid 4242 (python3, 30000 MiB)"),)
    return Check(1700000000.125, node, check, False, tuple(gpus), findings, "fail")


def test_the_record_has_the_documented_shape() -> None:
    record = json.loads(a_check().line())
    assert list(record) == ["t", "node", "check", "final", "gpus", "findings", "verdict"]
    assert record["gpus"][3] == {
        "index": 3,
        "uuid": UUID3,
        "name": H100,
        "util_pct": 97.0,
        "mem_used_mib": 30512.0,
        "mem_total_mib": 81559.0,
        "temperature_c": 58.0,
        "power_w": 512.33,
        "power_limit_w": 700.0,
        "score": 0.388,
        "processes": [{"pid": 4242, "name": "/usr/bin/python3", "used_mib": 30000.0}],
    }
    assert record["findings"] == [
        {"severity": "error", "gpu": 3, "reason": "GPU 3 is held by pid 4242 (python3, 30000 MiB)"}
    ]
    assert a_check().line().count("\n") == 1 and a_check().line().endswith("\n")


def test_the_reader_reads_what_the_writer_wrote_and_skips_partial_lines(tmp_path: Path) -> None:
    path = tmp_path / protocol.PREFLIGHT
    assert preflight_log.read_checks(path) == []
    written = [a_check("node1"), a_check("node3", 2)]
    for check in written:
        preflight_log.append_check(path, check)
    with path.open("a") as out:
        out.write('{"t": 1, "node": "x"}\nnot json\n')  # not a check, garbage
        out.write(written[0].line()[:-20])  # a line still being written
    assert preflight_log.read_checks(path) == written


def test_nodes_appending_at_once_leave_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / protocol.PREFLIGHT

    def node(name: str) -> None:
        for k in range(1, 31):
            preflight_log.append_check(path, a_check(name, k))

    threads = [threading.Thread(target=node, args=(f"node{n}",)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    checks = preflight_log.read_checks(path)
    assert len(checks) == len(path.read_text().splitlines()) == 8 * 30
    assert {(c.node, c.check) for c in checks} == {(f"node{n}", k) for n in range(8) for k in range(1, 31)}


# ---- the program, with the fake nvidia-smi ----

SCENARIO_FREE = """\
# a free node
gpu 0, GPU-00000000-0000-4000-8000-000000000000, NVIDIA H100 80GB HBM3, 0, 1, 81559, 30, 70.00, 700.00
gpu 1, GPU-00000000-0000-4000-8000-000000000001, NVIDIA H100 80GB HBM3, 0, 1, 81559, 31, 70.50, 700.00
"""
SCENARIO_BUSY = """\
gpu 0, GPU-00000000-0000-4000-8000-000000000300, NVIDIA H100 80GB HBM3, 0, 1, 81559, 30, 70.00, 700.00
gpu 1, GPU-00000000-0000-4000-8000-000000000301, NVIDIA H100 80GB HBM3, 97, 30512, 81559, 58, 512.33, 700.00
app 4242, /usr/bin/python3, 30000, GPU-00000000-0000-4000-8000-000000000301
"""


@pytest.fixture
def scenarios(tmp_path: Path) -> Iterator[Path]:
    """A scenario directory: node3 has a busy GPU, every other node is free."""
    directory = tmp_path / "smi"
    directory.mkdir()
    (directory / "default").write_text(SCENARIO_FREE)
    (directory / "node3").write_text(SCENARIO_BUSY)
    yield directory


def run(
    log_dir: Path, scenarios: Path, node: str, *args: str, gpus: int = 2, given: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The program on ``node``, with CUDA_VISIBLE_DEVICES=``given`` when it is not None."""
    env = {
        **{key: value for key, value in os.environ.items() if key not in preflight.GIVEN_GPUS},
        "PATH": f"{FAKES}{os.pathsep}{os.environ['PATH']}",
        "FAKE_NVIDIA_SMI_DIR": str(scenarios),
        "SLURMD_NODENAME": node,
        **({} if given is None else {"CUDA_VISIBLE_DEVICES": given}),
    }
    argv = [
        sys.executable,
        "-m",
        "raysub.job.programs.preflight",
        f"--log-dir={log_dir}",
        f"--node={node}",
        f"--gpus={gpus}",
        *TIMING,
        *args,
    ]
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False)


def test_the_program_passes_free_nodes_and_fails_a_busy_one(tmp_path: Path, scenarios: Path) -> None:
    free = run(tmp_path, scenarios, "node1", "--mode=fail")
    assert (free.returncode, free.stdout) == (0, ""), free.stderr
    busy = run(tmp_path, scenarios, "node3", "--mode=fail")
    assert (busy.returncode, busy.stdout) == (
        preflight_log.GATE_FAILED,
        "GPU 1 is held by pid 4242 (python3, 30000 MiB)\n",
    )
    assert "raysub preflight on node3: error: GPU 1 is held by pid 4242" in busy.stderr
    warned = run(tmp_path, scenarios, "node3", "--mode=warn")
    assert (warned.returncode, warned.stdout) == (0, "")
    assert "error: GPU 1 is held by pid 4242 (python3, 30000 MiB)" in warned.stderr
    checks = preflight_log.read_checks(tmp_path / protocol.PREFLIGHT)
    assert [(c.node, c.verdict) for c in checks] == [("node1", "ok"), ("node3", "fail"), ("node3", "warn")]
    assert [p.pid for p in checks[1].gpus[1].processes] == [4242]
    off = run(tmp_path / "elsewhere", scenarios, "node3", "--mode=off")
    assert (off.returncode, off.stdout) == (0, "")


@pytest.mark.parametrize(
    ("failure", "status", "words"),
    [
        ("driver", 9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."),
        ("no-devices", 6, "No devices were found"),
        ("mismatch", 18, "Failed to initialize NVML: Driver/library version mismatch NVML library version"),
    ],
)
def test_the_program_ends_the_job_with_nvidia_smis_failure(
    tmp_path: Path, scenarios: Path, failure: str, status: int, words: str
) -> None:
    (scenarios / "node3").write_text(f"fail {failure}\n")
    done = run(tmp_path, scenarios, "node3", "--mode=fail")
    assert done.returncode == preflight_log.GATE_FAILED
    assert done.stdout.startswith(f"nvidia-smi exited with status {status}: {words}")
    assert done.stdout.count("\n") == 1


def test_a_hung_nvidia_smi_ends_the_gate_within_its_timeout(tmp_path: Path, scenarios: Path) -> None:
    """It is killed and left, never waited for: subprocess.run's timeout waited for its output to close,
    which a child of it (or the process itself, stuck in the driver) kept open for ten minutes."""
    (scenarios / "node3").write_text("fail hang\n")
    started = time.monotonic()
    done = run(tmp_path, scenarios, "node3", "--mode=fail", "--nvidia-smi-timeout=1")
    assert time.monotonic() - started < 30
    assert (done.returncode, done.stdout) == (
        preflight_log.GATE_FAILED,
        "nvidia-smi did not answer within 1 s\n",
    )


def eight_gpus_half_taken() -> str:
    """A scenario: 8 H100s, another job's trainer on each of GPUs 4-7."""
    gpus = [f"gpu {i}, GPU-0000000{i}-0000-4000-8000-000000000000, {H100}, 0, 1, 81559, 30, 70.00, 700.00"
            for i in range(8)]  # fmt: skip
    apps = [f"app {4000 + i}, /usr/bin/python3, 30000, GPU-0000000{i}-0000-4000-8000-000000000000"
            for i in range(4, 8)]  # fmt: skip
    return "\n".join([*gpus, *apps]) + "\n"


def test_only_the_jobs_gpus_are_judged(tmp_path: Path, scenarios: Path) -> None:
    """Another job holds GPUs 4-7 of a shared node: CUDA_VISIBLE_DEVICES=0,1,2,3 passes, 2,3,4,5 fails on
    GPU 4; the GPUs that are not the job's are said, and left out of preflight.jsonl."""
    (scenarios / "shared").write_text(eight_gpus_half_taken())
    ours = run(tmp_path, scenarios, "shared", "--mode=fail", gpus=4, given="0,1,2,3")
    assert (ours.returncode, ours.stdout) == (0, ""), ours.stderr
    assert (
        "info: GPUs 4, 5, 6, 7 are not this job's (CUDA_VISIBLE_DEVICES=0,1,2,3): not judged; "
        "4 processes run on them" in ours.stderr
    )
    straddling = run(tmp_path, scenarios, "shared", "--mode=fail", gpus=4, given="2,3,4,5")
    assert (straddling.returncode, straddling.stdout) == (
        preflight_log.GATE_FAILED,
        f"GPU 4 is held by pid 4004 (python3, 30000 MiB) (1 more in {protocol.PREFLIGHT})\n",
    )
    whole_node = run(tmp_path, scenarios, "shared", "--mode=fail", gpus=8)
    assert whole_node.returncode == preflight_log.GATE_FAILED
    checks = preflight_log.read_checks(tmp_path / protocol.PREFLIGHT)
    assert [[gpu.index for gpu in check.gpus] for check in checks] == [
        [0, 1, 2, 3],
        [2, 3, 4, 5],
        [*range(8)],
    ]
    assert [check.verdict for check in checks] == ["ok", "fail", "fail"]


def test_the_jobs_gpus_by_uuid_by_slurm_and_under_a_device_cgroup() -> None:
    gpus = smi.parse_gpus(sample("gpus.csv"))

    def given(**environ: str) -> preflight.Given:
        return preflight.given_gpus(gpus, environ, FakeSmi(None))

    assert [gpu.index for gpu in given().gpus] == [0, 1, 2, 3, 4, 5, 6, 7]
    assert given().findings == ()
    by_uuid = given(CUDA_VISIBLE_DEVICES=f"{UUID3},{gpus[5].uuid}")
    assert ([gpu.index for gpu in by_uuid.gpus], by_uuid.devices) == ([3, 5], 2)
    # a unique start of a UUID is enough for CUDA; one that starts several names no GPU
    unlike = [replace(gpu, uuid=f"GPU-{gpu.index}{gpu.uuid}") for gpu in gpus]
    assert [gpu.index for gpu in preflight.given_gpus(unlike, {"CUDA_VISIBLE_DEVICES": "GPU-3"},
                                                      FakeSmi(None)).gpus] == [3]  # fmt: skip
    assert given(CUDA_VISIBLE_DEVICES=UUID3[:12]).findings[0] == Finding(
        "error", None, f"CUDA_VISIBLE_DEVICES={UUID3[:12]} names {UUID3[:12]}, which nvidia-smi does not list"
    )
    # Slurm's global indexes when CUDA_VISIBLE_DEVICES is not set; CUDA_VISIBLE_DEVICES first
    assert [gpu.index for gpu in given(SLURM_STEP_GPUS="6,7", SLURM_JOB_GPUS="0").gpus] == [6, 7]
    assert [gpu.index for gpu in given(CUDA_VISIBLE_DEVICES="1", SLURM_STEP_GPUS="6,7").gpus] == [1]
    # a device cgroup: nvidia-smi lists only the job's GPUs, CUDA_VISIBLE_DEVICES numbers them from 0
    two = preflight.given_gpus(gpus[6:], {"CUDA_VISIBLE_DEVICES": "0,1"}, FakeSmi(None))
    assert ([gpu.index for gpu in two.gpus], two.devices) == ([6, 7], 2)
    assert two.findings == (
        Finding(
            "info", None, "nvidia-smi lists only 2 GPUs, numbered otherwise than CUDA_VISIBLE_DEVICES=0,1: "
            "all are this job's"
        ),
    )  # fmt: skip


def test_a_gpu_the_job_names_but_nvidia_smi_does_not_list_fails() -> None:
    environ = {"CUDA_VISIBLE_DEVICES": "6,9"}
    gpus, findings = preflight.observe(FakeSmi(ok("gpus.csv")), 2, 1024, environ)
    assert [gpu.index for gpu in gpus] == [6]
    errors = [f.reason for f in findings if f.severity == "error"]
    assert errors == [
        "CUDA_VISIBLE_DEVICES=6,9 names 9, which nvidia-smi does not list",
        "1 GPU visible (CUDA_VISIBLE_DEVICES=6,9), the job asked for 2 per node",
    ]


def test_a_name_cuda_cannot_read_ends_the_list_as_in_cuda() -> None:
    """CUDA uses the devices before a name it cannot read (old Slurm's 'NoDevFiles', a typo)."""
    given = preflight.given_gpus(smi.parse_gpus(sample("gpus.csv")), {"CUDA_VISIBLE_DEVICES": "2,x,3"},
                                 FakeSmi(None))  # fmt: skip
    assert ([gpu.index for gpu in given.gpus], given.devices) == ([2], 1)
    assert given.findings[0] == Finding(
        "warn",
        None,
        "CUDA_VISIBLE_DEVICES=2,x,3: 'x' is no GPU index or UUID, and CUDA uses only the devices before it",
    )
    empty = preflight.given_gpus(smi.parse_gpus(sample("gpus.csv")), {"CUDA_VISIBLE_DEVICES": ""},
                                 FakeSmi(None))  # fmt: skip
    assert (empty.gpus, empty.devices) == ([], 0)


def test_gpus_of_several_models_numbered_by_index_are_said() -> None:
    gpus = smi.parse_gpus(sample("gpus.csv"))
    mixed = [*gpus[:4], *(replace(gpu, name="NVIDIA L40S") for gpu in gpus[4:])]
    given = preflight.given_gpus(mixed, {"CUDA_VISIBLE_DEVICES": "0,1"}, FakeSmi(None))
    assert "CUDA_DEVICE_ORDER is not PCI_BUS_ID" in given.findings[0].reason
    ordered = {"CUDA_VISIBLE_DEVICES": "0,1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert not any(
        "CUDA_DEVICE_ORDER" in f.reason for f in preflight.given_gpus(mixed, ordered, FakeSmi(None)).findings
    )


# ---- MIG devices (tests/fixtures/nvidia-smi/list-*.txt are real nvidia-smi -L answers) ----


def test_nvidia_smi_list_gives_each_mig_device_its_gpu() -> None:
    seven = smi.parse_mig_devices(sample("list-mig.txt"))
    assert len(seven) == 7 and set(seven.values()) == {0}
    assert seven["MIG-1aae4990-b962-574e-8375-119d6d9b9687"] == 0
    mixed = smi.parse_mig_devices(sample("list-mig-mixed.txt"))
    assert (len(mixed), set(mixed.values())) == (4, {0})
    old_form = (
        "GPU 1: A100-SXM4-40GB (UUID: GPU-e91edf3b)\n  MIG 3g.20gb Device 0: (UUID: MIG-GPU-e91edf3b/1/0)\n"
    )
    assert smi.parse_mig_devices(old_form) == {"MIG-GPU-e91edf3b/1/0": 1}


def mig_node() -> str:
    """A scenario of list-mig-mixed.txt's node: GPU 0 cut into 4 MIG devices, another job on one of them."""
    listed = [line for line in sample("list-mig-mixed.txt").splitlines() if line.startswith("GPU")]
    gpus = []
    for line in listed:
        index, rest = line[4:].split(": ", 1)
        name, uuid = rest.rsplit(" (UUID: ", 1)
        util = "[N/A]" if index == "0" else "0"
        gpus.append(f"gpu {index}, {uuid.rstrip(')')}, {name}, {util}, 9000, 81920, 30, 70.00, 400.00")
    migs = [f"mig 0, 1g.20gb, {uuid}" for uuid in smi.parse_mig_devices(sample("list-mig-mixed.txt"))]
    apps = [f"app 5150, /usr/bin/python3, 9000, {gpus[0].split(', ')[1]}"]
    return "\n".join([*gpus, *migs, *apps]) + "\n"


def test_a_job_of_mig_devices_counts_its_devices(tmp_path: Path, scenarios: Path) -> None:
    """Two MIG devices of GPU 0 and whole GPU 1: 3 devices; another job's process on GPU 0 may be on a MIG
    device of its own, so it is said, not failed."""
    (scenarios / "mig").write_text(mig_node())
    migs = list(smi.parse_mig_devices(sample("list-mig-mixed.txt")))
    given = f"{migs[0]},{migs[1][:12]},{sample('list-mig-mixed.txt').split('UUID: ')[6][:40]}"
    done = run(tmp_path, scenarios, "mig", "--mode=fail", gpus=3, given=given)
    assert (done.returncode, done.stdout) == (0, ""), done.stderr
    assert (
        "GPU 0 is cut into MIG devices, some of them maybe another job's: pid 5150 (python3, 9000 MiB)"
        in (done.stderr)
    )
    (check,) = preflight_log.read_checks(tmp_path / protocol.PREFLIGHT)
    assert [gpu.index for gpu in check.gpus] == [0, 1]
    too_few = run(tmp_path, scenarios, "mig", "--mode=fail", gpus=7, given=migs[0])
    assert too_few.stdout == f"1 GPU visible (CUDA_VISIBLE_DEVICES={migs[0]}), the job asked for 7 per node\n"


def test_the_fake_speaks_the_forms_of_the_samples(tmp_path: Path) -> None:
    """The fake, given the samples' readings as a scenario, prints the samples byte for byte."""
    rows = [f"gpu {line}" for line in sample("gpus-noheader-nounits.csv").splitlines()]
    rows += [f"app {line}" for line in sample("apps-noheader-nounits.csv").splitlines()]
    (tmp_path / "default").write_text("\n".join(rows) + "\n")
    env = {**os.environ, "FAKE_NVIDIA_SMI_DIR": str(tmp_path), "SLURMD_NODENAME": "nodeX"}

    def fake(query: str, form: str) -> str:
        argv = [str(FAKES / "nvidia-smi"), query, f"--format={form}"]
        return subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout

    gpu_query, apps_query = smi.GPU_QUERY[0], smi.APPS_QUERY[0]
    assert fake(gpu_query, "csv") == sample("gpus.csv")
    assert fake(gpu_query, "csv,nounits") == sample("gpus-nounits.csv")
    assert fake(gpu_query, "csv,noheader,nounits") == sample("gpus-noheader-nounits.csv")
    assert fake(apps_query, "csv") == sample("apps.csv")
    assert fake(apps_query, "csv,noheader,nounits") == sample("apps-noheader-nounits.csv")
    # apps-for: the process is gone from the second query on
    (tmp_path / "default").write_text("\n".join([*rows, "apps-for 1"]) + "\n")
    assert fake(apps_query, "csv") == sample("apps.csv")
    assert fake(apps_query, "csv") == sample("apps-none.csv")
    # -L, as the real samples show it
    (tmp_path / "default").write_text(mig_node())
    listing = subprocess.run(
        [str(FAKES / "nvidia-smi"), "-L"], env=env, capture_output=True, text=True, check=True
    )
    assert listing.stdout == sample("list-mig-mixed.txt")
    bad = subprocess.run([str(FAKES / "nvidia-smi"), "--query-gpu=index,nonsense", "--format=csv"], env=env,
                         capture_output=True, text=True, check=False)  # fmt: skip
    assert (bad.returncode, bad.stdout) == (2, 'Field "nonsense" is not a valid field to query.\n\n')
