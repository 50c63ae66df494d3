"""What a job is: a typed spec, checked with messages that name the option at fault."""

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

# AF_UNIX socket paths longer than this are refused by the kernel.
MAX_SOCKET_PATH = 107
# Ray's longest socket path under --temp-dir,
# "/session_<YYYY-MM-DD_HH-MM-SS_ffffff>_<pid>/sockets/plasma_store", is at most 64 characters; keep a
# few spare for future names.
RAY_SOCKET_SUFFIX = 68
# The runtime placeholders of --ray-temp-dir and the longest value render assumes for each.
TEMP_DIR_PLACEHOLDERS = {"%j": 10, "%n": 20}

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SLURM_WORD = re.compile(r"[^\s#'\"\\]+")
_SLURM_TIME = re.compile(r"(\d+-)?\d+(:\d+){0,2}|\d+-\d+|UNLIMITED|INFINITE", re.IGNORECASE)
FORWARDABLE_SIGNALS = ("USR1", "USR2", "INT", "HUP", "QUIT")
_INTERFACE = re.compile(r"[A-Za-z0-9_.:@-]{1,15}")
_HOST = re.compile(r"[A-Za-z0-9_.:-]{1,253}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_MODE = re.compile(r"0?[0-7]{3}")
AUTH_MODES = ("token", "none")


class SpecError(ValueError):
    """A value the job cannot run with; ``option`` names the command-line option at fault."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{option}: {message}")
        self.option = option
        self.message = message


@dataclass(frozen=True)
class Ports:
    """Ray's ports on every node. All below 9000, away from Linux's ephemeral range (32768-60999)."""

    gcs: int = 6379
    client: int = 8001
    dashboard: int = 8265
    dashboard_agent: int = 8266
    dashboard_agent_grpc: int = 8267
    runtime_env_agent: int = 8268
    node_manager: int = 8076
    object_manager: int = 8077
    metrics_export: int = 8080
    min_worker: int = 8300
    max_worker: int = 8999

    def check(self) -> None:
        for name, value in vars(self).items():
            if not 1024 <= value <= 65535:
                raise SpecError(
                    f"--{name.replace('_', '-')}-port", f"{value} is not a port from 1024 to 65535"
                )
        if self.min_worker > self.max_worker:
            raise SpecError("--min-worker-port", "must not be above --max-worker-port")
        single = {k: v for k, v in vars(self).items() if k not in ("min_worker", "max_worker")}
        for name, value in single.items():
            if self.min_worker <= value <= self.max_worker:
                raise SpecError(f"--{name.replace('_', '-')}-port", f"{value} lies in the worker port range")
        if len(set(single.values())) != len(single):
            raise SpecError("--gcs-port", "two of Ray's ports are the same")


@dataclass(frozen=True)
class Sandbox:
    """A sidecar such as a code-execution server; the driver starts once its port answers."""

    command: str
    port: int
    container: str | None = None
    nodes: Literal["all", "1"] = "all"
    timeout: int = 300


@dataclass(frozen=True)
class JobSpec:
    """Everything ``raysub render`` needs. Values are used verbatim; render shell-quotes each one."""

    nodes: int
    command: tuple[str, ...] = ()
    gpus_per_node: int = 8
    gpu_request: bool = True
    cpus_per_task: int | None = None
    partition: str | None = None
    account: str | None = None
    time: str | None = None
    job_name: str = "raysub"
    exclusive: bool = True
    sbatch_args: tuple[str, ...] = ()
    log_dir: str | None = None
    container_image: str | None = None
    container_mounts: str | None = None
    container_workdir: str | None = None
    setup: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    ray_temp_dir: str = "/tmp/rs-%j/%n"
    ray_start_args: tuple[str, ...] = ()
    ports: Ports = field(default_factory=Ports)
    interface: str | None = None
    dedicated_head: bool = False
    head_retries: int = 2
    worker_retries: int = 2
    head_timeout: int = 300
    workers_timeout: int = 600
    sandbox: Sandbox | None = None
    requeue: bool = False
    signal_before: int | None = None
    forward_signal: str = "USR1"
    auth: Literal["token", "none"] = "token"
    dashboard: bool = True
    dashboard_host: str | None = None
    log_mode: str = "0750"
    monitor: bool = True
    monitor_interval: float = 5.0
    gpu_idle_threshold: float = 5.0
    gpu_idle_after: int = 600

    @property
    def workers(self) -> int:
        return self.nodes - 1

    @property
    def interactive(self) -> bool:
        return not self.command

    @property
    def head_gpus(self) -> int:
        return 0 if self.dedicated_head else self.gpus_per_node

    @property
    def expected_units(self) -> int:
        """What ray_worker_units must reach before the driver starts: GPUs, or nodes without GPUs."""
        if self.gpus_per_node == 0:
            return self.nodes
        return self.head_gpus + self.workers * self.gpus_per_node

    @property
    def log_dir_mode(self) -> str:
        """--log-mode as four octal digits (after check)."""
        return f"{int(self.log_mode, 8):04o}"

    @property
    def sandbox_nodes(self) -> int:
        if self.sandbox is None:
            return 0
        return self.nodes if self.sandbox.nodes == "all" else 1

    def check(self) -> "JobSpec":
        """Raise SpecError for the first value the job could not run with; return self otherwise."""
        if self.nodes < 1:
            raise SpecError("--nodes", f"must be at least 1, not {self.nodes}")
        if self.gpus_per_node < 0:
            raise SpecError("--gpus-per-node", f"must be 0 or more, not {self.gpus_per_node}")
        if self.cpus_per_task is not None and self.cpus_per_task < 1:
            raise SpecError("--cpus-per-task", f"must be at least 1, not {self.cpus_per_task}")
        for option, value in (("--partition", self.partition), ("--account", self.account)):
            if value is not None and not _SLURM_WORD.fullmatch(value):
                raise SpecError(option, f"{value!r} is not a Slurm name (no spaces, quotes or '#')")
        # Header values end up on '#SBATCH' comment lines: a newline there would start a line of bash.
        if not self.job_name or _CONTROL.search(self.job_name):
            raise SpecError("--job-name", f"{self.job_name!r} is empty or has a newline or control character")
        if self.time is not None and not _SLURM_TIME.fullmatch(self.time):
            raise SpecError("--time", f"{self.time!r} is not a Slurm time such as 30, 4:00:00 or 1-12")
        for arg in self.sbatch_args:
            option = arg.partition("=")[0]
            if not arg.startswith("-") or _CONTROL.search(arg) or re.search(r"\s", option):
                raise SpecError(
                    "--sbatch-arg",
                    f"{arg!r} must be one sbatch option such as --qos=high, on one line, "
                    "with its value after '='",
                )
        for key, _ in self.env:
            if not _ENV_NAME.fullmatch(key):
                raise SpecError("--env", f"{key!r} is not a variable name")
        for name, value in vars(self).items():
            if isinstance(value, str) and "\0" in value:
                raise SpecError(f"--{name.replace('_', '-')}", "contains a NUL byte")
        if any("\0" in arg for arg in self.command):
            raise SpecError("COMMAND", "contains a NUL byte, which no argv can carry")
        if self.interface is not None and not _INTERFACE.fullmatch(self.interface):
            raise SpecError("--interface", f"{self.interface!r} is not a network interface name")
        for option, count in (
            ("--head-retries", self.head_retries),
            ("--worker-retries", self.worker_retries),
        ):
            if count < 0:
                raise SpecError(option, f"must be 0 or more, not {count}")
        for option, seconds in (
            ("--head-timeout", self.head_timeout),
            ("--workers-timeout", self.workers_timeout),
        ):
            if seconds < 1:
                raise SpecError(option, f"must be at least 1 second, not {seconds}")
        if self.signal_before is not None and self.signal_before < 1:
            raise SpecError("--signal-before", f"must be at least 1 second, not {self.signal_before}")
        limit = time_limit_seconds(self.time) if self.time is not None else None
        if self.signal_before is not None and limit is not None and self.signal_before >= limit:
            raise SpecError(
                "--signal-before",
                f"{self.signal_before} s is not before the end of --time {self.time} ({limit} s): "
                "the warning would come at the start of the job, or never",
            )
        if self.forward_signal not in FORWARDABLE_SIGNALS:
            raise SpecError(
                "--forward-signal", f"{self.forward_signal!r} is not one of {', '.join(FORWARDABLE_SIGNALS)}"
            )
        self.ports.check()
        self._check_temp_dir()
        self._check_security()
        if self.monitor_interval < 0.5:
            raise SpecError(
                "--monitor-interval", f"must be at least 0.5 seconds, not {self.monitor_interval}"
            )
        if not 0 < self.gpu_idle_threshold <= 100:
            raise SpecError(
                "--gpu-idle-threshold", f"must be a percentage above 0, not {self.gpu_idle_threshold}"
            )
        if self.gpu_idle_after < 1:
            raise SpecError("--gpu-idle-after", f"must be at least 1 second, not {self.gpu_idle_after}")
        if self.sandbox is not None:
            if not 1 <= self.sandbox.port <= 65535:
                raise SpecError("--sandbox-port", f"{self.sandbox.port} is not a port")
            if self.sandbox.timeout < 1:
                raise SpecError("--sandbox-timeout", "must be at least 1 second")
        return self

    def _check_security(self) -> None:
        if self.auth not in AUTH_MODES:
            raise SpecError("--auth", f"must be one of {', '.join(AUTH_MODES)}, not {self.auth!r}")
        if self.dashboard_host is not None:
            if not self.dashboard:
                raise SpecError("--dashboard-host", "has no dashboard to bind with --no-dashboard")
            if not _HOST.fullmatch(self.dashboard_host):
                raise SpecError("--dashboard-host", f"{self.dashboard_host!r} is not a host name or address")
        if not _MODE.fullmatch(self.log_mode):
            raise SpecError("--log-mode", f"{self.log_mode!r} is not an octal mode such as 0750")
        mode = int(self.log_mode, 8)
        if mode & 0o700 != 0o700:
            raise SpecError("--log-mode", f"{self.log_mode}: the job's own user needs rwx (0700) on its logs")
        if mode & 0o002:
            raise SpecError(
                "--log-mode",
                f"{self.log_mode}: a world-writable log directory lets anyone "
                "replace the scripts the nodes run",
            )
        if self.log_dir is not None and re.search(r"[%\\\x00-\x1f\x7f]", self.log_dir):
            raise SpecError(
                "--log-dir",
                f"{self.log_dir!r}: srun's --output reads % and backslash as patterns, and newlines "
                "break Slurm's files; choose a path without them",
            )

    def _check_temp_dir(self) -> None:
        path = self.ray_temp_dir
        if not path.startswith("/"):
            raise SpecError("--ray-temp-dir", f"{path!r} must be an absolute path")
        if re.search(r"[^A-Za-z0-9_./%+-]", path):
            raise SpecError("--ray-temp-dir", f"{path!r}: use only letters, digits and _ . / + - % in it")
        longest = len(path) + sum(path.count(k) * (n - len(k)) for k, n in TEMP_DIR_PLACEHOLDERS.items())
        if longest + RAY_SOCKET_SUFFIX > MAX_SOCKET_PATH:
            limit = MAX_SOCKET_PATH - RAY_SOCKET_SUFFIX
            raise SpecError(
                "--ray-temp-dir",
                f"{path!r} can grow to {longest} characters (%j counts 10, %n 20); "
                f"Ray's socket paths under it "
                f"would pass the kernel's {MAX_SOCKET_PATH}-byte limit: keep it to {limit}",
            )


def time_limit_seconds(text: str) -> int | None:
    """A Slurm time limit in seconds (None for UNLIMITED). sbatch reads minutes, minutes:seconds,
    hours:minutes:seconds, days-hours, days-hours:minutes and days-hours:minutes:seconds."""
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:
        hours, minutes, seconds = [*parts, 0, 0][:3]
        return ((int(days) * 24 + hours) * 60 + minutes) * 60 + seconds
    if len(parts) == 3:
        return (parts[0] * 60 + parts[1]) * 60 + parts[2]
    return parts[0] * 60 + (parts[1] if len(parts) == 2 else 0)


def parse_env(pairs: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """``KEY=VALUE`` strings as pairs; the value may hold anything, '=' included."""
    parsed = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SpecError("--env", f"{pair!r} is not KEY=VALUE")
        parsed.append((key, value))
    return tuple(parsed)


def sandbox_from_options(
    command: str | None, port: int | None, container: str | None, nodes: str, timeout: int
) -> Sandbox | None:
    if command is None:
        for option, value in (("--sandbox-port", port), ("--sandbox-container", container)):
            if value is not None:
                raise SpecError(option, "needs --sandbox-command")
        return None
    if port is None:
        raise SpecError("--sandbox-command", "needs --sandbox-port (how raysub knows the sandbox is ready)")
    if nodes not in ("all", "1"):
        raise SpecError("--sandbox-nodes", f"must be 'all' or '1', not {nodes!r}")
    return Sandbox(
        command=command,
        port=port,
        container=container,
        nodes="all" if nodes == "all" else "1",
        timeout=timeout,
    )


def spec_from_options(values: Mapping[str, Any]) -> JobSpec:
    """A checked JobSpec from ``raysub render``'s option values, keyed by option name (``gpus_per_node``)."""
    if values.get("nodes") is None:
        raise SpecError("--nodes", "is required (how many nodes the job gets)")
    ports = Ports(**{name: values[f"{name}_port"] for name in Ports.__dataclass_fields__})
    sandbox = sandbox_from_options(
        values["sandbox_command"],
        values["sandbox_port"],
        values["sandbox_container"],
        values["sandbox_nodes"],
        values["sandbox_timeout"],
    )
    plain = {
        name: values[name]
        for name in JobSpec.__dataclass_fields__
        if name not in ("command", "env", "ports", "sandbox") and name in values
    }
    for name in ("sbatch_args", "ray_start_args"):
        plain[name] = tuple(plain[name])
    plain["forward_signal"] = str(plain["forward_signal"]).upper().removeprefix("SIG")
    return JobSpec(
        **plain,
        command=tuple(values["command"]),
        env=parse_env(tuple(values["env"])),
        ports=ports,
        sandbox=sandbox,
    ).check()
