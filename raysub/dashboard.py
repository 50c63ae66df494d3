"""raysub dashboard: how to reach a running job's Ray dashboard from a laptop, through the login node.

The head records where its dashboard listens (LOG_DIR/dashboard_address) as it becomes ready; that port
is the job's own with --ports block, so it changes from job to job. An ``ssh -L`` through the login node
brings it to a port of the laptop (the CLI's --local-port, by default Ray's 8265, where ``ray job submit``
looks first). With --auth token the dashboard wants the job's token: the web page asks for it once (and
keeps it in a cookie), API clients send it as ``Authorization: Bearer <token>`` (Ray 2.52's
``http_token_authentication``).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass

from raysub.jobs import Job
from raysub.protocol import read_trusted


class NoDashboard(RuntimeError):
    """The job has no dashboard to reach now; the message says why."""


@dataclass(frozen=True)
class Tunnel:
    """The way from a laptop to one job's dashboard: an ssh port forward through ``login``."""

    job_id: str
    address: str  # <host>:<port> on the cluster, as the head recorded it
    login: str  # [user@]host that the laptop can ssh to and that reaches the head
    local_port: int
    token: str | None  # with --auth token

    @property
    def ssh(self) -> str:
        host, _, port = self.address.rpartition(":")
        target = f"[{host}]" if ":" in host else host  # an IPv6 address, as ssh -L wants it
        return shlex.join(["ssh", "-N", "-L", f"{self.local_port}:{target}:{port}", self.login])

    @property
    def url(self) -> str:
        return f"http://localhost:{self.local_port}"

    @property
    def header(self) -> str | None:
        return None if self.token is None else f"Authorization: Bearer {self.token}"

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "ssh": self.ssh, "url": self.url, "header": self.header}, indent=2)

    def describe(self) -> str:
        """What to run on the laptop, and what to give the dashboard."""
        lines = [
            f"job {self.job_id}: Ray's dashboard listens on {self.address}. On your laptop:",
            f"  {self.ssh}",
            f"then open {self.url} (ray job submit --address {self.url} works the same way).",
        ]
        if self.header is None:
            lines.append(
                "The job runs without token authentication (--auth none): the page asks for nothing."
            )
        else:
            lines += [
                "The page asks once for the job's token; scripts and curl send it as the header",
                f"  {self.header}",
                "(or RAY_AUTH_TOKEN=<token> for Ray's own tools). Whoever has it can run code as you in "
                "this job: keep it out of shared notes.",
            ]
        return "\n".join(lines)


def tunnel(job: Job, login: str, local_port: int) -> Tunnel:
    """The tunnel to ``job``'s dashboard. NoDashboard when the job ended, its head is not up yet, or it
    runs without a dashboard."""
    logs = job.logs
    ended = logs.ended_reason()
    if ended is not None:
        raise NoDashboard(f"job {job.job_id} has ended ({ended}): its dashboard is gone")
    address = logs.dashboard_address()
    if address is None:
        if logs.head_address() is None:
            raise NoDashboard(
                f"job {job.job_id}: the head is not up yet, and the dashboard starts with it "
                f"(raysub status {job.job_id} --follow shows when)"
            )
        raise NoDashboard(f"job {job.job_id} runs without a dashboard (rendered with --no-dashboard)")
    token = read_trusted(logs.auth_token)
    return Tunnel(job.job_id, address, login, local_port, None if token is None else token.strip())
