"""raysub grow's batch script and the checks before it is submitted (the minicluster runs it for real:
tests/slurm/test_grow.py): every value quoted, every shellcheck at hand clean, and a clear refusal when the
job cannot be grown."""

import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raysub import protocol
from raysub.elastic import members, shrink
from raysub.errors import SpecError
from raysub.job.grow import Grow, render_grow
from raysub.job.programs import leave
from raysub.jobs import Job
from raysub.protocol import grow_jobs
from raysub.protocol.grow_jobs import GrowMark, Leave
from raysub.protocol.logdir import LogDir
from raysub.slurm import SlurmState, queue_states
from raysub.status import read_status
from raysub.timing import Timing
from tests.conftest import RunCli
from tests.unit.test_validate_shellcheck import SHELLCHECKS

# What a LOG_DIR path may hold (render refuses %, backslashes and control characters in it).
PATH_TEXT = st.text(
    st.characters(codec="utf-8", exclude_characters="\0%\\/\x7f", min_codepoint=32), min_size=1
)


@settings(max_examples=50, deadline=None)
@given(name=PATH_TEXT, partition=PATH_TEXT)
def test_the_grow_script_holds_any_log_dir_and_partition_exactly(name: str, partition: str) -> None:
    log_dir = Path("/lustre/runs") / f"{name}-logs"
    script = render_grow(Grow(LogDir(log_dir), 2, partition=partition, sbatch_args=("--qos=low",)))
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    assignment = next(line for line in script.split("\n") if line.startswith("GROWN_LOG_DIR="))
    said = subprocess.run(
        ["bash", "-c", f'{assignment}\nprintf %s "$GROWN_LOG_DIR"'],
        capture_output=True,
        text=True,
        check=True,
    )
    assert said.stdout == str(log_dir)
    assert "#SBATCH --nodes=2\n" in script and "#SBATCH --qos=low\n" in script


@pytest.mark.parametrize("which", sorted(SHELLCHECKS))
def test_the_grow_script_is_shellcheck_clean(which: str, tmp_path: Path) -> None:
    script = tmp_path / "grow.sub"
    script.write_text(render_grow(Grow(LogDir(tmp_path / "7-logs"), 1, "scavenger", "1:00:00")))
    checked = subprocess.run([SHELLCHECKS[which](), str(script)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout


@pytest.mark.parametrize(
    ("grow", "option"),
    [
        (Grow(LogDir(Path("/x")), 0), "--nodes"),
        (Grow(LogDir(Path("/x")), 1, partition="a\nb"), "--partition"),
        (Grow(LogDir(Path("/x")), 1, sbatch_args=("--nodes=4",)), "--sbatch-arg"),
        (Grow(LogDir(Path("/x")), 1, sbatch_args=("qos=low",)), "--sbatch-arg"),
    ],
)
def test_a_value_the_grow_job_cannot_use_names_its_option(grow: Grow, option: str) -> None:
    with pytest.raises(SpecError) as caught:
        render_grow(grow)
    assert caught.value.option == option


def test_a_job_is_grown_only_while_its_ray_runs_and_by_a_raysub_that_records_its_steps(
    raysub_cli: RunCli, tmp_path: Path
) -> None:
    logs = LogDir.of(tmp_path, 4711)
    logs.path.mkdir()
    said = raysub_cli("grow", "4711", "--log-dir", str(tmp_path))
    assert said.code == 1 and "Ray has not started yet" in said.stderr, said.stderr
    logs.file(protocol.STARTED_RAY_HEAD).write_text("10.0.0.1:6379\n")
    said = raysub_cli("grow", "4711", "--log-dir", str(tmp_path))
    assert said.code == 1 and f"has no {protocol.STEP_ENV}" in said.stderr, said.stderr
    logs.ended.write_text("driver exited with status 0\n")
    said = raysub_cli("grow", "4711", "--log-dir", str(tmp_path))
    assert said.code == 1 and "has ended: driver exited with status 0" in said.stderr, said.stderr
    said = raysub_cli("grow", "4711", "--log-dir", str(tmp_path), "--sbatch-arg=--nodes=9")
    assert said.code == 2 and "raysub grow sets --nodes itself" in said.stderr, said.stderr
    assert (
        raysub_cli("shrink", "4711", "--log-dir", str(tmp_path)).stdout == "job 4711 has no grow job to end\n"
    )
    assert raysub_cli("shrink", "4711", "--log-dir", str(tmp_path), "--list", "--json").stdout == "[]\n"


# Leaving through Ray's drain (raysub shrink, Slurm's warning signal) and the cluster's members.


def test_a_leave_file_is_read_as_written_and_the_first_word_wins(tmp_path: Path) -> None:
    path = grow_jobs.leave_path(tmp_path, "4790")
    path.parent.mkdir()
    assert grow_jobs.read_leave(path) is None
    grow_jobs.write_leave(tmp_path, "4790", Leave(1_800_000_000.4, "raysub shrink"))
    grow_jobs.write_leave(tmp_path, "4790", Leave(1_900_000_000, "later"))
    assert grow_jobs.read_leave(path) == Leave(1_800_000_000, "raysub shrink")
    for torn in ("", "17", "soon raysub shrink", "\xff\xfe"):
        path.write_text(torn)
        assert grow_jobs.read_leave(path) in (None, Leave(17, "no reason given"))


def test_the_grow_script_writes_the_leave_file_on_slurms_warning_signal_as_the_reader_reads_it(
    tmp_path: Path,
) -> None:
    script = render_grow(Grow(LogDir(tmp_path / "7-logs"), 1))
    assert f"#SBATCH --signal=B:USR1@{Timing.grow_warn_s}\n" in script
    warned = script[script.index("warned() {") : script.index("trap warned USR1")]
    leave_file = tmp_path / f"4790{protocol.GROW_LEAVE}"
    before = time.time()
    subprocess.run(
        [
            "bash",
            "-c",
            f'set -eu\nleave_file="$1" file_mode=640\n{warned}\nwarned\nwarned',
            "_",
            str(leave_file),
        ],
        check=True,
    )
    leave = grow_jobs.read_leave(leave_file)
    assert leave is not None and leave.why == "Slurm's warning signal (its time limit or a preemption)"
    drain = Timing.grow_drain_s
    assert int(before) + drain <= leave.deadline <= time.time() + drain
    assert leave_file.stat().st_mode & 0o777 == 0o640
    assert [path.name for path in tmp_path.iterdir()] == [leave_file.name]


def test_a_grow_node_finds_itself_in_rays_node_table_by_its_temp_dir_else_its_address() -> None:
    def info(node: str, temp_dir: str, ip: str, state: int = 0) -> SimpleNamespace:
        return SimpleNamespace(
            node_id=bytes.fromhex(node), temp_dir=temp_dir, node_manager_address=ip, state=state
        )

    table = [
        info("aa", "/tmp/rs-head", "10.0.0.1"),
        info("bb", "/tmp/rs-one", "10.0.0.3"),
        info("cc", "/tmp/rs-two", "10.0.0.3"),  # two grow jobs' nodes on one host (--no-exclusive)
        info("dd", "/tmp/rs-old", "10.0.0.4", state=1),  # dead
    ]
    assert leave.this_node(table, "/tmp/rs-two", "10.0.0.3") == "cc"
    assert leave.this_node(table, "/tmp/rs-other", "10.0.0.1") == "aa"  # a Ray without temp_dir in its table
    assert leave.this_node(table, "/tmp/rs-other", "10.0.0.3") is None  # which one: not guessed
    assert leave.this_node(table, "/tmp/rs-old", "10.0.0.4") is None


class FakeSlurm:
    """Slurm's word on grow jobs for raysub shrink and status: ``queue`` the state of each job in the queue
    (a job leaves it once its leave file exists, after ``leaves_after`` looks); what was cancelled."""

    def __init__(self, queue: dict[str, str], leaves_after: dict[str, int] | None = None) -> None:
        self.queue = queue
        self.leaves_after = leaves_after or {}
        self.cancelled: list[str] = []

    def job_state(self, job_id: str) -> SlurmState:
        if job_id in self.leaves_after:
            self.leaves_after[job_id] -= 1
            if self.leaves_after[job_id] < 0:
                self.queue.pop(job_id, None)
        return SlurmState(self.queue.get(job_id), reason="Resources")

    def queue_states(self, job_ids: list[str]) -> dict[str, SlurmState]:
        return {job_id: self.job_state(job_id) for job_id in job_ids if job_id in self.queue}

    def cancel(self, job_id: str) -> None:
        self.cancelled.append(job_id)
        self.queue.pop(job_id, None)


def grown_job(
    tmp_path: Path, marks: dict[str, int], monkeypatch: pytest.MonkeyPatch, slurm: FakeSlurm
) -> Job:
    logs = LogDir.of(tmp_path, 4711)
    logs.path.mkdir(parents=True)
    for job_id, nodes in marks.items():
        grow_jobs.write(logs.path, GrowMark(job_id, nodes, "grow", time.time()))
    for name in ("job_state", "queue_states", "cancel"):
        monkeypatch.setattr(f"raysub.slurm.{name}", getattr(slurm, name))
    monkeypatch.setattr("raysub.elastic.SHRINK_LOOK_S", 0)
    return Job("4711", 0, logs)


def test_shrink_drains_a_running_grow_job_and_cancels_it_only_when_it_stays_past_the_drain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slurm = FakeSlurm({"4790": "RUNNING", "4791": "PENDING", "4792": "RUNNING"}, leaves_after={"4790": 2})
    job = grown_job(tmp_path, {"4790": 2, "4791": 1, "4792": 1}, monkeypatch, slurm)
    monkeypatch.setattr("raysub.elastic.TIMING", Timing(grow_leave_s=0))
    ended = shrink(job, drain=0.3)
    assert [grown.job_id for grown in ended] == ["4790", "4791", "4792"]
    # The queued one at once; the one that did not leave by the drain's end, then; not the one that left.
    assert slurm.cancelled == ["4791", "4792"]
    for job_id in ("4790", "4792"):
        told = grow_jobs.read_leave(grow_jobs.leave_path(job.logs.path, job_id))
        assert told is not None and told.why == "raysub shrink"
    assert grow_jobs.read_leave(grow_jobs.leave_path(job.logs.path, "4791")) is None
    # --drain 0: scancel at once, no leave file.
    slurm = FakeSlurm({"4793": "RUNNING"})
    job = grown_job(tmp_path / "again", {"4793": 1}, monkeypatch, slurm)
    assert [grown.job_id for grown in shrink(job, drain=0)] == ["4793"] and slurm.cancelled == ["4793"]
    assert grow_jobs.read_leave(grow_jobs.leave_path(job.logs.path, "4793")) is None


def test_the_members_of_a_grown_cluster_are_queued_joining_up_draining_or_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slurm = FakeSlurm({"4790": "PENDING", "4791": "RUNNING", "4792": "RUNNING", "4793": "RUNNING"})
    job = grown_job(tmp_path, {"4790": 1, "4791": 2, "4792": 1, "4793": 1, "4794": 1}, monkeypatch, slurm)
    for job_id, hosts in {"4791": ["node3", "node4"], "4792": ["node5"], "4793": ["node6"]}.items():
        directory = job.logs.path / protocol.GROW_DIR / job_id
        directory.mkdir()
        for k, host in enumerate(hosts):
            (directory / f"worker-{k}.log").write_bytes(
                f"12:00:01 raysub worker {k} on {host}: joining 10.0.0.1:6379\n\xff\n".encode("latin-1")
            )
    grow_jobs.write_leave(job.logs.path, "4793", Leave(time.time() + 60, "raysub shrink"))
    grow_jobs.write_leave(job.logs.path, "4794", Leave(time.time(), "Slurm's warning signal"))
    found = {member.job_id: member for member in members(job, {"node1", "node2", "node3", "node5", "node6"})}
    assert [(m.state, m.detail, m.hosts) for m in found.values()] == [
        ("queued", "waiting for nodes to become free (Resources)", []),
        ("joining", "1 of 2 in Ray", ["node3", "node4"]),
        ("up", "", ["node5"]),
        ("draining", "raysub shrink", ["node6"]),
        ("gone", "left Ray: Slurm's warning signal", []),
    ]
    assert found["4791"].describe() == "grow job 4791 (grow): 2 node(s) (node3 node4), joining: 1 of 2 in Ray"
    # squeue refusing the list (a lone job id Slurm forgot): each job is asked on its own.
    monkeypatch.setattr("raysub.slurm.queue_states", lambda job_ids: None)
    slurm.queue["4794"] = "COMPLETED"  # scontrol's word on a job that left the queue
    slurm.queue.pop("4790")  # known to no Slurm tool
    alone = {member.job_id: member.state for member in members(job, {"node5"})}
    assert alone == {"4790": "unknown", "4791": "joining", "4792": "up", "4793": "draining", "4794": "gone"}
    monkeypatch.setattr("raysub.slurm.queue_states", slurm.queue_states)
    protocol.write_joined_nodes(job.logs.path, ["node1", "node2", "node5"])
    status = read_status(job, SlurmState("RUNNING"), time.time())
    assert len(status.members) == 5
    assert status.members[-1]["state"] == "gone"  # not in squeue's list: COMPLETED is not in the queue
    assert "  grow job 4792 (grow): 1 node(s) (node5), up" in status.describe().splitlines()


def test_queue_states_asks_squeue_once_for_all_grow_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def squeue(*args: str) -> str:
        calls.append(args)
        return "4790|PENDING|Priority|N/A\n4791|RUNNING|None|2026-12-01T10:00:00\n"

    monkeypatch.setattr("raysub.slurm._run", squeue)
    states = queue_states(["4790", "4791", "4792"])
    assert calls == [("squeue", "-h", "-j", "4790,4791,4792", "-o", "%i|%T|%r|%S")]
    assert states is not None
    assert {job_id: state.state for job_id, state in states.items()} == {"4790": "PENDING", "4791": "RUNNING"}
    assert states["4790"].pending == "jobs of higher priority go first (Priority)"
    assert queue_states([]) == {}
    monkeypatch.setattr("raysub.slurm._run", lambda *args: None)  # squeue failed
    assert queue_states(["4790"]) is None


def test_shrink_says_why_it_cannot_tell_a_grow_job_to_leave(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raysub_cli: RunCli
) -> None:
    slurm = FakeSlurm({"4790": "RUNNING"})
    grown_job(tmp_path, {"4790": 1}, monkeypatch, slurm)

    def refused(*args: object) -> None:
        raise PermissionError(13, "Permission denied", "grow/4790.leave")

    monkeypatch.setattr("raysub.protocol.grow_jobs.write_leave", refused)
    said = raysub_cli("shrink", "4711", "--log-dir", str(tmp_path))
    assert said.code == 1 and "cannot tell grow job 4790 to leave: [Errno 13]" in said.stderr, said.stderr
    assert "Traceback" not in said.stderr and slurm.cancelled == []
