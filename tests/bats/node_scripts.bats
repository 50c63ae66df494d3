#!/usr/bin/env bats
# The node scripts raysub renders, run here with a fake 'ray' (and a fake unit counter) on PATH.

setup() {
  load test_helper
  export LOG_DIR="${BATS_TEST_TMPDIR}/logs"
  export "${P_ENV_LOG_DIR}=${LOG_DIR}" "${P_ENV_CANARY}=token-${BATS_TEST_NUMBER}"
  export SLURM_JOB_ID="${BATS_ROOT_PID}${BATS_TEST_NUMBER}" SLURMD_NODENAME=nodeA SLURM_PROCID=1
  export FAKE_RAY_LOG="${BATS_TEST_TMPDIR}/ray-calls"
  export FAKES_PATH="${BATS_TEST_DIRNAME}/../fakes:${PATH}"
  : >"$FAKE_RAY_LOG"
  render_node_scripts --nodes 3 --gpus-per-node 2 --interface lo --ray-temp-dir '/tmp/rb%j/%n' \
    --worker-retries 1 --gcs-port 7379 --no-monitor -- bash -c 'echo driver ran; exit 3'
}

teardown() {
  # Anything a test left running: its node script and the fake Ray under it, a listening head.
  if [[ -n ${node_pid:-} ]]; then kill "$node_pid" 2>/dev/null || true; fi
  if [[ -n ${head_pid:-} ]]; then kill "$head_pid" 2>/dev/null || true; fi
  if [[ -n ${busy_pid:-} ]]; then kill "$busy_pid" 2>/dev/null || true; fi
  # A batch script (start_batch) and its head stand-in.
  if [[ -n ${batch_pid:-} ]]; then
    # shellcheck disable=SC2046 # one PID per word
    kill -KILL $(pgrep -P "$batch_pid") "$batch_pid" 2>/dev/null || true
  fi
  rm -rf "/tmp/rb${SLURM_JOB_ID}"
}

start_node() {
  node_log="${BATS_TEST_TMPDIR}/$1.log"
  PATH=$FAKES_PATH bash "${LOG_DIR}/$1" >"$node_log" 2>&1 3>&- &
  node_pid=$!
}

# Waits for the node script started by start_node: $status is its exit status, $output its log.
wait_node() {
  status=0
  wait "$node_pid" || status=$?
  node_pid=""
  output=$(<"$node_log")
}

@test "worker waits for STARTED_RAY_HEAD that appears late, then joins that address" {
  start_node "$P_WORKER_SCRIPT"
  # Ray's command line is already loaded (raysub/job/programs/join.py), waiting for the address.
  run wait_for 20 pgrep -f -- "join.py --address-file=/tmp/rb${SLURM_JOB_ID}/nodeA/${P_LOCAL_HEAD_ADDRESS}"
  assert_success
  assert_equal "$(cat "$FAKE_RAY_LOG")" ""
  printf '127.0.0.1:7379\n' >"${LOG_DIR}/${P_STARTED_RAY_HEAD}"
  wait_file "${FAKE_RAY_LOG}.pids" 20
  run cat "$FAKE_RAY_LOG"
  # The joiner's command line (the address first), not the worker script's own 'ray start --block ...'.
  assert_output --partial "start --address=127.0.0.1:7379 --block "
  assert_output --partial "--num-gpus=2"
  assert_output --partial "--temp-dir=/tmp/rb${SLURM_JOB_ID}/nodeA"
  kill -TERM "$node_pid"
  wait_node
  assert_equal "$status" 143
  # The whole Ray tree went with the script, and so did its temp dir.
  run kill -0 "$(cat "${FAKE_RAY_LOG}.pids")"
  assert_failure
  assert [ ! -e "/tmp/rb${SLURM_JOB_ID}" ]
}

@test "worker leaves at once when ENDED appears before the head" {
  start_node "$P_WORKER_SCRIPT"
  sleep 0.3
  printf 'head: gave up\n' >"${LOG_DIR}/${P_ENDED}"
  wait_node
  assert_success
  assert_output --partial "job ended before the head started: head: gave up"
  assert_equal "$(cat "$FAKE_RAY_LOG")" ""
  run pgrep -f -- "join.py --address-file=/tmp/rb${SLURM_JOB_ID}/nodeA/"
  assert_failure
}

@test "a waiting worker lists LOG_DIR (for NFS) without starting a program to do it" {
  command -v strace >/dev/null || skip "needs strace"
  local trace="${BATS_TEST_TMPDIR}/calls"
  node_log="${BATS_TEST_TMPDIR}/worker.log"
  PATH=$FAKES_PATH strace -f -qq -e trace=execve,getdents64 -o "$trace" bash "${LOG_DIR}/${P_WORKER_SCRIPT}" \
    >"$node_log" 2>&1 3>&- &
  node_pid=$!
  sleep 1.5
  printf 'head: gave up\n' >"${LOG_DIR}/${P_ENDED}"
  wait_node
  assert_success
  # A job this small looks every 0.05 s, some thirty times in 1.5 s: each look read LOG_DIR, and none
  # of them ran ls.
  run grep -E 'execve\("[^"]*/ls"' "$trace"
  assert_output ""
  run grep -c 'getdents64(' "$trace"
  assert [ "$output" -ge 20 ]
}

# A head's GCS that takes connections, on loopback: its address in STARTED_RAY_HEAD.
listening_head() {
  local port_file="${BATS_TEST_TMPDIR}/head-port"
  python3 -c 'import socket, sys, time
s = socket.create_server(("127.0.0.1", 0))
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
time.sleep(60)' "$port_file" 3>&- &
  head_pid=$!
  wait_file "$port_file" 10
  printf '127.0.0.1:%s\n' "$(<"$port_file")" >"${LOG_DIR}/${P_STARTED_RAY_HEAD}"
}

@test "worker retries a failed ray start, then ends the job naming itself" {
  export FAKE_RAY_START_EXIT=1
  listening_head
  start_node "$P_WORKER_SCRIPT"
  wait_node
  kill "$head_pid"
  assert_failure 1
  assert_equal "$(grep -c '^start ' "$FAKE_RAY_LOG")" 2
  run cat "${LOG_DIR}/${P_ENDED}"
  assert_output "worker 1 on nodeA: Ray did not stay up after 2 attempts"
  # The node is named as failed on the timeline, for raysub watch to leave it out next time.
  run grep -c "\"phase\": \"${P_PHASE_NODE_FAILED}\", \"node\": \"nodeA\", \"detail\": \"nodeA: Ray did not stay up" \
    "${LOG_DIR}/${P_TIMELINE}"
  assert_output "1"
}

@test "on shared nodes a worker takes the next block of ports when one of its job's is in use, at every start" {
  render_node_scripts --nodes 2 --gpus-per-node 0 --interface lo --ray-temp-dir '/tmp/rb%j/%n' --no-exclusive \
    --worker-retries 1 --no-monitor -- true
  local picked=$((SLURM_JOB_ID % 17)) next
  next=$((24000 + (picked + 1) % 17 * 500))
  # Another job's socket in the middle of the block this job id picks (of 17 in 24000-32767).
  python3 -c 'import socket, sys, time
s = socket.create_server(("127.0.0.1", int(sys.argv[1])))
open(sys.argv[2], "w").close()
time.sleep(60)' "$((24000 + picked * 500 + 250))" "${BATS_TEST_TMPDIR}/busy" 3>&- &
  busy_pid=$!
  wait_file "${BATS_TEST_TMPDIR}/busy" 10
  export FAKE_RAY_START_EXIT=1
  listening_head
  start_node "$P_WORKER_SCRIPT"
  wait_node
  assert_failure 1
  run grep -c -- "--node-manager-port=$((next + 6)) .*--min-worker-port=$((next + 10)) --max-worker-port=$((next + 499))" \
    "$FAKE_RAY_LOG"
  assert_output "2"
  run grep -c "\"phase\": \"${P_PHASE_RAY_PORTS}\", \"node\": \"nodeA\", \"detail\": \"${next}-$((next + 499))\"" \
    "${LOG_DIR}/${P_TIMELINE}"
  assert_output "2"
}

# Starts the node script $1 as start_node does, in a network namespace of its own (so root only) whose
# ephemeral port range is $2 ("LOW HIGH") less the reserved ports $3 (ip_local_reserved_ports' syntax).
start_node_with_ephemeral_ports() {
  [[ $EUID -eq 0 ]] || skip "needs root for a network namespace of its own"
  node_log="${BATS_TEST_TMPDIR}/$1.log"
  # shellcheck disable=SC2016 # expanded by the inner bash
  PATH=$FAKES_PATH unshare --net -- bash -c 'ip link set lo up &&
    printf "%s\n" "$1" >/proc/sys/net/ipv4/ip_local_port_range &&
    printf "%s\n" "$2" >/proc/sys/net/ipv4/ip_local_reserved_ports && exec bash "$3"' \
    ephemeral "$2" "$3" "${LOG_DIR}/$1" >"$node_log" 2>&1 3>&- &
  node_pid=$!
}

# Renders shared-node scripts and runs a worker whose Ray fails (twice: --worker-retries 1) with the
# ephemeral ports $1 less $2; PICKED is the block (of 17 in 24000-32767) the job id picks.
worker_with_ephemeral_ports() {
  render_node_scripts --nodes 2 --gpus-per-node 0 --interface lo --ray-temp-dir '/tmp/rb%j/%n' --no-exclusive \
    --worker-retries 1 --no-monitor -- true
  export FAKE_RAY_START_EXIT=1
  printf '127.0.0.1:9\n' >"${LOG_DIR}/${P_STARTED_RAY_HEAD}"
  start_node_with_ephemeral_ports "$P_WORKER_SCRIPT" "$1" "$2"
  wait_node
  assert_failure 1
}

# Asserts that the worker took the block of ports from $1 at both its starts (the timeline says).
assert_block_taken_twice() {
  run sed -n "s/.*\"phase\": \"${P_PHASE_RAY_PORTS}\", \"node\": \"nodeA\", \"detail\": \"\([0-9-]*\)\".*/\1/p" \
    "${LOG_DIR}/${P_TIMELINE}"
  assert_output "$(printf '%s\n' "$1-$(($1 + 499))" "$1-$(($1 + 499))")"
}

@test "on shared nodes a worker passes over a block of ports in the node's ephemeral range" {
  local low=$((24000 + SLURM_JOB_ID % 17 * 500))
  worker_with_ephemeral_ports "${low} $((low + 499))" ""
  assert_block_taken_twice $((24000 + (SLURM_JOB_ID % 17 + 1) % 17 * 500))
  run grep -c "warning: .* ephemeral" "$node_log"
  assert_output "0"
}

@test "on shared nodes a worker whose every block is ephemeral takes its job's and says so" {
  worker_with_ephemeral_ports "9000 65000" ""
  assert_block_taken_twice $((24000 + SLURM_JOB_ID % 17 * 500))
  run grep -c "warning: 500 of Ray's ports on nodeA lie in its ephemeral port range 9000-65000 .*--port-range" \
    "$node_log"
  assert_output "2"
}

@test "ports the node reserves (ip_local_reserved_ports) count as outside the ephemeral range" {
  local low=$((24000 + SLURM_JOB_ID % 17 * 500))
  worker_with_ephemeral_ports "9000 65000" "8000,${low}-$((low + 249)),$((low + 250))-$((low + 498))"
  assert_block_taken_twice "$low"
  # One port of the block is left: the last.
  run grep -c "warning: 1 of Ray's ports on nodeA lie in its ephemeral port range 9000-65000" "$node_log"
  assert_output "2"
}

@test "with fixed ports a node says how many of Ray's ports lie in its ephemeral range" {
  export FAKE_RAY_START_EXIT=1
  printf '127.0.0.1:9\n' >"${LOG_DIR}/${P_STARTED_RAY_HEAD}"
  # Of the defaults, all but the GCS' 6379: 8001, 8265-8268, 8076, 8077, 8080 and the workers' 8300-8999.
  start_node_with_ephemeral_ports "$P_WORKER_SCRIPT" "8000 60999" ""
  wait_node
  assert_failure 1
  # Once: a retry starts Ray with the same ports.
  run grep -c "warning: 708 of Ray's ports on nodeA lie in its ephemeral port range 8000-60999 .*the --\*-port options" \
    "$node_log"
  assert_output "1"
}

@test "reserved ports that straddle a port span or the ephemeral range's edge count only where they overlap" {
  export FAKE_RAY_START_EXIT=1
  printf '127.0.0.1:9\n' >"${LOG_DIR}/${P_STARTED_RAY_HEAD}"
  # The 708 of the test above, less 8001, 8076, 8077 and the workers' 8900-8999.
  start_node_with_ephemeral_ports "$P_WORKER_SCRIPT" "8000 60999" "7990-8001,8070-8078,8900-9100"
  wait_node
  assert_failure 1
  run grep -c "warning: 605 of Ray's ports on nodeA lie in its ephemeral port range 8000-60999 " "$node_log"
  assert_output "1"
}

@test "a worker that cannot reach the head either names no node as failed" {
  # The head's node died (nothing listens at its address): every worker's Ray fails, through no fault of
  # its own, and none of them may be left out of the next job.
  export FAKE_RAY_START_EXIT=1
  printf '127.0.0.1:9\n' >"${LOG_DIR}/${P_STARTED_RAY_HEAD}"
  start_node "$P_WORKER_SCRIPT"
  wait_node
  assert_failure 1
  run cat "${LOG_DIR}/${P_ENDED}"
  assert_output "worker 1 on nodeA: Ray did not stay up after 2 attempts; the head at 127.0.0.1:9 does not answer either"
  run grep -c "\"phase\": \"${P_PHASE_NODE_FAILED}\"" "${LOG_DIR}/${P_TIMELINE}"
  assert_output "0"
}

@test "a checkpoint directory this node cannot see ends the job before the driver starts" {
  export FAKE_UNITS="6" RAYSUB_CHECKPOINT_DIR="${BATS_TEST_TMPDIR}/scratch/ckpt"
  start_node "$P_HEAD_SCRIPT"
  wait_node
  assert_failure 1
  run cat "${LOG_DIR}/${P_ENDED}"
  assert_output "head on nodeA: the checkpoint directory ${RAYSUB_CHECKPOINT_DIR} does not exist on nodeA: is its file system mounted here? (--create-checkpoint-dir makes it)"
  assert_equal "$(cat "${LOG_DIR}/${P_DRIVER_LOG}" 2>/dev/null)" ""
}

@test "a checkpoint directory raysub watch may not make on its host is made by the head" {
  export FAKE_UNITS="6" RAYSUB_CHECKPOINT_DIR="${BATS_TEST_TMPDIR}/scratch/ckpt" RAYSUB_CREATE_CHECKPOINT_DIR=1
  start_node "$P_HEAD_SCRIPT"
  wait_node
  assert_failure 3 # the driver's own status: it ran
  assert [ -d "$RAYSUB_CHECKPOINT_DIR" ]
  run grep -c "made the checkpoint directory ${RAYSUB_CHECKPOINT_DIR}" "$node_log"
  assert_output "1"
}

@test "the driver resumes from the newest checkpoint in RAYSUB_CHECKPOINT_DIR, never a resume point it was given" {
  render_node_scripts --nodes 3 --gpus-per-node 2 --interface lo --ray-temp-dir '/tmp/rb%j/%n' \
    --gcs-port 7379 --no-monitor -- bash -c 'echo "resume: ${RAYSUB_RESUME_FROM-unset}"'
  local checkpoints="${BATS_TEST_TMPDIR}/ckpt"
  mkdir -p "${checkpoints}/step_5" "${checkpoints}/step_9"
  : >"${checkpoints}/step_5/training_info.json"
  # step_9 is still being written: no training_info.json yet. The submit-time value is stale.
  export FAKE_UNITS="6" RAYSUB_CHECKPOINT_DIR=$checkpoints RAYSUB_RESUME_FROM=/stale/step_1
  start_node "$P_HEAD_SCRIPT"
  wait_node
  assert_success
  assert_equal "$(cat "${LOG_DIR}/${P_DRIVER_LOG}")" "resume: ${checkpoints}/step_5"
  run grep -c "\"phase\": \"${P_PHASE_DRIVER_START}\", \"node\": \"nodeA\", \"detail\": \"resuming from ${checkpoints}/step_5\"" \
    "${LOG_DIR}/${P_TIMELINE}"
  assert_output "1"
}

@test "with no complete checkpoint yet, the driver gets no resume point, whatever the job was given" {
  render_node_scripts --nodes 3 --gpus-per-node 2 --interface lo --ray-temp-dir '/tmp/rb%j/%n' \
    --gcs-port 7379 --no-monitor -- bash -c 'echo "resume: ${RAYSUB_RESUME_FROM-unset}"'
  mkdir -p "${BATS_TEST_TMPDIR}/ckpt/step_9"
  export FAKE_UNITS="6" RAYSUB_CHECKPOINT_DIR="${BATS_TEST_TMPDIR}/ckpt" RAYSUB_RESUME_FROM=/stale/step_1
  start_node "$P_HEAD_SCRIPT"
  wait_node
  assert_success
  assert_equal "$(cat "${LOG_DIR}/${P_DRIVER_LOG}")" "resume: unset"
}

@test "a node that cannot read the canary fails and names itself" {
  export "${P_ENV_CANARY}=another-job"
  start_node "$P_WORKER_SCRIPT"
  wait_node
  assert_failure 1
  run cat "${LOG_DIR}/${P_ENDED}"
  assert_output --partial "worker 1 on nodeA: cannot read the canary"
}

@test "head publishes ray_worker_units atomically, runs the driver once all units joined, exits with its status" {
  export FAKE_UNITS="0 2 oops 4 6"
  start_node "$P_HEAD_SCRIPT"
  local units_file="${LOG_DIR}/${P_WORKER_UNITS}" seen="${BATS_TEST_TMPDIR}/seen" value
  # Read the file as fast as possible while the head rewrites it: a reader must only ever see whole counts.
  while kill -0 "$node_pid" 2>/dev/null; do
    if [[ -e $units_file ]]; then
      value=$(<"$units_file") || true
      printf '[%s]\n' "$value" >>"$seen"
    fi
  done
  wait_node
  assert_failure 3
  run grep -v -E '^\[[0-9]+\]$' "$seen"
  assert_output ""
  assert_equal "$(cat "$units_file")" "6"
  assert_equal "$(cat "${LOG_DIR}/${P_DRIVER_LOG}")" "driver ran"
  assert_equal "$(cat "${LOG_DIR}/${P_DRIVER_EXIT_CODE}")" "3"
  assert_equal "$(cat "${LOG_DIR}/${P_ENDED}")" "driver exited with status 3"
  assert_equal "$(cat "${LOG_DIR}/${P_STARTED_RAY_HEAD}")" "127.0.0.1:7379"
  run grep -c '^start ' "$FAKE_RAY_LOG"
  assert_output "1"
}

@test "the head is ready once its GCS logs the head node's registration, before ray_current_cluster" {
  export FAKE_UNITS="6" FAKE_RAY_GCS_LOG_ONLY=1
  start_node "$P_HEAD_SCRIPT"
  local started="${LOG_DIR}/${P_STARTED_RAY_HEAD}" tries=0
  # Without the log line the head would wait its whole --head-timeout: give up long before.
  until [[ -e $started ]] || ((++tries > 200)); do sleep 0.05; done
  # The fake head never writes ray_current_cluster here: only the GCS's log line can have said so.
  assert [ -e "$started" ]
  wait_node
  assert_failure 3
  assert_equal "$(cat "$started")" "127.0.0.1:7379"
  assert_equal "$(cat "${LOG_DIR}/${P_DRIVER_LOG}")" "driver ran"
}

@test "an early Python driver starts while workers join, and its ray.init returns only once all joined" {
  local nodes="${BATS_TEST_TMPDIR}/nodes" before="${BATS_TEST_TMPDIR}/before_init"
  export FAKE_RAY_NODES=$nodes
  mkdir -p "$nodes"
  printf '%s\n' 'import os, sys, ray' 'open(sys.argv[1], "w").close()' 'ray.init()' \
    'print("whole:", os.path.exists(sys.argv[2]), "gate:", os.environ.get(sys.argv[3], "gone"),' \
    '      "PYTHONPATH:", os.environ.get("PYTHONPATH", "unset"))' >"${BATS_TEST_TMPDIR}/driver.py"
  render_node_scripts --nodes 3 --gpus-per-node 0 --interface lo --ray-temp-dir '/tmp/rb%j/%n' \
    --gcs-port 7379 --no-monitor -- python3 "${BATS_TEST_TMPDIR}/driver.py" "$before" \
    "${LOG_DIR}/${P_DRIVER_STARTED}" "$P_ENV_DRIVER_GATE"
  start_node "$P_HEAD_SCRIPT"
  wait_file "$before"
  wait_file "${LOG_DIR}/${P_DRIVER_PID}"
  # The driver connected, and is held there: one node of three is in Ray.
  run wait_for 20 grep -qx "ray.init connected" "${LOG_DIR}/${P_DRIVER_LOG}"
  assert_success
  assert_equal "$(cat "${LOG_DIR}/${P_DRIVER_LOG}")" "ray.init connected"
  assert [ ! -e "${LOG_DIR}/${P_DRIVER_STARTED}" ]
  touch "${nodes}/nodeB" "${nodes}/nodeC"
  wait_node
  assert_success
  run cat "${LOG_DIR}/${P_DRIVER_LOG}"
  assert_output "$(printf '%s\n' 'ray.init connected' 'whole: True gate: gone PYTHONPATH: unset')"
}

@test "an early driver that exits before the cluster is whole ends the job with its status" {
  export FAKE_RAY_NODES="${BATS_TEST_TMPDIR}/nodes"
  mkdir -p "$FAKE_RAY_NODES"
  render_node_scripts --nodes 3 --gpus-per-node 0 --interface lo --ray-temp-dir '/tmp/rb%j/%n' \
    --gcs-port 7379 --no-monitor -- python3 -c 'import sys; sys.exit("no such model")'
  start_node "$P_HEAD_SCRIPT"
  wait_node
  assert_failure 1
  assert_equal "$(cat "${LOG_DIR}/${P_DRIVER_LOG}")" "no such model"
  assert_equal "$(cat "${LOG_DIR}/${P_DRIVER_EXIT_CODE}")" "1"
  assert_equal "$(cat "${LOG_DIR}/${P_ENDED}")" "the driver exited with status 1 before the cluster was whole"
  assert [ ! -e "${LOG_DIR}/${P_DRIVER_STARTED}" ]
}

@test "a failing --setup ends the job at once, naming the node" {
  render_node_scripts --nodes 2 --gpus-per-node 0 --interface lo --ray-temp-dir '/tmp/rb%j/%n' \
    --setup 'false' -- true
  printf '127.0.0.1:7379\n' >"${LOG_DIR}/${P_STARTED_RAY_HEAD}"
  start_node "$P_WORKER_SCRIPT"
  wait_node
  assert_failure 1
  assert_equal "$(cat "${LOG_DIR}/${P_ENDED}")" "worker 1 on nodeA: --setup failed with status 1"
  assert_equal "$(cat "$FAKE_RAY_LOG")" ""
}

@test "a Ray that does not enforce the token ends the job instead of running open" {
  export FAKE_UNITS="0" FAKE_UNPROTECTED=1
  start_node "$P_HEAD_SCRIPT"
  wait_node
  assert_failure 1
  run cat "${LOG_DIR}/${P_ENDED}"
  assert_output --partial "head on nodeA: Ray of unknown version does not enforce token authentication"
  assert_output --partial "render with --auth none: then anyone who can reach the head's ports"
  assert [ ! -e "${LOG_DIR}/${P_DRIVER_STARTED}" ]
}

@test "a flock that fails (NFSv3 without lockd) does not stop the timeline" {
  local fakes="${BATS_TEST_TMPDIR}/failing-flock"
  mkdir -p "$fakes"
  printf '#!/bin/sh\necho "flock: 9: No locks available" >&2\nexit 1\n' >"${fakes}/flock"
  chmod +x "${fakes}/flock"
  printf 'head: gave up\n' >"${LOG_DIR}/${P_ENDED}"
  FAKES_PATH="${fakes}:${FAKES_PATH}" start_node "$P_WORKER_SCRIPT"
  wait_node
  assert_success
  run grep -c "\"phase\": \"${P_PHASE_CANARY_OK}\"" "${LOG_DIR}/${P_TIMELINE}"
  assert_output "1"
}

@test "a worker with a bad --interface fails the node instead of starting Ray without an address" {
  render_node_scripts --nodes 2 --gpus-per-node 0 --interface nosuchif0 --ray-temp-dir '/tmp/rb%j/%n' -- true
  printf '127.0.0.1:7379\n' >"${LOG_DIR}/${P_STARTED_RAY_HEAD}"
  start_node "$P_WORKER_SCRIPT"
  wait_node
  assert_failure 1
  assert_equal "$(cat "${LOG_DIR}/${P_ENDED}")" "worker 1 on nodeA: interface nosuchif0 has no IPv4 address on nodeA"
  assert_equal "$(cat "$FAKE_RAY_LOG")" ""
}

@test "when many nodes end the job at once, exactly one reason wins and is the one in the timeline" {
  local k
  for k in $(seq 1 20); do
    PATH=$FAKES_PATH LOG_DIR=$LOG_DIR HOST=nodeA ROLE="worker $k" \
      bash -c 'source "$1" && end_job "reason $2"' _ "${LOG_DIR}/${P_SHARED_BASH}" "$k" 3>&- &
  done
  wait
  run grep -c "\"phase\": \"${P_PHASE_ENDED}\"" "${LOG_DIR}/${P_TIMELINE}"
  assert_output "1"
  local winner
  winner=$(cat "${LOG_DIR}/${P_ENDED}")
  run grep -F "\"detail\": \"${winner}\"" "${LOG_DIR}/${P_TIMELINE}"
  assert_success
}

@test "a process the job left behind (setsid) is stopped when the node leaves; TERM after ENDED exits 0" {
  printf '127.0.0.1:7379\n' >"${LOG_DIR}/${P_STARTED_RAY_HEAD}"
  start_node "$P_WORKER_SCRIPT"
  wait_file "${FAKE_RAY_LOG}.pids" 20
  local ray_pid mark state
  ray_pid=$(head -n 1 "${FAKE_RAY_LOG}.pids")
  mark=$(tr '\0' '\n' <"/proc/${ray_pid}/environ" | grep "^${P_ENV_MARK}=")
  assert_equal "$mark" "${P_ENV_MARK}=${!P_ENV_CANARY} worker 1"
  # Stands in for a daemon a Ray task started: it carries the mark but is outside the node's process tree.
  env "$mark" setsid sleep 300 </dev/null >/dev/null 2>&1 3>&- &
  local daemon_pid=$!
  printf 'driver exited with status 0\n' >"${LOG_DIR}/${P_ENDED}"
  kill -TERM "$node_pid"
  wait_node
  assert_success
  refute_output --partial "Killed"
  sleep 0.3
  state=$(awk '{ print $3 }' "/proc/${daemon_pid}/stat" 2>/dev/null || printf 'gone')
  [[ $state == Z || $state == gone ]] || kill -KILL "$daemon_pid"
  assert_equal "$([[ $state == Z || $state == gone ]] && echo stopped || echo "running ($state)")" stopped
}

@test "a unit counter that cannot import Ray's API ends the job at once with its error" {
  local nopy="${BATS_TEST_TMPDIR}/python-without-ray"
  mkdir -p "$nopy"
  ln -s /usr/bin/python3 "${nopy}/python3"
  run /usr/bin/python3 -c 'import ray'
  [[ $status -ne 0 ]] || skip "/usr/bin/python3 has Ray"
  FAKES_PATH="${nopy}:${FAKES_PATH}" start_node "$P_HEAD_SCRIPT"
  wait_node
  assert_failure 1
  run cat "${LOG_DIR}/${P_ENDED}"
  assert_output --regexp "^head on nodeA: the unit counter exited with status 1: ModuleNotFoundError: No module named 'ray'$"
  assert [ ! -e "${LOG_DIR}/${P_DRIVER_STARTED}" ]
}

@test "with --preflight fail, a GPU held by another process ends the job before Ray starts, naming it" {
  render_node_scripts --nodes 2 --gpus-per-node 2 --interface lo --ray-temp-dir '/tmp/rb%j/%n' \
    --preflight fail -- true
  export FAKE_NVIDIA_SMI_DIR="${BATS_TEST_TMPDIR}/gpus"
  mkdir -p "$FAKE_NVIDIA_SMI_DIR"
  cat >"${FAKE_NVIDIA_SMI_DIR}/nodeA" <<'GPUS'
gpu 0, GPU-00000000-0000-4000-8000-000000000000, NVIDIA H100 80GB HBM3, 0, 1, 81559, 30, 70.00, 700.00
gpu 1, GPU-00000000-0000-4000-8000-000000000001, NVIDIA H100 80GB HBM3, 97, 30512, 81559, 58, 512.33, 700.00
app 4242, /usr/bin/python3, 30000, GPU-00000000-0000-4000-8000-000000000001
GPUS
  printf '127.0.0.1:7379\n' >"${LOG_DIR}/${P_STARTED_RAY_HEAD}"
  start_node "$P_WORKER_SCRIPT"
  wait_node
  assert_failure 1
  run cat "${LOG_DIR}/${P_ENDED}"
  assert_output "worker 1 on nodeA: GPU preflight: GPU 1 is held by pid 4242 (python3, 30000 MiB)"
  assert_equal "$(cat "$FAKE_RAY_LOG")" ""
  run grep -c '"verdict":"fail"' "${LOG_DIR}/${P_PREFLIGHT}"
  assert_output "1"
}

@test "with --preflight warn, a busy GPU is recorded and Ray starts" {
  render_node_scripts --nodes 2 --gpus-per-node 2 --interface lo --ray-temp-dir '/tmp/rb%j/%n' -- true
  export FAKE_NVIDIA_SMI_DIR="${BATS_TEST_TMPDIR}/gpus"
  mkdir -p "$FAKE_NVIDIA_SMI_DIR"
  printf 'fail driver\n' >"${FAKE_NVIDIA_SMI_DIR}/default"
  printf '127.0.0.1:7379\n' >"${LOG_DIR}/${P_STARTED_RAY_HEAD}"
  start_node "$P_WORKER_SCRIPT"
  wait_file "$FAKE_RAY_LOG.pids"
  printf 'driver exited with status 0\n' >"${LOG_DIR}/${P_ENDED}"
  wait_node
  assert_success
  run grep -c '"verdict":"warn"' "${LOG_DIR}/${P_PREFLIGHT}"
  assert_output "1"
}

# Slurm ends a step by sending TERM to its processes deepest first, so a node script sees its child
# die of TERM a moment before its own TERM comes, and before the batch script's trap has written ENDED.
# The trap, as the batch script's end_job: first writer wins.
batch_script_ends_job() {
  (set -o noclobber && printf 'the batch script got SIGTERM\n' >"${LOG_DIR}/${P_ENDED}") 2>/dev/null || true
}

@test "a worker whose Ray dies of Slurm's TERM leaves the reason to the batch script" {
  printf '127.0.0.1:7379\n' >"${LOG_DIR}/${P_STARTED_RAY_HEAD}"
  printf '127.0.0.1:7379\n' >"${LOG_DIR}/${P_DRIVER_STARTED}"
  start_node "$P_WORKER_SCRIPT"
  wait_file "${FAKE_RAY_LOG}.pids" 20
  kill -TERM "$(head -n 1 "${FAKE_RAY_LOG}.pids")"
  sleep 0.5
  batch_script_ends_job
  wait_node
  assert_success
  assert_equal "$(cat "${LOG_DIR}/${P_ENDED}")" "the batch script got SIGTERM"
}

@test "a unit counter that dies of Slurm's TERM leaves the reason to the batch script" {
  export FAKE_UNITS="0"
  start_node "$P_HEAD_SCRIPT"
  local counter="" tenths=100
  while [[ -z $counter ]] && ((tenths-- > 0)); do
    sleep 0.1
    counter=$(pgrep -f -- "raysub.job.programs.units --log-dir=${LOG_DIR}") || true
  done
  assert [ -n "$counter" ]
  wait_file "${LOG_DIR}/${P_STARTED_RAY_HEAD}" 10
  kill -TERM "$counter"
  sleep 0.5
  batch_script_ends_job
  wait_node
  assert_equal "$(cat "${LOG_DIR}/${P_ENDED}")" "the batch script got SIGTERM"
}

@test "a worker whose Ray dies of TERM while no job ends still ends the job, 5 s later" {
  listening_head
  cp -- "${LOG_DIR}/${P_STARTED_RAY_HEAD}" "${LOG_DIR}/${P_DRIVER_STARTED}"
  start_node "$P_WORKER_SCRIPT"
  wait_file "${FAKE_RAY_LOG}.pids" 20
  kill -TERM "$(head -n 1 "${FAKE_RAY_LOG}.pids")"
  wait_node
  assert_failure 1
  assert_equal "$(cat "${LOG_DIR}/${P_ENDED}")" "worker 1 on nodeA: Ray exited with status 143 while the driver ran"
  # The head still answers: the node's own Ray failed, and it is named for watch to leave out.
  run grep -c "\"phase\": \"${P_PHASE_NODE_FAILED}\", \"node\": \"nodeA\"" "${LOG_DIR}/${P_TIMELINE}"
  assert_output "1"
}

@test "a worker refuses a STARTED_RAY_HEAD that others could have written, naming it" {
  printf '127.0.0.9:7379\n' >"${LOG_DIR}/${P_STARTED_RAY_HEAD}"
  chmod 0666 "${LOG_DIR}/${P_STARTED_RAY_HEAD}"
  start_node "$P_WORKER_SCRIPT"
  wait_node
  assert_failure
  run cat "${LOG_DIR}/${P_ENDED}"
  assert_output --partial "refusing ${LOG_DIR}/${P_STARTED_RAY_HEAD}"
  run grep -c "address=127.0.0.9" "$FAKE_RAY_LOG"
  assert_output 0
}

@test "a temp dir that is not the job's own (made first by someone else) is not used: a fresh private one is" {
  local planted="/tmp/rb${SLURM_JOB_ID}"
  mkdir -m 0777 "$planted" "${planted}/nodeA"
  chmod 0777 "$planted" "${planted}/nodeA"
  printf '10.6.6.6:7379\n' >"${planted}/nodeA/${P_LOCAL_HEAD_ADDRESS}"
  printf '127.0.0.1:7379\n' >"${LOG_DIR}/${P_STARTED_RAY_HEAD}"
  start_node "$P_WORKER_SCRIPT"
  wait_file "${FAKE_RAY_LOG}.pids" 20
  run cat "$FAKE_RAY_LOG"
  assert_output --partial "start --address=127.0.0.1:7379 "
  refute_output --partial "10.6.6.6"
  refute_output --partial "--temp-dir=${planted}/"
  assert_output --regexp "--temp-dir=/tmp/rs-[A-Za-z0-9]{6}/nodeA "
  run grep -F "\"phase\": \"${P_PHASE_TEMP_DIR_REPLACED}\"" "${LOG_DIR}/${P_TIMELINE}"
  assert_output --partial "\"detail\": \"${planted}\""
  local used
  used=$(grep -oE -- "--temp-dir=[^ ]+" "$FAKE_RAY_LOG" | head -n 1)
  used=${used#--temp-dir=}
  assert_equal "$(stat -c %a "$used")" 700
  assert_equal "$(stat -c %a "${used%/*}")" 700
  kill -TERM "$node_pid"
  wait_node
  assert [ ! -e "${used%/*}" ]
  rm -rf "$planted"
}

# ---- the warning signal and driver restarts (the head's restart loop, the batch script's forwarding) ----

@test "a driver that exits 0 after the warning signal was interrupted, not finished, and says so in ENDED" {
  export FAKE_UNITS="2"
  render_node_scripts --nodes 2 --gpus-per-node 0 --interface lo --ray-temp-dir '/tmp/rb%j/%n' \
    --gcs-port 7379 --no-monitor -- bash -c 'printf "%s\n" "$RAYSUB_FINISHED"'
  # As the batch script leaves it once it gave the driver the signal.
  (umask 077 && printf 'SIGUSR1\n' >"${LOG_DIR}/${P_SIGNAL_DELIVERED}")
  start_node "$P_HEAD_SCRIPT"
  wait_node
  assert_success
  assert_equal "$(cat "${LOG_DIR}/${P_DRIVER_LOG}")" "${LOG_DIR}/${P_DRIVER_FINISHED}"
  assert_equal "$(cat "${LOG_DIR}/${P_ENDED}")" \
    "the driver exited with status 0 after SIGUSR1: interrupted, not finished (it did not create \$${P_FINISHED_ENV})"
  assert_equal "$(cat "${LOG_DIR}/${P_DRIVER_EXIT_CODE}")" "0"
}

@test "a driver that declares itself finished after the warning signal ends the job as a plain exit 0" {
  export FAKE_UNITS="2"
  render_node_scripts --nodes 2 --gpus-per-node 0 --interface lo --ray-temp-dir '/tmp/rb%j/%n' \
    --gcs-port 7379 --no-monitor -- bash -c \
    'python3 -c "from raysub.driver import declare_finished; print(declare_finished())"'
  (umask 077 && printf 'SIGUSR1\n' >"${LOG_DIR}/${P_SIGNAL_DELIVERED}")
  start_node "$P_HEAD_SCRIPT"
  wait_node
  assert_success
  assert_equal "$(cat "${LOG_DIR}/${P_DRIVER_LOG}")" "True"
  assert [ -e "${LOG_DIR}/${P_DRIVER_FINISHED}" ]
  assert_equal "$(cat "${LOG_DIR}/${P_ENDED}")" "driver exited with status 0"
}

@test "before a restart the last run's processes are gone, even one in its own group that ignores TERM" {
  export FAKE_UNITS="2"
  local driver="${BATS_TEST_TMPDIR}/driver.sh" child="${BATS_TEST_TMPDIR}/child_pid"
  cat >"$driver" <<'SH'
child_pid_file=$1
if [[ ! -e $child_pid_file ]]; then
  # Its own session and process group, deaf to TERM: only the run's mark leads to it. The run ends only
  # once the child is so: on a busy machine it could still be in the run's group, without its trap, when
  # the head stops that group, and die of TERM like any other process of the run.
  setsid bash -c 'trap "" TERM; : >"$1"; while :; do sleep 0.2; done' - "${child_pid_file}.deaf" \
    </dev/null >/dev/null 2>&1 &
  printf '%s\n' "$!" >"$child_pid_file"
  while [[ ! -e ${child_pid_file}.deaf ]]; do sleep 0.05; done
  exit 1
fi
state=$(awk '{ print $3 }' "/proc/$(<"$child_pid_file")/stat" 2>/dev/null || printf 'gone')
if [[ $state != Z && $state != gone ]]; then echo "the first run's child is alive ($state)"; exit 7; fi
echo "the first run's child is gone"
SH
  render_node_scripts --nodes 2 --gpus-per-node 0 --interface lo --ray-temp-dir '/tmp/rb%j/%n' \
    --gcs-port 7379 --no-monitor --driver-restarts 1 --restart-backoff 1 -- bash "$driver" "$child"
  # The signal reached the first run: the second starts without it, so its exit 0 is a plain one.
  (umask 077 && printf 'SIGUSR1\n' >"${LOG_DIR}/${P_SIGNAL_DELIVERED}")
  start_node "$P_HEAD_SCRIPT"
  wait_node
  local child_pid
  child_pid=$(cat "$child")
  kill -KILL "$child_pid" 2>/dev/null || true
  assert_success
  assert_equal "$(cat "${LOG_DIR}/$("$PYTHON" -c 'from raysub.protocol import driver_log_name; print(driver_log_name(1))')")" \
    "the first run's child is gone"
  assert_equal "$(cat "${LOG_DIR}/${P_ENDED}")" "driver exited with status 0"
  assert_output --partial "the driver's processes did not all stop within 3 s of TERM: killing them"
  assert_output --partial "the warning signal had reached run 0; run 1 starts without it"
  # The clean-up of Ray (raysub/job/programs/cleanup.py) cannot work with the fake Ray: a warning, and the restart.
  assert_output --partial "warning: the clean-up before restart 1 exited with status 1"
  run grep -F "\"phase\": \"${P_PHASE_DRIVER_CLEANUP}\", \"node\": \"nodeA\", \"detail\": \"warning: " "${LOG_DIR}/${P_TIMELINE}"
  assert_success
  assert [ ! -e "${LOG_DIR}/${P_SIGNAL_DELIVERED}" ]
  assert [ ! -e "${LOG_DIR}/${P_DRIVER_PID}" ]
}

# Renders a whole batch script with $@ (one node, logs under $BATS_TEST_TMPDIR/base) into job.sub, with a
# stand-in for the head step: it waits for the file "go", then runs $DRIVER as the head does (its own
# process group, in DRIVER_PID while it runs) and ends the job with its status. Sets JOB_LOG_DIR.
render_batch() {
  local bin="${BATS_TEST_TMPDIR}/bin" head="${BATS_TEST_TMPDIR}/head-stand-in.sh"
  mkdir -p "$bin"
  JOB_LOG_DIR="${BATS_TEST_TMPDIR}/base/${SLURM_JOB_ID}-logs"
  "$PYTHON" -m raysub render --nodes 1 --gpus-per-node 0 --no-monitor --log-dir "${BATS_TEST_TMPDIR}/base" "$@" \
    -- true >"${BATS_TEST_TMPDIR}/job.sub"
  printf '#!/usr/bin/env bash\nexec bash %q\n' "$head" >"${bin}/srun"
  chmod +x "${bin}/srun"
  cat >"$head" <<SH
set -euo pipefail
touch "${BATS_TEST_TMPDIR}/head_started"
until [[ -e "${BATS_TEST_TMPDIR}/go" ]]; do sleep 0.05; done
umask 077
setsid bash -c "\$DRIVER" &
driver=\$!
printf '%s\n' "\$driver" >"${JOB_LOG_DIR}/${P_DRIVER_PID}.tmp"
mv "${JOB_LOG_DIR}/${P_DRIVER_PID}.tmp" "${JOB_LOG_DIR}/${P_DRIVER_PID}"
status=0
wait "\$driver" || status=\$?
rm -f "${JOB_LOG_DIR}/${P_DRIVER_PID}"
printf '%s\n' "\$status" >"${JOB_LOG_DIR}/${P_DRIVER_EXIT_CODE}"
printf 'driver exited with status %s\n' "\$status" >"${JOB_LOG_DIR}/${P_ENDED}"
SH
}

# Runs job.sub as Slurm would on nodeA, until its head stand-in waits for "go". Sets batch_pid, batch_log.
start_batch() {
  batch_log="${BATS_TEST_TMPDIR}/batch.log"
  SLURM_JOB_NODELIST=nodeA PATH="${BATS_TEST_TMPDIR}/bin:${FAKES_PATH}" bash "${BATS_TEST_TMPDIR}/job.sub" \
    >"$batch_log" 2>&1 3>&- &
  batch_pid=$!
  wait_file "${BATS_TEST_TMPDIR}/head_started" 20
}

@test "the warning signal before any driver runs is held, and goes to the driver once it handles it" {
  local marker="${BATS_TEST_TMPDIR}/got_usr1" batch_status=0
  # Its handler comes 2 s after it starts: the held signal must wait for it, not kill it.
  export DRIVER="exec \"${PYTHON}\" -c 'import pathlib, signal, sys, time
time.sleep(2)
signal.signal(signal.SIGUSR1, lambda *_: (pathlib.Path(sys.argv[1]).write_text(\"got\"), sys.exit(0)))
time.sleep(60)' ${marker}"
  render_batch --forward-signal USR1
  start_batch
  kill -USR1 "$batch_pid"
  wait_file "${JOB_LOG_DIR}/${P_SIGNAL_PENDING}"
  assert_equal "$(cat "${JOB_LOG_DIR}/${P_SIGNAL_PENDING}")" "SIGUSR1"
  touch "${BATS_TEST_TMPDIR}/go"
  wait "$batch_pid" || batch_status=$?
  run cat "$batch_log"
  assert_equal "$batch_status" 0
  assert_output --partial "got SIGUSR1 while no driver runs: it goes to the next driver"
  assert_output --regexp "forwarded SIGUSR1 \(held while no driver ran\) to the driver's processes that handle it: [0-9]+"
  assert_equal "$(cat "$marker")" "got"
  assert_equal "$(cat "${JOB_LOG_DIR}/${P_SIGNAL_DELIVERED}")" "SIGUSR1"
  assert [ ! -e "${JOB_LOG_DIR}/${P_SIGNAL_PENDING}" ]
  run grep -F "\"phase\": \"${P_PHASE_SIGNAL_FORWARDED}\", \"node\": \"nodeA\", \"detail\": \"SIGUSR1 to the driver\"" \
    "${JOB_LOG_DIR}/${P_TIMELINE}"
  assert_success
}

@test "a held warning signal goes to the whole group of a driver that does not handle it, after the grace" {
  local batch_status=0 started
  export DRIVER="exec sleep 60"
  render_batch --forward-signal USR1
  # The grace, 30 s as rendered, cut short for the test.
  sed -i 's/^readonly SIGNAL_GRACE_S=30$/readonly SIGNAL_GRACE_S=3/' "${BATS_TEST_TMPDIR}/job.sub"
  run grep -c '^readonly SIGNAL_GRACE_S=3$' "${BATS_TEST_TMPDIR}/job.sub"
  assert_output 1
  start_batch
  kill -USR1 "$batch_pid"
  wait_file "${JOB_LOG_DIR}/${P_SIGNAL_PENDING}"
  started=$SECONDS
  touch "${BATS_TEST_TMPDIR}/go"
  wait "$batch_pid" || batch_status=$?
  run cat "$batch_log"
  assert_equal "$batch_status" $((128 + $(kill -l USR1)))
  assert [ $((SECONDS - started)) -ge 3 ]
  assert_output --partial "forwarded SIGUSR1 (held while no driver ran) to the driver's process group (none of its processes handled it within 3 s)"
  assert_equal "$(cat "${JOB_LOG_DIR}/${P_SIGNAL_DELIVERED}")" "SIGUSR1"
}

@test "ray start is told the CPUs and memory Slurm gave the job on the node, not the machine's" {
  export FAKE_RAY_START_EXIT=1 SLURM_CPUS_ON_NODE=3 SLURM_MEM_PER_CPU=100
  listening_head
  start_node "$P_WORKER_SCRIPT"
  wait_node
  kill "$head_pid"
  local mib=$((1024 * 1024))
  run grep -c -- "--num-cpus=3 --memory=$((300 * mib - 300 * mib * 3 / 10)) --object-store-memory=$((300 * mib * 3 / 10)) " \
    "$FAKE_RAY_LOG"
  assert_output "2"
}

@test "with --mem=0 (the whole node) Ray sizes its memory itself" {
  export FAKE_RAY_START_EXIT=1 SLURM_CPUS_ON_NODE=2 SLURM_MEM_PER_NODE=0
  listening_head
  start_node "$P_WORKER_SCRIPT"
  wait_node
  kill "$head_pid"
  run grep -c -- "--num-cpus=2 " "$FAKE_RAY_LOG"
  assert_output "2"
  run grep -c -- "--memory=" "$FAKE_RAY_LOG"
  assert_output "0"
}

@test "fewer GPUs from Slurm on a node than Ray is to use end the job before ray start, naming both" {
  export SLURM_STEP_GPUS=0 CUDA_VISIBLE_DEVICES=0,1,2,3
  start_node "$P_WORKER_SCRIPT"
  wait_node
  assert_failure 1
  assert_equal "$(grep -c '^start ' "$FAKE_RAY_LOG")" 0
  run cat "${LOG_DIR}/${P_ENDED}"
  assert_output "worker 1 on nodeA: Ray is to use 2 GPUs here, but Slurm gave this job 1 on nodeA (GPUs '0'); check --gpus-per-node against the partition's nodes"
}

@test "a submitting shell's CUDA_VISIBLE_DEVICES is not taken for what Slurm gave" {
  export FAKE_RAY_START_EXIT=1 CUDA_VISIBLE_DEVICES=0
  listening_head
  start_node "$P_WORKER_SCRIPT"
  wait_node
  kill "$head_pid"
  assert_equal "$(grep -c '^start ' "$FAKE_RAY_LOG")" 2
}

@test "Ray starts with the hard limit of open files as its soft one; a low hard limit on the head is said" {
  ulimit -Sn 256
  export FAKE_RAY_START_EXIT=1
  listening_head
  start_node "$P_WORKER_SCRIPT"
  wait_node
  kill "$head_pid"
  local hard
  hard=$(ulimit -Hn)
  [[ $hard != unlimited ]] || hard=1048576
  assert_equal "$(sort -u "${FAKE_RAY_LOG}.nofile")" "$hard"
  refute_output --partial "open at most"
  ulimit -Hn 4096
  start_node "$P_HEAD_SCRIPT"
  wait_node
  assert_output --partial "warning: Ray may open at most 4096 files on nodeA (the hard limit)"
}

@test "with --scale large a worker of the second wave joins once the first is all but half a wave in Ray" {
  render_node_scripts --nodes 300 --gpus-per-node 0 --interface lo --ray-temp-dir '/tmp/rb%j/%n' --no-monitor \
    -- true
  # Workers 128 to 255 are the second of three waves; it waits for 128 - 64 nodes in Ray (the head's count).
  export SLURM_PROCID=130
  printf '127.0.0.1:7379\n' >"${LOG_DIR}/${P_STARTED_RAY_HEAD}"
  printf '63\n' >"${LOG_DIR}/${P_WORKER_UNITS}"
  start_node "$P_WORKER_SCRIPT"
  sleep 2
  assert_equal "$(cat "$FAKE_RAY_LOG")" ""
  printf '64\n' >"${LOG_DIR}/${P_WORKER_UNITS}.tmp"
  mv -f "${LOG_DIR}/${P_WORKER_UNITS}.tmp" "${LOG_DIR}/${P_WORKER_UNITS}"
  wait_file "${FAKE_RAY_LOG}.pids" 20
  run cat "$FAKE_RAY_LOG"
  assert_output --partial "start --address=127.0.0.1:7379 --block "
  run cat "$node_log"
  assert_output --partial "joining in wave 2 of 3 (64 nodes in Ray)"
}

@test "with --scale large a wave whose predecessors never join starts anyway, by half of --workers-timeout" {
  # 3 waves and --workers-timeout 6: each wave waits at most 6 / (2 * 3) = 1 s per wave before it.
  render_node_scripts --nodes 300 --gpus-per-node 0 --interface lo --ray-temp-dir '/tmp/rb%j/%n' --no-monitor \
    --workers-timeout 6 -- true
  export SLURM_PROCID=290
  printf '127.0.0.1:7379\n' >"${LOG_DIR}/${P_STARTED_RAY_HEAD}"
  start_node "$P_WORKER_SCRIPT"
  wait_file "${FAKE_RAY_LOG}.pids" 8
  run cat "$node_log"
  assert_output --partial "joining in wave 3 of 3 (0 nodes in Ray)"
}

@test "with --scale normal the workers of a large job join at once" {
  render_node_scripts --nodes 300 --gpus-per-node 0 --interface lo --ray-temp-dir '/tmp/rb%j/%n' --no-monitor \
    --scale normal -- true
  export SLURM_PROCID=290
  printf '127.0.0.1:7379\n' >"${LOG_DIR}/${P_STARTED_RAY_HEAD}"
  start_node "$P_WORKER_SCRIPT"
  wait_file "${FAKE_RAY_LOG}.pids" 20
  run cat "$node_log"
  refute_output --partial "wave"
}
