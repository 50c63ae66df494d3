"""raysub status, logs --follow and attach against a real 4-node job on the minicluster."""

import json
import re
import subprocess
from pathlib import Path

import pytest

from raysub import protocol
from tests.support.minicluster import MiniCluster
from tests.support.raysub_jobs import assert_clean, submit, wait_for

pytestmark = pytest.mark.slurm

# The driver says it runs, waits until the test lets it go, then exits 3.
DRIVER = (
    "import pathlib, time, ray\n"
    "ray.init()\n"
    "pathlib.Path('driver_running').touch()\n"
    "deadline = time.time() + 120\n"
    "while not pathlib.Path('release').exists() and time.time() < deadline:\n"
    "    time.sleep(0.2)\n"
    "print('driver done')\n"
    "raise SystemExit(3)\n"
)


def status(cluster: MiniCluster, job_id: int, workdir: Path) -> dict[str, object]:
    out = cluster.run("raysub", "status", "--json", str(job_id), "--log-dir", str(workdir))
    parsed: dict[str, object] = json.loads(out.stdout)
    return parsed


def test_status_logs_and_attach_during_and_after_a_job(minicluster: MiniCluster, slurm_tmp: Path) -> None:
    job_id, logs = submit(
        minicluster, slurm_tmp, ["--nodes", "4", "--gpus-per-node", "0", "--", "python", "-c", DRIVER]
    )
    wait_for(logs.path)
    follower = subprocess.Popen(
        ["raysub", "logs", "--follow", str(job_id)],
        cwd=slurm_tmp,
        env=minicluster.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        wait_for(slurm_tmp / "driver_running")
        during = status(minicluster, job_id, slurm_tmp)
        assert (during["phase"], during["workers_joined"], during["workers_expected"]) == (
            "driver running",
            3,
            3,
        )

        worker1_host = re.search(r"raysub worker 1 on (\S+):", logs.worker_log(1, 3).read_text())
        assert worker1_host is not None
        attach = [
            "raysub",
            "attach",
            str(job_id),
            "--log-dir",
            str(slurm_tmp),
            "--worker",
            "1",
            "--",
            "hostname",
        ]
        attached = minicluster.run(*attach)
        assert attached.stdout.strip() == worker1_host[1]

        (slurm_tmp / "release").touch()
        result = minicluster.wait(job_id)
        assert result.exit_code == 3
        out, err = follower.communicate(timeout=60)
    finally:
        follower.kill()
    tags = {line.split(" | ", 1)[0].strip() for line in out.splitlines() if " | " in line}
    assert {"head", "w00", "w01", "w02", "driver"} <= tags, out + err
    assert "driver | driver done" in out

    after = status(minicluster, job_id, slurm_tmp)
    assert after["phase"] == "finished with exit code 3"
    assert after["ended"] == "driver exited with status 3"
    assert logs.file(protocol.NODE_MAP).read_text().count("\n") == 4
    assert_clean(minicluster, job_id)
