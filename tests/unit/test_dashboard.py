"""raysub dashboard (issue 26, item 3): the ssh -L line through the login node, the URL and the token
header, from what the head recorded in LOG_DIR; one line saying why when there is no dashboard to reach;
and raysub submit's dashboard line. (tests/slurm/test_submit.py reaches a real job's dashboard with it.)"""

import json
from pathlib import Path

import pytest

from raysub import protocol, submit
from raysub.job.render import render
from raysub.spec import JobSpec
from raysub.status import Phase
from tests.conftest import RunCli
from tests.unit.test_submit import status

TOKEN = "ab" * 32


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A running job's LOG_DIR whose head is up, with its dashboard on a port of the job's block."""
    logs = tmp_path / "4711-logs"
    logs.mkdir()
    (logs / protocol.STARTED_RAY_HEAD).write_text("198.18.0.11:24000\n")
    (logs / protocol.DASHBOARD).write_text("198.18.0.11:24002\n")
    (logs / protocol.AUTH_DIR).mkdir(mode=0o700)
    (logs / protocol.AUTH_TOKEN).write_text(TOKEN + "\n")
    monkeypatch.setattr("raysub.slurm.job_state", lambda job_id: None)
    monkeypatch.delenv("SLURM_SUBMIT_HOST", raising=False)
    monkeypatch.setattr("getpass.getuser", lambda: "alice")
    return logs


def dashboard(raysub_cli: RunCli, job: Path, *args: str) -> dict[str, object]:
    result = raysub_cli("dashboard", "4711", "--log-dir", str(job.parent), "--json", *args)
    assert result.code == 0, result.stderr
    parsed: dict[str, object] = json.loads(result.stdout)
    return parsed


def test_the_tunnel_goes_through_the_login_node_to_the_port_the_head_recorded(
    raysub_cli: RunCli, job: Path
) -> None:
    result = raysub_cli("dashboard", "4711", "--log-dir", str(job.parent), "--login-host", "login1")
    assert result.code == 0, result.stderr
    assert result.stdout.splitlines() == [
        "job 4711: Ray's dashboard listens on 198.18.0.11:24002. On your laptop:",
        "  ssh -N -L 8265:198.18.0.11:24002 alice@login1",
        "then open http://localhost:8265 (ray job submit --address http://localhost:8265 works the same "
        "way).",
        "The page asks once for the job's token; scripts and curl send it as the header",
        f"  Authorization: Bearer {TOKEN}",
        "(or RAY_AUTH_TOKEN=<token> for Ray's own tools). Whoever has it can run code as you in this job: "
        "keep it out of shared notes.",
    ]


def test_json_names_every_part(raysub_cli: RunCli, job: Path) -> None:
    found = dashboard(raysub_cli, job, "--login-host", "bob@login2", "--local-port", "9000")
    assert found == {
        "job_id": "4711",
        "address": "198.18.0.11:24002",
        "login": "bob@login2",
        "local_port": 9000,
        "token": TOKEN,
        "ssh": "ssh -N -L 9000:198.18.0.11:24002 bob@login2",
        "url": "http://localhost:9000",
        "header": f"Authorization: Bearer {TOKEN}",
    }


def test_the_login_node_is_where_the_job_was_submitted_from_inside_a_job(
    raysub_cli: RunCli, job: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_SUBMIT_HOST", "login7")
    assert dashboard(raysub_cli, job)["login"] == "alice@login7"
    monkeypatch.delenv("SLURM_SUBMIT_HOST")
    monkeypatch.setattr("socket.gethostname", lambda: "here")
    assert dashboard(raysub_cli, job)["login"] == "alice@here"


def test_an_ipv6_head_is_bracketed_for_ssh(raysub_cli: RunCli, job: Path) -> None:
    (job / protocol.DASHBOARD).write_text("fd00::11:24002\n")
    assert (
        dashboard(raysub_cli, job, "--login-host", "l")["ssh"] == "ssh -N -L '8265:[fd00::11]:24002' alice@l"
    )


def test_a_job_without_token_authentication_needs_no_header(raysub_cli: RunCli, job: Path) -> None:
    (job / protocol.AUTH_TOKEN).unlink()
    result = raysub_cli("dashboard", "4711", "--log-dir", str(job.parent))
    assert result.code == 0, result.stderr
    assert "without token authentication (--auth none)" in result.stdout
    assert "Bearer" not in result.stdout
    assert dashboard(raysub_cli, job)["header"] is None


@pytest.mark.parametrize(
    ("remove", "ended", "says"),
    [
        (
            (),
            "driver exited with status 0",
            "job 4711 has ended (driver exited with status 0): its dashboard is gone",
        ),
        ((protocol.DASHBOARD, protocol.STARTED_RAY_HEAD), None, "job 4711: the head is not up yet"),
        ((protocol.DASHBOARD,), None, "job 4711 runs without a dashboard (rendered with --no-dashboard)"),
    ],
)
def test_no_dashboard_to_reach_is_one_line_saying_why(
    raysub_cli: RunCli, job: Path, remove: tuple[str, ...], ended: str | None, says: str
) -> None:
    for name in remove:
        (job / name).unlink()
    if ended:
        (job / protocol.ENDED).write_text(ended + "\n")
    result = raysub_cli("dashboard", "4711", "--log-dir", str(job.parent))
    assert result.code == 1
    assert result.stdout == ""
    assert result.stderr.startswith(f"raysub: error: {says}")
    assert len(result.stderr.splitlines()) == 1


def test_a_dashboard_address_someone_else_could_have_written_is_refused(
    raysub_cli: RunCli, job: Path
) -> None:
    (job / protocol.DASHBOARD).chmod(0o666)
    result = raysub_cli("dashboard", "4711", "--log-dir", str(job.parent))
    assert result.code == 1
    assert result.stderr.startswith(f"raysub: error: refusing {job / protocol.DASHBOARD}")


def test_submit_points_at_the_dashboard_once_the_head_is_up(job: Path) -> None:
    assert submit.dashboard_line(status(Phase.HEAD_STARTING, log_dir=str(job))) is None
    assert submit.dashboard_line(status(Phase.WORKERS_JOINING, log_dir=str(job), job_id="4711")) == (
        "dashboard: http://198.18.0.11:24002 (from your laptop: raysub dashboard 4711)"
    )
    (job / protocol.DASHBOARD).unlink()
    assert submit.dashboard_line(status(Phase.DRIVER_RUNNING, log_dir=str(job))) is None


@pytest.mark.parametrize(
    ("options", "recorded"),
    [
        ({}, '"$ip":"$DASHBOARD_PORT"'),
        ({"dashboard_host": "0.0.0.0"}, '"$ip":"$DASHBOARD_PORT"'),  # noqa: S104
        ({"dashboard_host": "head-ib0"}, 'head-ib0:"$DASHBOARD_PORT"'),
        ({"dashboard": False}, None),
    ],
)
def test_the_head_records_where_a_client_reaches_its_dashboard(
    options: dict[str, object], recorded: str | None
) -> None:
    script = render(JobSpec(nodes=2, command=("python", "x.py"), **options))  # type: ignore[arg-type]
    publish = f'publish "${{LOG_DIR}}/{protocol.DASHBOARD}" {recorded}\n'
    head_ready = f'publish "${{LOG_DIR}}/{protocol.STARTED_RAY_HEAD}"'
    if recorded is None:
        assert f'publish "${{LOG_DIR}}/{protocol.DASHBOARD}"' not in script
        return
    assert publish in script
    assert script.index(publish) < script.index(head_ready)
