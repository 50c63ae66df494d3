"""The node provider of Ray's autoscaler (--autoscale, raysub/job/lib/slurm_provider.py), against Ray's node
table as the GCS client gives it and sbatch, squeue and scancel stand-ins that answer in Slurm's formats
(squeue --format=%i|%T|%r, sbatch --parsable). tests/slurm/test_grow.py runs it under Ray's autoscaler on
the minicluster; here are what the minicluster cannot show at will: a grow job stuck in the queue, sbatch
refusing, the GCS not answering."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("ray.autoscaler.node_provider")

from ray.autoscaler.node_launch_exception import NodeLaunchException
from ray.autoscaler.tags import TAG_RAY_NODE_KIND, TAG_RAY_NODE_STATUS

from raysub import protocol
from raysub.job.lib import gcs, slurm_provider
from raysub.protocol import grow_jobs

HEAD, WORKER = "aa" * 28, "bb" * 28


def node(node_id: str, name: str, head: bool = False, grown: int | None = None) -> SimpleNamespace:
    resources = {"CPU": 4.0, **({protocol.NODE_ID_RESOURCE: float(grown)} if grown is not None else {})}
    return SimpleNamespace(
        node_id=bytes.fromhex(node_id),
        state=gcs.ALIVE,
        is_head_node=head,
        node_name=name,
        resources_total=resources,
    )


class Table:
    """Ray's node table, as the GCS client gives it; ``broken`` makes the next read fail."""

    def __init__(self) -> None:
        self.nodes = [node(HEAD, "node1", head=True), node(WORKER, "node2")]
        self.broken = False

    def get_all_node_info(self, timeout: float) -> dict[bytes, Any]:
        if self.broken:
            raise RuntimeError("the GCS did not answer")
        return {n.node_id: n for n in self.nodes}


@pytest.fixture
def slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """sbatch, squeue and scancel that write their argv (and sbatch its environment) to calls.jsonl; squeue
    prints the file queue, sbatch a job id from next_id or fails with refuse's text."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sbatch", "squeue", "scancel"):
        path = bin_dir / tool
        path.write_text(
            "#!/usr/bin/env python3\n"
            "import json, os, pathlib, sys\n"
            "here = pathlib.Path(__file__).parent.parent\n"
            f"call = {{'tool': {tool!r}, 'argv': sys.argv[1:], 'env': dict(os.environ)}}\n"
            "with open(here / 'calls.jsonl', 'a') as out:\n"
            "    out.write(json.dumps(call) + '\\n')\n"
            f"if {tool!r} == 'squeue':\n"
            "    print((here / 'queue').read_text() if (here / 'queue').exists() else '', end='')\n"
            f"if {tool!r} == 'sbatch':\n"
            "    if (here / 'refuse').exists():\n"
            "        sys.exit((here / 'refuse').read_text())\n"
            "    number = int((here / 'next_id').read_text())\n"
            "    (here / 'next_id').write_text(str(number + 1))\n"
            "    print(f'{number};cluster')\n"
        )
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "next_id").write_text("501")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return tmp_path


def calls(slurm: Path, tool: str) -> list[dict[str, Any]]:
    lines = (slurm / "calls.jsonl").read_text().splitlines() if (slurm / "calls.jsonl").exists() else []
    return [call for call in map(json.loads, lines) if call["tool"] == tool]


def provider(slurm: Path, monkeypatch: pytest.MonkeyPatch, table: Table, **config: Any) -> Any:
    log_dir = slurm / "42-logs"
    log_dir.mkdir(mode=0o750, exist_ok=True)
    monkeypatch.setattr(gcs, "connect", lambda address: table)
    settings = {
        "log_dir": str(log_dir),
        "address": "198.18.0.11:6379",
        "job_name": "raysub-autoscale-42",
        "queue_timeout": 600,
        "slurm_look": 0,
        "env_names": ["WANDB_API_KEY"],
        **config,
    }
    return slurm_provider.SlurmNodeProvider(settings, "raysub-42")


def test_the_jobs_own_nodes_are_listed_as_ray_has_them_and_never_ended(
    slurm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = Table()
    scaler = provider(slurm, monkeypatch, table)
    assert sorted(scaler.non_terminated_nodes({})) == sorted([HEAD, WORKER])
    assert scaler.node_tags(HEAD)[TAG_RAY_NODE_KIND] == "head"
    assert scaler.node_tags(WORKER)[TAG_RAY_NODE_KIND] == "unmanaged"
    assert scaler.internal_ip(WORKER) == WORKER  # use_node_id_as_ip: Ray's monitor keys it by its id
    scaler.terminate_node(WORKER)
    assert not calls(slurm, "scancel")
    assert calls(slurm, "squeue") == []  # no grow job: Slurm is not asked


def test_a_created_node_is_a_one_node_grow_job_with_the_jobs_env_and_no_slurm_variables_of_the_head(
    slurm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "secret")
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_NTASKS", "1")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm-site/slurm.conf")
    table = Table()
    scaler = provider(slurm, monkeypatch, table, partitions=["scavenger", "low"], exclusive=True)
    scaler.create_node({}, {"ray-launch-config": "x"}, 2)
    submitted = calls(slurm, "sbatch")
    assert len(submitted) == 2
    argv, env = submitted[0]["argv"], submitted[0]["env"]
    log_dir = slurm / "42-logs"
    assert argv[-1] == str(log_dir / protocol.GROW_SCRIPT)
    assert {"--nodes=1", "--job-name=raysub-autoscale-42", "--partition=scavenger,low", "--exclusive"} <= set(
        argv
    )
    assert f"--output={log_dir / protocol.GROW_DIR}/%j.out" in argv
    assert env["WANDB_API_KEY"] == "secret" and env[protocol.ENV_GROWN_LOG_DIR] == str(log_dir)
    assert [name for name in env if name.startswith("SLURM_")] == ["SLURM_CONF"]
    marks = grow_jobs.read_all(log_dir)
    assert [(m.job_id, m.nodes, m.by) for m in marks] == [("501", 1, "autoscale"), ("502", 1, "autoscale")]
    # Waiting in the queue: setting up, with Slurm's reason said once; in Ray: up to date.
    (slurm / "queue").write_text("501|RUNNING|None\n502|PENDING|Resources\n")
    table.nodes.append(node("cc" * 28, "node3", grown=501))
    assert sorted(scaler.non_terminated_nodes({TAG_RAY_NODE_KIND: "worker"})) == ["501", "502"]
    assert scaler.is_running("501") and not scaler.is_running("502")
    assert scaler.node_tags("502")[TAG_RAY_NODE_STATUS] == "setting-up"
    scaler.non_terminated_nodes({})
    told = (log_dir / protocol.AUTOSCALE_LOG).read_text()
    assert told.count("grow job 502 waits in Slurm's queue: Resources") == 1, told
    assert "grow job 501 is in Ray" in told
    # Released: scancel, and it is gone at once.
    scaler.terminate_node("501")
    assert [call["argv"] for call in calls(slurm, "scancel")] == [["501"]]
    assert scaler.is_terminated("501")


def test_on_shared_nodes_a_grow_job_avoids_the_nodes_in_the_cluster(
    slurm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scaler = provider(slurm, monkeypatch, Table())
    scaler.non_terminated_nodes({})
    scaler.create_node({}, {}, 1)
    assert "--exclude=node1,node2" in calls(slurm, "sbatch")[0]["argv"]


def test_a_grow_job_past_the_queue_timeout_is_cancelled_saying_why_and_one_gone_from_slurm_is_forgotten(
    slurm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scaler = provider(slurm, monkeypatch, Table(), queue_timeout=0)
    scaler.create_node({}, {}, 2)
    (slurm / "queue").write_text("501|PENDING|QOSMaxNodePerUserLimit\n")
    assert scaler.non_terminated_nodes({}) == [HEAD, WORKER]  # 501 cancelled, 502 left Slurm's queue
    assert [call["argv"] for call in calls(slurm, "scancel")] == [["501"]]
    told = (slurm / "42-logs" / protocol.AUTOSCALE_LOG).read_text()
    assert (
        "grow job 501 cancelled: waited in the queue past --autoscale-queue-timeout (QOSMaxNodePerUserLimit)"
        in told
    )
    assert "grow job 502 has left Slurm's queue" in told


def test_a_refused_sbatch_is_a_failed_launch_that_says_why_and_a_gcs_that_does_not_answer_changes_nothing(
    slurm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = Table()
    scaler = provider(slurm, monkeypatch, table)
    (slurm / "refuse").write_text("sbatch: error: invalid partition specified: gpu")
    with pytest.raises(NodeLaunchException):
        scaler.create_node({}, {}, 1)
    told = (slurm / "42-logs" / protocol.AUTOSCALE_LOG).read_text()
    assert "a grow job could not be submitted: sbatch: error: invalid partition specified: gpu" in told
    listed = scaler.non_terminated_nodes({})
    table.broken = True
    assert scaler.non_terminated_nodes({}) == listed


def test_a_restarted_autoscaler_knows_the_grow_jobs_it_submitted(
    slurm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = provider(slurm, monkeypatch, Table())
    first.create_node({}, {}, 1)
    (slurm / "queue").write_text("501|RUNNING|None\n")
    again = provider(slurm, monkeypatch, Table())
    assert "501" in again.non_terminated_nodes({})
