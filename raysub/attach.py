"""Which node of a running job to open a shell on, and the srun that does it."""

from raysub import protocol
from raysub.jobs import Job, JobNotFound
from raysub.slurm import attach_command


def target_node(job: Job, node: str | None, worker: int | None) -> str:
    """``node`` itself, else the node of worker ``worker`` (from nodes.tsv), else the head's."""
    if node is not None:
        return node
    role, index = (protocol.ROLE_WORKER, worker) if worker is not None else (protocol.ROLE_HEAD, 0)
    for entry in job.logs.node_map():
        if (entry.role, entry.index) == (role, index):
            return entry.node
    name = f"worker {worker}" if worker is not None else "head"
    raise JobNotFound(f"job {job.job_id} has no {name} in {job.logs.file(protocol.NODE_MAP)}")


def ray_environment(job: Job) -> dict[str, str]:
    """What a shell on the job's nodes needs to talk to its Ray: the address and, when the job made one,
    the token (by path: the token itself never enters an environment that ps or /proc could show)."""
    env = {"RAY_AUTH_MODE": "disabled"}
    if job.logs.auth_token.exists():
        env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(job.logs.auth_token)}
    address = job.logs.head_address()
    if address:
        env["RAY_ADDRESS"] = address
    return env


def command(job: Job, node: str | None, worker: int | None, argv: list[str]) -> list[str]:
    """The srun command line that attaches to the chosen node, in the job's container if it has one: on
    the head node the head's own (running) container; elsewhere a new one from the job's image."""
    target = target_node(job, node, worker)
    on_head = any(e.role == protocol.ROLE_HEAD and e.node == target for e in job.logs.node_map())
    found = job.logs.attach_env()
    if found is None:
        raise JobNotFound(
            f"job {job.job_id}: {job.logs.file(protocol.ATTACH_ENV)} is missing (has the job started?) "
            "or not as the job writes it"
        )
    options = [*found.het_group(on_head), *job.logs.container_args(head=on_head)]
    return attach_command(found.slurm_job_id, target, options, argv)
