"""The waits of a job that are no option of their own (Timing; raysub/spec.py has the options)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    """Every look interval, backoff and deadline of a job that is not an option of its own, each written once:
    the templates render them into the bash and the node scripts pass them to the node programs as
    arguments. (Those a user sets are JobSpec fields: --head-timeout, --workers-timeout, --restart-backoff,
    --monitor-interval, --gpu-idle-after, --wait-gpus and the sandbox's timeout.) Seconds unless the name
    says centiseconds (_cs)."""

    # The batch script.
    supervisor_look_s: int = 2  # the supervisor looks at srun's logs this often while no step ends
    leave_s: int = 10  # steps still running after ENDED get this long to leave before Slurm ends them
    # A warning signal held while no driver ran waits this long for the next driver to handle it: a driver
    # installs its handler after its imports and ray.init, seconds after it starts.
    signal_grace_s: int = 30
    # Every node script.
    canary_wait_s: int = 10  # for the canary file to show up on a shared filesystem that caches lookups
    ended_after_term_s: int = 5  # for ENDED after a child died of TERM: the job ending is nobody's fault
    # pause(), between two looks at a signal file: a tenth of the time waited so far, within these bounds;
    # in a wait's first minute at most JobSpec.signal_look_cs; the upper bound grows with a job of more
    # than a thousand nodes (JobSpec.look_max_cs).
    look_min_cs: int = 5
    look_max_cs: int = 100
    look_brisk_cs: int = 6000
    ray_retry_s: int = 1  # between two tries to start Ray on a node
    head_answers_s: int = 3  # a worker whose Ray left: does the head still take a connection?
    driver_stop_s: int = 3  # the driver's processes after TERM, before KILL
    head_look_s: float = 0.05  # the head's looks at its own Ray and at the units file while it waits
    # The node programs.
    join_look_s: float = 0.25  # join.py: for the head's address, when no SIGCONT said it is there
    units_ready_look_s: float = 0.02  # units.py: for the address file, a node-local stat
    units_brisk_s: float = 0.05  # units.py: the node table until every unit joined
    units_slow_s: float = 5.0  # units.py: afterwards
    gate_look_s: float = 0.02  # the early driver's gate: for DRIVER_STARTED
    cleanup_timeout_s: float = 60.0  # cleanup.py: all of a clean-up before a driver restart
    # cleanup.py: Ray kills a dead driver's workers itself within a second or two; a kill of ours before
    # then would race it.
    cleanup_worker_grace_s: float = 5.0
    cleanup_look_s: float = 0.5  # cleanup.py: between two looks at what is left
    preflight_first_pause_s: float = 1.0  # preflight.py --wait-gpus: doubled for each next check
    preflight_max_pause_s: float = 30.0
    # A GPU that fell off the bus can make nvidia-smi hang for minutes.
    nvidia_smi_timeout_s: float = 60.0
    # 'scontrol show topology', once in the batch script (--topology): the controller may be slow; the
    # workers then keep Slurm's order.
    scontrol_timeout_s: float = 10.0
    # ray_logs.py, as a node leaves: well within Slurm's default KillWait (30 s) after a TERM.
    keep_ray_logs_s: float = 10.0
    # The autoscaler's node provider (--autoscale): Slurm's queue, for its grow jobs, at most this often.
    autoscale_slurm_look_s: float = 30.0
    # Grow jobs (raysub grow, --autoscale; their batch script is no job's spec, so they take these defaults).
    # How long their nodes have to leave Ray through its drain (raysub shrink's default, and on Slurm's
    # warning signal): what runs there may finish meanwhile; Ray ends the node sooner once it is idle.
    grow_drain_s: int = 60
    # Slurm's warning signal comes this long before a grow job's time limit (Slurm may send it up to a
    # minute sooner: sbatch(1) --signal), so that its nodes can leave by grow_drain_s.
    grow_warn_s: int = 90
    # A grow job's nodes see the grown job's ENDED within about a second, and leave by their leave file's
    # deadline; the grow job ends its step this long after either.
    grow_leave_s: int = 8
