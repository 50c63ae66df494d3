"""The sandbox on shared nodes (issue 45, item 3): without --sandbox-port each node's sandbox takes the free
port of the node's own block, so two jobs' sandboxes on one node both come up and each driver reaches its
own; a pinned port that another user's server holds keeps the job from reporting ready, and the job ends
naming the port."""

import json
import pwd
import socket
import time
from pathlib import Path

import pytest

from raysub import protocol
from raysub.protocol.logdir import LogDir
from tests.support.minicluster import MiniCluster
from tests.support.raysub_jobs import assert_clean, driver, job_report, submit

pytestmark = pytest.mark.slurm

NODE = "node3"
NOBODY = 65534  # the other user: the uid of nobody
SHARED = ["--partition=shared", "-c", "1", "--mem=500", f"--nodelist={NODE}"]
ONE_NODE = ["--nodes", "1", "--gpus-per-node", "0", "--no-exclusive", "--sandbox-timeout", "30"]
# Says its port in SANDBOX_PORTS_DIR as NeMo-Skills' sandbox image does ("<host>_ports.txt", lines
# "<worker>:<port>"), then answers on the port the job gives it, on every address, with a page naming its job.
SERVE = (
    f'printf \'0:%s\\n\' "${protocol.SANDBOX_PORT_ENV}" >"$SANDBOX_PORTS_DIR/$(hostname)_ports.txt" && '
    'cd "$(mktemp -d)" && printf \'%s\' "$SLURM_JOB_ID" >index.html && '
    f'exec python3 -m http.server "${protocol.SANDBOX_PORT_ENV}" --bind 0.0.0.0'
)
# Asks the sandbox of its node, at the port the job gave the driver, whose it is.
ASK = """
import json, os, urllib.request
port = int(os.environ["RAYSUB_NODE_SANDBOX_PORT"])
page = urllib.request.urlopen(f"http://127.0.0.1:{port}/").read().decode()
print("sandbox", json.dumps({"port": port, "job": page}), flush=True)
"""


def answered(logs: LogDir) -> dict[str, object]:
    [line] = [line for line in logs.driver_log.read_text().splitlines() if line.startswith("sandbox ")]
    result: dict[str, object] = json.loads(line.removeprefix("sandbox "))
    return result


def test_two_jobs_sandboxes_on_one_node_both_come_up_on_ports_of_their_own(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    jobs = []
    for name in ("first", "second"):  # both queued at once, on the same node
        workdir = slurm_tmp / name
        workdir.mkdir(mode=0o755)
        render = [*ONE_NODE, "--sandbox-command", SERVE, "--", "python", driver(workdir, ASK)]
        jobs.append((workdir, *submit(minicluster, workdir, render, *SHARED)))
    ports = set()
    for workdir, job_id, logs in jobs:
        result = minicluster.wait(job_id)
        assert (result.state, result.exit_code) == ("COMPLETED", 0), job_report(minicluster, workdir, job_id)
        seen = answered(logs)
        assert seen["job"] == str(job_id)  # its own sandbox, not the other job's
        ready = logs.file(f"{protocol.SANDBOX_READY_PREFIX}{NODE}").read_text().split(":")
        published = logs.file(f"{protocol.SANDBOX_PORT_PREFIX}{NODE}").read_text().strip()
        assert int(ready[1]) == int(published) == seen["port"]
        said = logs.file(f"{protocol.SANDBOX_PORTS_DIR}/{NODE}_ports.txt").read_text()
        assert said == f"0:{seen['port']}\n"  # SANDBOX_PORTS_DIR: this job's own, in its LOG_DIR
        ports.add(seen["port"])
    assert len(ports) == 2, ports
    for _, job_id, _ in jobs:
        assert_clean(minicluster, job_id)


def test_another_users_server_on_the_pinned_port_ends_the_job_naming_the_port(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    with socket.socket() as probe:  # a port nobody uses, outside Ray's
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    listen = (
        "import socket, time; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
        f"s.bind(('0.0.0.0', {port})); s.listen(); time.sleep(600)"
    )
    as_nobody = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    with minicluster.node_netns_process(NODE, *as_nobody, "/usr/bin/python3", "-c", listen):
        deadline = time.monotonic() + 10
        while not holds(minicluster, port):
            assert time.monotonic() < deadline, "the other user's server did not listen"
            time.sleep(0.1)
        render = [*ONE_NODE, "--sandbox-command", SERVE, "--sandbox-port", str(port), "--"]
        job_id, logs = submit(
            minicluster, slurm_tmp, [*render, "python", "-c", "print('driver ran')"], *SHARED
        )
        result = minicluster.wait(job_id)
    assert result.state == "FAILED", job_report(minicluster, slurm_tmp, job_id)
    ended = logs.ended.read_text()
    holder = f"user {pwd.getpwuid(NOBODY).pw_name}, uid {NOBODY}"
    assert (
        f"sandbox on {NODE}: port {port} on {NODE} is held by another process ({holder}), not this sandbox's"
        in ended
    )
    assert not list(logs.path.glob(f"{protocol.SANDBOX_READY_PREFIX}*"))
    assert "driver ran" not in (logs.driver_log.read_text() if logs.driver_log.exists() else "")
    assert_clean(minicluster, job_id)


def holds(minicluster: MiniCluster, port: int) -> bool:
    """Something listens on ``port`` in NODE's network namespace."""
    rows = minicluster.run(*minicluster.enter_node_netns(NODE), "cat", "/proc/net/tcp").stdout.splitlines()
    return any(row.split()[1].endswith(f":{port:04X}") and row.split()[3] == "0A" for row in rows[1:])
