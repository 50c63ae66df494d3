"""A job id is found from any directory: --log-dir, the current directory, the job index, then Slurm's record
(fake scontrol and sacct that print what the real ones print); a miss names every place looked."""

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from raysub import protocol
from raysub.protocol.job_index import IndexEntry, append_job_index, read_job_index
from raysub.slurm import JobRecord, SlurmState
from tests.conftest import RunCli
from tests.unit.test_operator_cli import write_attempt

# `scontrol -o show job N`: one line of Key=Value pairs (as Slurm 23 prints it), or, for a job slurmctld
# does not hold (any more), status 1 and Slurm's message. `sacct -n -X -P -o WorkDir`: one line per job of
# that id, nothing for an unknown one (or $FAKE_SACCT_ERROR and status 1). Their records live in
# $FAKE_SLURM_DIR/<N>.scontrol and <N>.sacct; every call is logged to $FAKE_SLURM_DIR/calls.
FAKE_SCONTROL = r"""#!/usr/bin/env bash
set -euo pipefail
printf 'scontrol %s\n' "$*" >>"${FAKE_SLURM_DIR:?}/calls"
if [[ ${1:-} != -o || ${2:-} != show || ${3:-} != job ]]; then
  printf 'fake scontrol: unsupported: %s\n' "$*" >&2
  exit 2
fi
record="${FAKE_SLURM_DIR}/${4:?}.scontrol"
if [[ -f $record ]]; then cat -- "$record"; exit 0; fi
printf 'slurm_load_jobs error: Invalid job id specified\n' >&2
exit 1
"""
FAKE_SACCT = r"""#!/usr/bin/env bash
set -euo pipefail
printf 'sacct %s\n' "$*" >>"${FAKE_SLURM_DIR:?}/calls"
if [[ "$*" != "-n -X -P -j "*" -o WorkDir" ]]; then
  printf 'fake sacct: unsupported: %s\n' "$*" >&2
  exit 2
fi
if [[ -n ${FAKE_SACCT_ERROR:-} ]]; then
  printf '%s\n' "$FAKE_SACCT_ERROR" >&2
  exit 1
fi
record="${FAKE_SLURM_DIR}/${5:?}.sacct"
if [[ -f $record ]]; then cat -- "$record"; fi
"""
FAKE_SQUEUE = r"""#!/usr/bin/env bash
set -euo pipefail
printf 'squeue %s\n' "$*" >>"${FAKE_SLURM_DIR:?}/calls"
"""


def scontrol_record(job_id: str, work_dir: Path, stdout: Path) -> str:
    return (
        f"JobId={job_id} JobName=raysub UserId=u(1000) GroupId=u(1000) MCS_label=N/A Priority=4294901757 "
        "Nice=0 Account=(null) QOS=normal JobState=COMPLETED Reason=None Dependency=(null) Requeue=1 "
        "Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:07 TimeLimit=00:05:00 TimeMin=N/A "
        "SubmitTime=2024-05-02T10:00:00 EligibleTime=2024-05-02T10:00:00 AccrueTime=Unknown "
        "StartTime=2024-05-02T10:00:00 EndTime=2024-05-02T10:00:07 Deadline=N/A Partition=debug "
        "AllocNode:Sid=login1:4242 ReqNodeList=(null) ExcNodeList=(null) NodeList=node[1-4] BatchHost=node1 "
        "NumNodes=4 NumCPUs=4 NumTasks=4 CPUs/Task=1 ReqB:S:C:T=0:0:*:* "
        "ReqTRES=cpu=4,mem=4G,node=4,billing=4 AllocTRES=cpu=4,mem=4G,node=4,billing=4 Socks/Node=* "
        "NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0 "
        f"Features=(null) DelayBoot=00:00:00 OverSubscribe=NO Contiguous=0 Licenses=(null) Network=(null) "
        f"Command={work_dir}/job.sub WorkDir={work_dir} StdErr={stdout} StdIn=/dev/null StdOut={stdout} "
        "Power=\n"
    )


@pytest.fixture
def fake_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Fake scontrol, sacct and squeue first on PATH; returns the directory of their records."""
    bin_dir, records = tmp_path / "fake-bin", tmp_path / "fake-slurm"
    bin_dir.mkdir()
    records.mkdir()
    for name, text in (("scontrol", FAKE_SCONTROL), ("sacct", FAKE_SACCT), ("squeue", FAKE_SQUEUE)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(stat.S_IRWXU)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM_DIR", str(records))
    return records


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An unrelated current directory."""
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


@pytest.fixture
def no_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("raysub.slurm.job_dirs", lambda job_id: JobRecord([], True, []))
    monkeypatch.setattr("raysub.slurm.job_state", lambda job_id: SlurmState("RUNNING", None, "test"))


def status_of(raysub_cli: RunCli, *args: str) -> dict[str, object]:
    result = raysub_cli("status", "--json", *args)
    assert result.code == 0, result.stderr
    parsed: dict[str, object] = json.loads(result.stdout)
    return parsed


def index(job_index: Path, log_dir: Path, restart: int = 0, started: int = 1_700_000_000) -> None:
    job_id = log_dir.name.split("-")[0]
    append_job_index(job_index, IndexEntry(job_id, restart, log_dir, started))


@pytest.mark.usefixtures("no_slurm")
def test_from_another_directory_with_only_the_index(
    raysub_cli: RunCli, tmp_path: Path, elsewhere: Path, job_index: Path
) -> None:
    first = write_attempt(tmp_path / "exp", "4711-logs", driver_done=True, joined=["node2"])
    second = write_attempt(tmp_path / "exp", "4711-1-logs", driver_done=False, joined=["node2"])
    index(job_index, first)
    index(job_index, second, restart=1)
    assert status_of(raysub_cli, "4711")["log_dir"] == str(second)
    assert status_of(raysub_cli, "4711", "--attempt", "0")["log_dir"] == str(first)
    result = raysub_cli("logs", "4711", "--attempt", "0", "--head")
    assert result.stdout.splitlines() == ["head | head line 1", "head | head line 2"]
    # Found: what monitor misses is the (absent) metrics file; report draws the attempt without it.
    assert str(first / protocol.METRICS) in raysub_cli("monitor", "4711", "--attempt", "0").stderr
    assert (
        f"({first})" in raysub_cli("report", "4711", "--attempt", "0", "-o", str(tmp_path / "r.html")).stdout
    )


@pytest.mark.usefixtures("no_slurm")
def test_log_dir_then_current_directory_then_index(
    raysub_cli: RunCli, tmp_path: Path, elsewhere: Path, job_index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    given = write_attempt(tmp_path / "given", "4711-logs", driver_done=True, joined=[])
    here = write_attempt(elsewhere, "4711-logs", driver_done=True, joined=[])
    indexed = write_attempt(tmp_path / "indexed", "4711-logs", driver_done=True, joined=[])
    index(job_index, indexed)
    assert status_of(raysub_cli, "4711", "--log-dir", str(given.parent))["log_dir"] == str(given)
    monkeypatch.setenv("RAYSUB_LOG_DIR", str(given.parent))
    assert status_of(raysub_cli, "4711")["log_dir"] == str(given)
    monkeypatch.delenv("RAYSUB_LOG_DIR")
    assert status_of(raysub_cli, "4711")["log_dir"] == str(here)
    # A --log-dir without the job is only the first place looked.
    assert status_of(raysub_cli, "4711", "--log-dir", str(tmp_path))["log_dir"] == str(here)
    monkeypatch.chdir(tmp_path)
    assert status_of(raysub_cli, "4711")["log_dir"] == str(indexed)


@pytest.mark.usefixtures("no_slurm")
def test_a_reused_job_id_is_the_later_line_unless_its_directory_is_gone(
    raysub_cli: RunCli, tmp_path: Path, elsewhere: Path, job_index: Path
) -> None:
    old = write_attempt(tmp_path / "old", "4711-logs", driver_done=True, joined=[])
    new = write_attempt(tmp_path / "new", "4711-logs", driver_done=True, joined=[])
    index(job_index, old, started=100)
    index(job_index, new, started=200)
    assert status_of(raysub_cli, "4711")["log_dir"] == str(new)
    shutil.rmtree(new)
    assert status_of(raysub_cli, "4711")["log_dir"] == str(old)


@pytest.mark.usefixtures("no_slurm")
def test_garbled_and_partial_index_lines_are_skipped(
    raysub_cli: RunCli, tmp_path: Path, elsewhere: Path, job_index: Path
) -> None:
    good = write_attempt(tmp_path / "exp", "4711-logs", driver_done=True, joined=[])
    decoy = write_attempt(tmp_path / "decoy", "4711-logs", driver_done=True, joined=[])
    index(job_index, good)
    with job_index.open("ab") as f:
        f.write(b"\x00\xff garbage\n4711\tnot a number\t" + bytes(decoy) + b"\t5\n\n4711\n")
        f.write(b"4711\t0\t" + bytes(decoy) + b"\t17")  # a line still being written
    assert status_of(raysub_cli, "4711")["log_dir"] == str(good)
    assert [e.log_dir for e in read_job_index(job_index)] == [good]


def test_found_through_scontrol_then_sacct(
    raysub_cli: RunCli, tmp_path: Path, elsewhere: Path, fake_slurm: Path
) -> None:
    submitted = tmp_path / "my exp"  # scontrol -o does not quote a value with a space
    logs = write_attempt(submitted, "4711-logs", driver_done=True, joined=[])
    record = scontrol_record("4711", submitted, submitted / "slurm-4711.out")
    (fake_slurm / "4711.scontrol").write_text(record)
    found = status_of(raysub_cli, "4711")
    assert (found["log_dir"], found["slurm_state"]) == (str(logs), "COMPLETED")

    (fake_slurm / "4711.scontrol").unlink()  # slurmctld forgot the job; the accounting still has it
    (fake_slurm / "4711.sacct").write_text(f"{tmp_path / 'reused'}\n{submitted}\n")
    assert status_of(raysub_cli, "4711")["log_dir"] == str(logs)

    # --log-dir elsewhere and the batch output next to it: scontrol's StdOut names that directory.
    out = write_attempt(tmp_path / "out", "4712-logs", driver_done=True, joined=[])
    record = scontrol_record("4712", tmp_path, out.parent / "slurm-4712.out")
    (fake_slurm / "4712.scontrol").write_text(record)
    assert status_of(raysub_cli, "4712")["log_dir"] == str(out)


def test_slurm_is_asked_only_when_nothing_else_has_the_job(
    raysub_cli: RunCli, tmp_path: Path, elsewhere: Path, fake_slurm: Path, job_index: Path
) -> None:
    index(job_index, write_attempt(tmp_path / "exp", "4711-logs", driver_done=True, joined=[]))
    assert raysub_cli("logs", "4711", "--head").code == 0
    assert not (fake_slurm / "calls").exists()


def test_the_error_names_every_place_looked(
    raysub_cli: RunCli, tmp_path: Path, elsewhere: Path, fake_slurm: Path, job_index: Path
) -> None:
    given = tmp_path / "given"
    given.mkdir()
    gone = tmp_path / "gone" / "4711-logs"
    index(job_index, gone)
    for command in ("status", "logs", "attach", "monitor", "report"):
        result = raysub_cli(command, "4711", "--log-dir", str(given))
        assert (result.code, result.stdout, result.stderr.count("\n")) == (2, "", 1), result
        assert result.stderr == (
            f"raysub: error: no log directory of job 4711: looked under {given} (--log-dir); "
            f"under {elsewhere} (the current directory); the job index {job_index} lists job 4711 only "
            "in directories that are gone; Slurm does not know job 4711\n"
        )
    assert f"the job index {job_index} has no job 9999;" in raysub_cli("status", "9999").stderr

    (fake_slurm / "4711.scontrol").write_text(scontrol_record("4711", tmp_path, tmp_path / "slurm-4711.out"))
    assert raysub_cli("status", "4711").stderr.endswith(f"; under {tmp_path} (Slurm's record of the job)\n")


def test_the_error_says_why_slurm_could_not_tell(
    raysub_cli: RunCli, elsewhere: Path, fake_slurm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SACCT_ERROR", "sacct: error: Slurm accounting storage is disabled")
    assert raysub_cli("status", "4711").stderr.endswith(
        "; Slurm does not know job 4711 (sacct: error: Slurm accounting storage is disabled)\n"
    )


def test_without_slurm_tools_the_error_says_so(
    raysub_cli: RunCli, elsewhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(elsewhere))
    result = raysub_cli("status", "4711")
    assert result.stderr.endswith(
        "; Slurm could not be asked (scontrol is not installed here; sacct is not installed here)\n"
    )


def test_no_job_argument_is_still_the_most_recent_job_here(
    raysub_cli: RunCli, tmp_path: Path, elsewhere: Path, job_index: Path, no_slurm: None
) -> None:
    index(job_index, write_attempt(tmp_path / "exp", "4711-logs", driver_done=True, joined=[]))
    result = raysub_cli("status")
    assert result.stderr == (
        f"raysub: error: no raysub job under {elsewhere}; give a job id or a log directory\n"
    )
    write_attempt(elsewhere, "4700-logs", driver_done=True, joined=[])
    assert status_of(raysub_cli)["job_id"] == "4700"


@pytest.mark.usefixtures("no_slurm")
def test_a_drivers_environment_does_not_steer_the_lookup(
    raysub_cli: RunCli, tmp_path: Path, elsewhere: Path, job_index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the batch script exports to its steps, and so to the driver of job 4711.
    running = write_attempt(tmp_path / "exp", "4711-logs", driver_done=False, joined=[])
    monkeypatch.setenv(protocol.ENV_LOG_DIR, str(running))
    monkeypatch.setenv(protocol.ENV_CANARY, "4711-0-12345")
    monkeypatch.setenv(protocol.ENV_NODE_LIST, "node1 node2")
    monkeypatch.delenv("RAYSUB_LOG_DIR", raising=False)
    # Were the attempt's directory taken for --log-dir, this is what `raysub status 4800` would find.
    write_attempt(running, "4800-logs", driver_done=True, joined=[])
    other = write_attempt(tmp_path / "other", "4800-logs", driver_done=True, joined=[])
    index(job_index, other)
    assert status_of(raysub_cli, "4800")["log_dir"] == str(other)
    missing = raysub_cli("status", "4900")
    assert missing.code == 2
    assert str(running) not in missing.stderr

    rendered = raysub_cli("render", "--nodes", "1", "--", "true")
    assert rendered.code == 0, rendered.stderr
    assert str(running) not in rendered.stdout


@pytest.mark.usefixtures("no_slurm")
def test_an_array_jobs_id_lists_its_tasks_and_id_task_names_one(
    raysub_cli: RunCli, tmp_path: Path, elsewhere: Path, job_index: Path
) -> None:
    runs = tmp_path / "sweep"
    tasks = [write_attempt(runs, f"900_{task}-logs", driver_done=True, joined=["node2"]) for task in (10, 2)]
    requeued = write_attempt(runs, "900_2-1-logs", driver_done=False, joined=["node2"])
    write_attempt(runs, "9001-logs", driver_done=True, joined=["node2"])  # another job, not a task of 900
    for log_dir in (*tasks, requeued):
        index(job_index, log_dir)
    # From anywhere, through the job index: each task once (its newest attempt), in task order.
    result = raysub_cli("status", "--json", "900")
    assert result.code == 0, result.stderr
    shown = [task["log_dir"] for task in json.loads(result.stdout)]
    assert shown == [str(requeued), str(tasks[0])]
    assert status_of(raysub_cli, "900_10")["log_dir"] == str(tasks[0])
    assert status_of(raysub_cli, "900_2", "--attempt", "0")["log_dir"] == str(tasks[1])
    assert status_of(raysub_cli, str(tasks[0]))["log_dir"] == str(tasks[0])
    follow = raysub_cli("status", "--follow", "900")
    assert follow.code == 2 and "follow one: 900_2" in follow.stderr, follow.stderr
    # --attempt takes one task; an array with one task started so far is still shown as a list.
    attempt = raysub_cli("status", "900", "--attempt", "0")
    assert attempt.code == 2 and "--attempt takes one task, 900_2" in attempt.stderr, attempt.stderr
    lone = write_attempt(tmp_path / "other", "901_5-logs", driver_done=True, joined=["node2"])
    index(job_index, lone)
    [only] = json.loads(raysub_cli("status", "--json", "901").stdout)
    assert only["log_dir"] == str(lone)
    # A task of another array, and a task that never ran, are not found.
    assert raysub_cli("status", "90_2").code == 2
    assert raysub_cli("status", "900_3").code == 2
