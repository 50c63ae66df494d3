"""raysub grow's batch script: more nodes for a running job's Ray cluster, as a job of their own
(templates/grow.sub.j2). They run the grown job's own worker script with the environment its steps have
(LOG_DIR/step_env), so they start Ray exactly as its workers do; they leave Ray when their job ends or
when the grown job ends, and never end the grown job."""

from __future__ import annotations

from dataclasses import dataclass, field

from raysub import protocol
from raysub.errors import SpecError
from raysub.passthrough import CONTROL
from raysub.protocol.logdir import LogDir

DEFAULT_NODES = 1


@dataclass(frozen=True)
class Grow:
    """A grow job: ``nodes`` more nodes for the job whose LOG_DIR is ``logs``, with its own Slurm options."""

    logs: LogDir
    nodes: int
    partition: str | None = None
    time: str | None = None
    sbatch_args: tuple[str, ...] = field(default_factory=tuple)

    def check(self) -> None:
        """SpecError naming the option whose value cannot be used."""
        if self.nodes < 1:
            raise SpecError("--nodes", f"must be 1 or more, not {self.nodes}")
        for option, value in (("--partition", self.partition), ("--time", self.time)):
            if value is not None and (not value or CONTROL.search(value)):
                raise SpecError(option, f"{value!r} is empty or has a newline or control character")
        for arg in self.sbatch_args:
            if not arg.startswith("-") or CONTROL.search(arg):
                raise SpecError("--sbatch-arg", f"{arg!r} is not one sbatch option on one line")
            if arg.split("=")[0] in ("--nodes", "-N", "--output", "-o", "--job-name", "-J"):
                raise SpecError("--sbatch-arg", f"{arg!r}: raysub grow sets {arg.split('=')[0]} itself")


def render_grow(grow: Grow) -> str:
    """The grow job's batch script."""
    from raysub.job.render import grow_script  # jinja2: not on the command line's start-up path

    grow.check()
    log_dir = str(grow.logs.path)
    return grow_script(
        log_dir,
        name=f"raysub-grow-{grow.logs.path.name}",
        nodes=grow.nodes,
        output=f"{log_dir}/{protocol.GROW_DIR}/%j.out",
        partition=grow.partition,
        time=grow.time,
        sbatch_args=grow.sbatch_args,
    )
