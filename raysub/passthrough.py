"""The options a user passes through to sbatch (--sbatch-arg), srun (--srun-arg) and ray start
(--ray-start-arg), and those raysub sets itself, which none of them may repeat: a repeated option would
quietly win or quietly lose. Each owned option names the raysub option that sets it instead.
"""

import re
from collections.abc import Mapping

from raysub.errors import SpecError
from raysub.job.lib.topology import user_resources

CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # no option value holds a control character

# 'ray start' options raysub gives every node itself, each with the raysub option that sets it (None: the
# role raysub gives the node, which no option changes). A --ray-start-arg repeating one would silently win
# over raysub's: with --temp-dir, say, the head's readiness is never seen.
RAY_START_OWNED: dict[str, str | None] = {
    "--head": None,
    "--address": None,
    "--block": None,
    "--node-name": None,
    "--node-ip-address": "--interface",
    "--temp-dir": "--ray-temp-dir",
    "--num-gpus": "--gpus-per-node (and --head-gpus)",
    "--num-cpus": "--cpus-per-task",  # only when --cpus-per-task is given: raysub sets it then
    "--port": "--gcs-port",
    "--ray-client-server-port": "--client-port",
    "--include-dashboard": "--dashboard/--no-dashboard",
    "--dashboard-host": "--dashboard-host",
    "--dashboard-port": "--dashboard-port",
    "--dashboard-agent-listen-port": "--dashboard-agent-port",
    "--dashboard-agent-grpc-port": "--dashboard-agent-grpc-port",
    "--runtime-env-agent-port": "--runtime-env-agent-port",
    "--node-manager-port": "--node-manager-port",
    "--object-manager-port": "--object-manager-port",
    "--metrics-export-port": "--metrics-export-port",
    "--min-worker-port": "--min-worker-port",
    "--max-worker-port": "--max-worker-port",
    "--worker-port-list": "--min-worker-port and --max-worker-port",
}
# sbatch options raysub writes into the script's header itself (or has an option of its own for), with
# that option (None: raysub's fixed choice). sbatch takes any unambiguous abbreviation of a long option,
# so an abbreviation of one of these is refused too, unless it is an sbatch option itself (SBATCH_EXACT).
SBATCH_OWNED: dict[str, str | None] = {
    "--nodes": "--nodes",
    "-N": "--nodes",
    "--ntasks-per-node": None,
    "--exclusive": "--exclusive/--no-exclusive",
    "--gpus-per-node": "--gpus-per-node",
    "--cpus-per-task": "--cpus-per-task",
    "-c": "--cpus-per-task",
    "--partition": "--partition",
    "-p": "--partition",
    "--account": "--account",
    "-A": "--account",
    "--time": "--time",
    "-t": "--time",
    "--array": "--array",
    "-a": "--array",
    "--requeue": "--requeue/--no-requeue",
    "--no-requeue": "--requeue/--no-requeue",
    "--signal": "--signal-before and --forward-signal",
    "--job-name": "--job-name",
    "-J": "--job-name",
}
# sbatch options whose names begin one of SBATCH_OWNED's (Slurm's src/common/slurm_opt.c).
SBATCH_EXACT = ("--ntasks", "--gpus")

# srun options that raysub sets on its steps (ray.sub.j2's step_options and the step lines), with the
# raysub option that sets them instead (None: nothing may change them). srun takes the last of an option
# given twice, so an --srun-arg among them would quietly lose or quietly win: neither is wanted.
SRUN_OWNED: dict[str, str | None] = {
    "--nodes": None,
    "-N": None,
    "--ntasks": None,
    "-n": None,
    "--ntasks-per-node": None,
    "--nodelist": None,
    "-w": None,
    "--exclude": None,
    "-x": None,
    "--overlap": None,
    "--export": None,
    "--kill-on-bad-exit": None,
    "-K": None,
    "--output": None,
    "-o": None,
    "--error": None,
    "-e": None,
    "--het-group": None,
    "--jobid": None,
    "--cpus-per-task": "--cpus-per-task",
    "-c": "--cpus-per-task",
    "--mpi": "--mpi",
    "--container-image": "--container-image",
    "--container-mounts": "--container-mounts",
    "--container-workdir": "--container-workdir",
    "--container-name": None,
    "--container-mount-home": "--container-mount-home/--no-container-mount-home",
    "--no-container-mount-home": "--container-mount-home/--no-container-mount-home",
}


def owned_option(option: str, owned: Mapping[str, object], exact: tuple[str, ...] = ()) -> str | None:
    """The option of ``owned`` that sbatch or srun would read ``option`` (the part before '=') as, if any:
    both take a long option's unambiguous start for the whole (getopt_long), and a short one's letter
    with its value joined (-N4). ``exact`` are options of their own that begin an owned one's name."""
    if option in owned:
        return option
    if not option.startswith("--"):
        return option[:2] if option[:2] in owned else None
    if len(option) < 3 or option in exact:
        return None
    return next((name for name in owned if name.startswith(option)), None)


def passed_options(
    flag: str,
    args: tuple[str, ...],
    program: str,
    example: str,
    owned: Mapping[str, str | None],
    exact: tuple[str, ...] = (),
) -> None:
    """Each of ``args``, given with ``flag``, must be one option of ``program`` (sbatch, srun) on one line,
    and none that raysub sets itself: those name the raysub option to use instead, if any."""
    where = {"sbatch": "the header", "srun": "every step"}[program]
    for arg in args:
        option = arg.partition("=")[0]
        if not arg.startswith("-") or CONTROL.search(arg) or re.search(r"\s", option):
            raise SpecError(
                flag,
                f"{arg!r} must be one {program} option such as {example}, on one line, with its value "
                "after '='",
            )
        name = owned_option(option, owned, exact)
        if name is not None:
            raise SpecError(flag, owned_message(arg, name, owned[name], where))


def owned_message(arg: str, owned: str, instead: str | None, where: str) -> str:
    said = f"{arg!r} sets {owned}, which raysub controls in {where}"
    return f"{said}: use raysub's {instead}" if instead else f"{said}; it cannot be changed"


def check_resources(arg: str, value: str) -> None:
    """A --ray-start-arg --resources the topology program can add to each node's: ``--resources=JSON`` in
    one argument, an object of names to numbers."""
    if user_resources(value) is None:
        raise SpecError(
            "--ray-start-arg",
            f"{arg!r}: give Ray's resources as one argument, a JSON object of numbers: "
            "--resources='{\"name\": 1}'",
        )
