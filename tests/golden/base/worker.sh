#!/usr/bin/env bash
# raysub worker (raysub/job/templates/worker.sh.j2): one task of the batched worker srun. Waits for the head,
# then joins it with 'ray start --block', retrying a failed start.
# shellcheck disable=SC2317,SC2329 # shared functions: traps call some, and not every script calls each
set -euo pipefail
ROLE="worker ${SLURM_PROCID:-?}"
# shellcheck source=node.sh
source "${_RAYSUB_LOG_DIR:?is not set; run this script through the batch script}/node.sh"
GROWN=${_RAYSUB_GROW_DIR:-}
if [[ -n $GROWN ]]; then
  # A node of a grow job (raysub grow): it joins this job's Ray, and what would end the job on one of the
  # job's own nodes ends only this node (and its grow job, which sees its step end).
  end_job() { log "leaving: $1"; }
  LEAVE_FILE="${GROWN}.leave"
fi

# A grow job's node leaves Ray once its leave file says so (raysub shrink, Slurm's warning signal): through
# Ray's drain, until Ray has let it go or the file's deadline has come (raysub/job/programs/leave.py); then
# it ends what is left. Never returns.
leave_ray() {
  local deadline=0 why=""
  read -r deadline why <"$LEAVE_FILE" || true # '<deadline, epoch seconds> <why>' (protocol/grow_jobs.py)
  [[ $deadline =~ ^[0-9]+$ ]] || deadline=$EPOCHSECONDS
  log "leaving Ray: ${why:=its leave file says so}"
  node_program leave "$address" "$deadline" "$why" "$TEMP_DIR" "$ip" "${SLURM_JOB_ID:-?}" || log "leaving without Ray's drain"
  exit 0
}

# Starts this node's first 'ray start' ahead of the head (raysub/job/programs/join.py, run as a script with Ray's
# Python): Ray's command line loads while the head starts (with only the CPU nobody else wants), instead
# of after it, and Ray starts as soon as the head's address is in JOIN_FILE, a file of this node's own
# temp dir (a SIGCONT says it is there).
start_joiner() {
  JOIN_FILE="${TEMP_DIR}/raysub_head_address"
  "$(ray_python)" "${LOG_DIR}/python/raysub/job/programs/join.py" --address-file="$JOIN_FILE" --look=0.25 \
    -- --block "$@" &
  CHILD_PID=$!
}

# Ends the job for a Ray that would not stay up on this node ($1, why), naming this node as the cause only
# while the head's GCS ($address) still takes a connection: a worker that cannot reach the head may be the
# victim of the head's node or of the network (every worker would then name itself), and names no one.
worker_failed() {
  [[ -z $GROWN ]] || die "$1"
  # shellcheck disable=SC2016 # the inner bash expands $1
  if timeout 3 bash -c 'exec 3<>"/dev/tcp/${1%:*}/${1##*:}"' _ "$address" 2>/dev/null; then
    blame_node "$HOST" "$1"
    die "$1"
  fi
  die "${1}; the head at ${address} does not answer either"
}

check_canary
# Everything but the head's address is ready before the wait, off the bring-up's path; a bad
# --interface or a failing --setup ends the job at once. An assignment, not an argument: a failing
# node_ip must end this node here.
prepare_temp_dir
temp=$TEMP_DIR
ip=$(node_ip)
ray_node_args "$ip" "$temp" 8 ""
run_setup
preflight_gate 8
# Worker k is task k of the worker step (its nodes in topology order): rank k+2, after the head's 1 (a grow
# job's task k: k plus the base its batch script sets).
node_topology 8 $((SLURM_PROCID + ${_RAYSUB_RANK_BASE:-2}))
clean_temp_dir
start_joiner "${RAY_ARGS[@]}"
status=0
# Give up on the head a minute after the head itself would.
wait_for_file "${LOG_DIR}/STARTED_RAY_HEAD" $((SECONDS + 960)) || status=$?
if ((status == 1)); then
  log "job ended before the head started: $(<"$ENDED_FILE")"
  exit 0
fi
((status == 0)) || die "the head did not start in time"
address=$(read_trusted "${LOG_DIR}/STARTED_RAY_HEAD")
log "joining ${address}"
publish "$JOIN_FILE" "$address"
kill -CONT "$CHILD_PID" 2>/dev/null || true
for ((attempt = 0; attempt <= 2; attempt++)); do
  if ((attempt > 0)); then
    log "retrying ray start (attempt $((attempt + 1)) of 3)"
    run_setup
    clean_temp_dir
    log "joining ${address}"
    start_ray --address="$address" "${RAY_ARGS[@]}"
  fi
  status=0
  watch_child || status=$?
  if [[ -e $ENDED_FILE ]] || ended_by_signal "$status"; then exit 0; fi
  # Once the driver runs, a node that leaves Ray breaks the job: end it now rather than rejoin. A grow
  # job's node only leaves.
  [[ ! -e "${LOG_DIR}/DRIVER_STARTED" ]] || worker_failed "Ray exited with status ${status} while the driver ran"
  log "ray exited with status ${status}"
  sleep 1
done
worker_failed "Ray did not stay up after 3 attempts"
