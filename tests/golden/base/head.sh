#!/usr/bin/env bash
# raysub head (raysub/job/templates/head.sh.j2): starts Ray's head on this node, announces it, counts the units
# that join, waits for workers and sandboxes, then runs the driver here; exits with the driver's status.
# shellcheck disable=SC2317,SC2329 # shared functions: traps call some, and not every script calls each
set -euo pipefail
ROLE="head"
# shellcheck source=node.sh
source "${_RAYSUB_LOG_DIR:?is not set; run this script through the batch script}/node.sh"

GCS_PORT=6379
EXPECTED_UNITS=32
UNITS_FILE="${LOG_DIR}/ray_worker_units"
JOINED_FILE="${LOG_DIR}/ray_joined_nodes"
DRIVER_PID=""
# Where the driver's checkpoints are: --checkpoint-dir as rendered, else what raysub watch --checkpoint-dir
# exported with the job. The resume point is found in it at every driver start, never fixed at submit
# time: a job Slurm requeues runs with its submit-time environment, and must not resume from a checkpoint
# that was newest then.
CHECKPOINT_DIR=${RAYSUB_CHECKPOINT_DIR:-}
CHECKPOINT_MARKER=${RAYSUB_CHECKPOINT_MARKER:-}
CREATE_CHECKPOINT_DIR=${RAYSUB_CREATE_CHECKPOINT_DIR:-0}
resume_from=${RAYSUB_RESUME_FROM:-}

# The head's own waits look at local, cheap things, so they look at a steady 0.05 s: every twentieth
# of a second they save is one of the whole bring-up, and they last only as long as the bring-up.
readonly HEAD_LOOK=0.05

# Ready means the head's raylet has registered with the GCS AND the GCS answers on its port: the GCS
# alone is up before the raylet, and a driver started then finds no Ray instance. A worker started then
# would find no head node in the GCS either: Ray 2.60's 'ray start' asks for it (the head's temp and
# session dirs) and, when it is not there yet, asks again only 2 s later.
# The GCS logs the registration as it takes it; 'ray start' writes ray_current_cluster only once it has
# seen the node itself, in our runs 0.1 to 1 s later. The log line is Ray's wording, not an API, so
# ray_current_cluster still counts. Read with bash alone: it is looked at twenty times a second.
head_registered() {
  local temp=$1 gcs_log="${1}/session_latest/logs/gcs_server.out" said=""
  [[ -e ${temp}/ray_current_cluster ]] && return 0
  [[ -r $gcs_log ]] || return 1
  IFS= read -r -d '' said <"$gcs_log" || true
  [[ $said == *"Registering new node"* ]]
}

wait_head_ready() {
  local temp=$1 ip=$2 deadline=$3
  while ((SECONDS < deadline)); do
    kill -0 "$CHILD_PID" 2>/dev/null || return 1
    # The unit counter, say, failed while the head started: no attempt can help.
    [[ ! -e $ENDED_FILE ]] || die "the job ended while the head started: $(<"$ENDED_FILE")"
    if head_registered "$temp" && (: <>"/dev/tcp/${ip}/${GCS_PORT}") 2>/dev/null; then
      return 0
    fi
    sleep "$HEAD_LOOK"
  done
  return 1
}

# The unit counter (raysub/job/lib/counter.py; with --monitor, programs/monitor.py runs it) starts with the head's Ray and loads Ray's GCS client while it
# starts (with only the CPU the head leaves), then waits for the head's address in the node-local file $1.
# From then on it keeps ray_worker_units and ray_joined_nodes up to date and puts every node that joins
# on the timeline. With --auth token it first makes sure this Ray enforces the token, and ends the job
# if not. It uses a private Ray API: if it dies (an import error on another Ray, say) before the driver
# starts, the job ends at once with its last word, instead of waiting out --workers-timeout.
# Once every unit has joined it also runs the monitor sidecar (--monitor) in a thread: every node's GPU,
# CPU and memory into metrics.jsonl every 5.0 s, and a timeline warning when the GPUs idle while the driver runs.
count_units() {
  local status=0 said
  said=$(node_program monitor --log-dir="$LOG_DIR" --address-file="$1" --expected="$EXPECTED_UNITS" --ready-look=0.02 --brisk=0.05 --slow=5 --kind=gpu --auth=token --node="$HOST" --monitor-interval=5.0 --idle-threshold=5.0 --idle-after=600) || status=$?
  if [[ -e $ENDED_FILE ]] || ended_by_signal "$status"; then return 0; fi
  if [[ $said == "unprotected "* ]]; then
    die "Ray ${said#unprotected } does not enforce token authentication (Ray >= 2.52 does), so the job ends rather than run open to the network. To run on this Ray, render with --auth none: then anyone who can reach the head's ports can run code as you while the job runs (docs/security.md)"
  elif [[ ! -e ${LOG_DIR}/DRIVER_STARTED ]]; then
    die "the unit counter exited with status ${status}: ${said:-see ray-head.log}"
  fi
  log "warning: the unit counter exited with status ${status}; ray_worker_units is no longer updated"
}

# The job's nodes that are not (yet) in Ray, space-separated.
missing_nodes() {
  local node missing=()
  for node in $(from_batch _RAYSUB_NODE_LIST); do
    grep -qxF -- "$node" "$JOINED_FILE" 2>/dev/null || missing+=("$node")
  done
  printf '%s\n' "${missing[*]:-none}"
}

# The head's Ray has exited ($1: while doing what): ends the job saying so, unless Slurm is ending it.
ray_exited() {
  local status=0
  wait "$CHILD_PID" || status=$?
  CHILD_PID=""
  ! ended_by_signal "$status" || die "the job ended $1: $(<"$ENDED_FILE")"
  die "the head's Ray exited with status ${status} $1"
}

# Ends the job when units are still missing at the deadline, $1 of them having joined; each node not in
# Ray is named on the timeline, so that the next job leaves it out.
units_missing() {
  local missing node
  missing=$(missing_nodes)
  for node in $missing; do
    [[ $node == none ]] || blame_node "$node" "never joined Ray in 600 s"
  done
  die "${1}/${EXPECTED_UNITS} GPUs joined after 600 s; missing: ${missing}"
}

wait_units() {
  local deadline=$1 units=0
  while :; do
    [[ -r $UNITS_FILE ]] && units=$(<"$UNITS_FILE")
    # Whole: the driver starts on this count, so it must be the unit counter's own.
    ((units >= EXPECTED_UNITS)) && read_trusted "$UNITS_FILE" >/dev/null && return 0
    [[ -z $DRIVER_PID ]] || kill -0 "$DRIVER_PID" 2>/dev/null || return 0
    [[ -e $ENDED_FILE ]] && die "job ended while waiting for workers: $(<"$ENDED_FILE")"
    kill -0 "$CHILD_PID" 2>/dev/null || ray_exited "while waiting for workers"
    ((SECONDS < deadline)) || units_missing "$units"
    sleep "$HEAD_LOOK"
  done
}

wait_sandboxes() {
  return 0
}

# On the way out (an ending job): TERM to the driver's process group, a moment to finish, then KILL.
stop_driver() {
  local tenths=30
  [[ -n $DRIVER_PID ]] || return 0
  kill -TERM -- "-${DRIVER_PID}" 2>/dev/null || true
  while ((tenths-- > 0)) && running "$DRIVER_PID"; do sleep 0.1; done
  kill_tree "$DRIVER_PID"
  DRIVER_PID=""
}

# Starts run $1 of the driver (0: the first; k: its k-th restart) in its own process group (the batch
# script forwards the preemption signal to all of it, and only to it), writing its own log.
# With "early" as $2 it starts while the workers still join: the gate (raysub/job/programs/driver_gate.py), first
# on its PYTHONPATH as sitecustomize, holds its ray.init until DRIVER_STARTED exists.
# The driver gets RAYSUB_FINISHED, the file it creates to say the training is over (raysub.driver.declare_finished),
# and the run's mark, which whatever it starts inherits (see end_driver_run).
start_driver() {
  local run=$1 log_file="${LOG_DIR}/ray-driver.log"
  ((run == 0)) || log_file="${LOG_DIR}/ray-driver-${run}.log"
  create_file "$log_file" 0640
  RUN_MARK="$(from_batch _RAYSUB_CANARY) ${run}"
  if [[ ${2:-} == early ]]; then
    local python_path=${PYTHONPATH:-}
    RAY_ADDRESS=$address _RAYSUB_DRIVER_PYTHONPATH=$python_path \
      PYTHONPATH="${LOG_DIR}/python/driver_gate${python_path:+:${python_path}}" \
      _RAYSUB_DRIVER_GATE="${LOG_DIR}/DRIVER_STARTED" _RAYSUB_DRIVER_GATE_ENDED=$ENDED_FILE _RAYSUB_DRIVER_GATE_LOOK=0.02 \
      RAYSUB_FINISHED="${LOG_DIR}/driver_finished" _RAYSUB_DRIVER_RUN=$RUN_MARK \
      setsid bash "${LOG_DIR}/driver_command.sh" >"$log_file" 2>&1 </dev/null &
  else
    RAYSUB_FINISHED="${LOG_DIR}/driver_finished" _RAYSUB_DRIVER_RUN=$RUN_MARK \
      setsid bash "${LOG_DIR}/driver_command.sh" >"$log_file" 2>&1 </dev/null &
  fi
  DRIVER_PID=$!
  publish "${LOG_DIR}/driver_pid" "$DRIVER_PID"
}

# An early driver that exits before the cluster is whole (an import error, say) ends the job now with
# its status, instead of after a wait for workers it will never use.
end_if_driver_gone() {
  local status=0
  [[ -n $DRIVER_PID ]] && ! kill -0 "$DRIVER_PID" 2>/dev/null || return 0
  wait "$DRIVER_PID" || status=$?
  DRIVER_PID=""
  publish "${LOG_DIR}/driver_exit_code" "$status"
  timeline driver_end "$status"
  end_job "the driver exited with status ${status} before the cluster was whole"
  log "the driver exited with status ${status} before the cluster was whole; see ray-driver.log"
  exit "$status"
}

# The newest complete checkpoint in CHECKPOINT_DIR (raysub/job/programs/checkpoints.py), for the driver to resume
# from, in RAYSUB_RESUME_FROM (and {checkpoint} in COMMAND); unset when there is none yet. A directory that
# is not there, or holds several runs' checkpoints, ends the job: a driver that silently starts from step
# 0 on every attempt is the failure this guards against. Without a checkpoint directory RAYSUB_RESUME_FROM
# is left as the job's environment has it.
find_checkpoint() {
  local found said
  [[ -n $CHECKPOINT_DIR ]] || return 0
  if [[ ! -d $CHECKPOINT_DIR ]]; then
    [[ ! -e $CHECKPOINT_DIR ]] || die "the checkpoint directory ${CHECKPOINT_DIR} is not a directory"
    ((CREATE_CHECKPOINT_DIR)) ||
      die "the checkpoint directory ${CHECKPOINT_DIR} does not exist on ${HOST}: is its file system mounted here? (--create-checkpoint-dir makes it)"
    mkdir -p -- "$CHECKPOINT_DIR" || die "cannot make the checkpoint directory ${CHECKPOINT_DIR}"
    log "made the checkpoint directory ${CHECKPOINT_DIR}"
  fi
  said="${TEMP_DIR}/checkpoints.err"
  if ! found=$(node_program checkpoints "$CHECKPOINT_DIR" ${CHECKPOINT_MARKER:+"--marker=${CHECKPOINT_MARKER}"} 2>"$said"); then
    die "cannot tell which checkpoint to resume from: $(tail -n 1 -- "$said")"
  fi
  resume_from=$found
  if [[ -n $found ]]; then
    export RAYSUB_RESUME_FROM=$found
    log "the driver resumes from ${found}"
  else
    unset RAYSUB_RESUME_FROM
    log "no complete checkpoint in ${CHECKPOINT_DIR} yet: the driver starts from the beginning"
  fi
}

check_canary
prepare_temp_dir
temp=$TEMP_DIR
ip=$(node_ip)
address="${ip}:${GCS_PORT}"
ray_node_args "$ip" "$temp" 8 ""
HEAD_ADDRESS_FILE="${temp}/raysub_head_address"
ready=0
for ((attempt = 0; attempt <= 2; attempt++)); do
  ((attempt == 0)) || log "retrying the head start (attempt $((attempt + 1)) of 3)"
  run_setup
  ((attempt > 0)) || preflight_gate 8
  ((attempt > 0)) || node_topology 8 1
  clean_temp_dir
  # The dashboard (and its Jobs API) listens on the head's cluster address, not on every interface.
  DASHBOARD_PORT=8265
  DASHBOARD_ARGS=(--dashboard-host="$ip" --dashboard-port="$DASHBOARD_PORT")
  # Once, after --setup: that may be what puts Ray's Python on PATH (sbatch --export=NONE and a venv).
  if ((attempt == 0)); then count_units "$HEAD_ADDRESS_FILE" & fi
  start_ray --head --port="$GCS_PORT" --ray-client-server-port=8001 \
    "${DASHBOARD_ARGS[@]}" "${RAY_ARGS[@]}"
  if wait_head_ready "$temp" "$ip" $((SECONDS + 300)); then
    ready=1
    break
  fi
  stop_child
done
if ((!ready)); then
  blame_node "$HOST" "the head's Ray did not start after 3 attempts"
  die "Ray did not start after 3 attempts; see ray-head.log"
fi
publish "$HEAD_ADDRESS_FILE" "$address"
# Before STARTED_RAY_HEAD, so that whoever sees the head ready (raysub submit, dashboard) finds it too.
publish "${LOG_DIR}/dashboard_address" "$ip":"$DASHBOARD_PORT"
publish "${LOG_DIR}/STARTED_RAY_HEAD" "$address"
timeline head_ready "$address"
log "Ray head ready at ${address}"
log "starting the driver now; its ray.init returns once the cluster is whole; output in ray-driver.log"
find_checkpoint
start_driver 0 early

wait_units $((SECONDS + 600))
end_if_driver_gone
log "all ${EXPECTED_UNITS} units joined"
wait_sandboxes
end_if_driver_gone

export RAY_ADDRESS=$address
# Runs run $1 of the driver (unless it started early) and returns its exit status. While it runs, the job
# ends early if this node's Ray dies or another node ends the job.
run_driver() {
  local run=$1 status=0
  [[ -n $DRIVER_PID ]] || start_driver "$run"
  WAITED_CS=0
  while kill -0 "$DRIVER_PID" 2>/dev/null; do
    kill -0 "$CHILD_PID" 2>/dev/null || ray_exited "while the driver ran"
    [[ ! -e $ENDED_FILE ]] || die "the job ended while the driver ran: $(<"$ENDED_FILE")"
    pause
  done
  wait "$DRIVER_PID" || status=$?
  DRIVER_PID=""
  # From now until the next run starts, the batch script holds a warning signal for that run.
  rm -f -- "${LOG_DIR}/driver_pid"
  # A driver that Slurm's TERM ended (scancel, time limit) leaves the reason to the batch script's ENDED.
  ended_by_signal "$status" || true
  return "$status"
}

log "the cluster is whole: the driver's ray.init returns"
# An early driver has its resume point already: it found it when it started.
[[ -n $DRIVER_PID ]] || find_checkpoint
publish "${LOG_DIR}/DRIVER_STARTED" "$address"
timeline driver_start "${resume_from:+resuming from ${resume_from}}"
run=0
status=0
while :; do
  ((run == 0)) || find_checkpoint
  if ((run > 0)); then
    timeline driver_restart "run ${run} after exit status ${status}${resume_from:+, resuming from ${resume_from}}"
  fi
  status=0
  run_driver "$run" || status=$?
  break
done
publish "${LOG_DIR}/driver_exit_code" "$status"
timeline driver_end "$status"
# A driver that exits 0 after the warning signal may have stopped because it was told to (a checkpoint
# saved, the time nearly up): unless it said the training is over, ENDED says it was interrupted, for
# raysub watch and for people. (Exit 0 ends the restart loop above either way.)
reason="driver exited with status ${status}"
delivered="${LOG_DIR}/signal_delivered"
if ((status == 0)) && trusted "$delivered" && [[ ! -e ${LOG_DIR}/driver_finished ]]; then
  reason="the driver exited with status 0 after $(<"$delivered"): interrupted, not finished (it did not create \$RAYSUB_FINISHED)"
fi
end_job "$reason"
log "$reason"
exit "$status"
