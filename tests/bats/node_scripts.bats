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
  # Anything a test left running: its node script and the fake Ray under it.
  if [[ -n ${node_pid:-} ]]; then kill "$node_pid" 2>/dev/null || true; fi
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
  sleep 0.6
  assert_equal "$(cat "$FAKE_RAY_LOG")" ""
  # Ray's command line is already loaded (raysub/node/join.py), waiting for the address.
  run pgrep -f -- "join.py --address-file=/tmp/rb${SLURM_JOB_ID}/nodeA/${P_LOCAL_HEAD_ADDRESS}"
  assert_success
  printf '10.0.0.1:7379\n' >"${LOG_DIR}/${P_STARTED_RAY_HEAD}"
  wait_file "${FAKE_RAY_LOG}.pids" 5
  run cat "$FAKE_RAY_LOG"
  # The joiner's command line (the address first), not the worker script's own 'ray start --block ...'.
  assert_output --partial "start --address=10.0.0.1:7379 --block "
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

@test "worker retries a failed ray start, then ends the job naming itself" {
  export FAKE_RAY_START_EXIT=1
  printf '10.0.0.1:7379\n' >"${LOG_DIR}/${P_STARTED_RAY_HEAD}"
  start_node "$P_WORKER_SCRIPT"
  wait_node
  assert_failure 1
  assert_equal "$(grep -c '^start ' "$FAKE_RAY_LOG")" 2
  run cat "${LOG_DIR}/${P_ENDED}"
  assert_output "worker 1 on nodeA: Ray did not stay up after 2 attempts"
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
  sleep 0.5
  # The driver connected, and is held there: one node of three is in Ray.
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
  printf '10.0.0.1:7379\n' >"${LOG_DIR}/${P_STARTED_RAY_HEAD}"
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
  assert_output --partial "head on nodeA: this Ray does not enforce token authentication"
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
  printf '10.0.0.1:7379\n' >"${LOG_DIR}/${P_STARTED_RAY_HEAD}"
  start_node "$P_WORKER_SCRIPT"
  wait_node
  assert_failure 1
  assert_equal "$(cat "${LOG_DIR}/${P_ENDED}")" "worker 1 on nodeA: interface nosuchif0 has no IPv4 address on nodeA"
  assert_equal "$(cat "$FAKE_RAY_LOG")" ""
}

@test "when many nodes end the job at once, exactly one reason wins and is the one in the timeline" {
  local k
  for k in $(seq 1 20); do
    PATH=$FAKES_PATH bash -c 'source <(sed -n "/^# ---- shared by the batch script/,/^# ---- end of shared/p" "$1")
      end_job "reason $2"' _ "${LOG_DIR}/${P_WORKER_SCRIPT}" "$k" 3>&- &
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
  printf '10.0.0.1:7379\n' >"${LOG_DIR}/${P_STARTED_RAY_HEAD}"
  start_node "$P_WORKER_SCRIPT"
  wait_file "${FAKE_RAY_LOG}.pids" 5
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
  printf '10.0.0.1:7379\n' >"${LOG_DIR}/${P_STARTED_RAY_HEAD}"
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
  printf '10.0.0.1:7379\n' >"${LOG_DIR}/${P_STARTED_RAY_HEAD}"
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
  printf '10.0.0.1:7379\n' >"${LOG_DIR}/${P_STARTED_RAY_HEAD}"
  printf '10.0.0.1:7379\n' >"${LOG_DIR}/${P_DRIVER_STARTED}"
  start_node "$P_WORKER_SCRIPT"
  wait_file "${FAKE_RAY_LOG}.pids" 5
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
    counter=$(pgrep -f -- "raysub.node.units --log-dir=${LOG_DIR}") || true
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
  printf '10.0.0.1:7379\n' >"${LOG_DIR}/${P_STARTED_RAY_HEAD}"
  printf '10.0.0.1:7379\n' >"${LOG_DIR}/${P_DRIVER_STARTED}"
  start_node "$P_WORKER_SCRIPT"
  wait_file "${FAKE_RAY_LOG}.pids" 5
  kill -TERM "$(head -n 1 "${FAKE_RAY_LOG}.pids")"
  wait_node
  assert_failure 1
  assert_equal "$(cat "${LOG_DIR}/${P_ENDED}")" "worker 1 on nodeA: Ray exited with status 143 while the driver ran"
}

@test "a worker refuses a STARTED_RAY_HEAD that others could have written, naming it" {
  printf '10.0.0.9:7379\n' >"${LOG_DIR}/${P_STARTED_RAY_HEAD}"
  chmod 0666 "${LOG_DIR}/${P_STARTED_RAY_HEAD}"
  start_node "$P_WORKER_SCRIPT"
  wait_node
  assert_failure
  run cat "${LOG_DIR}/${P_ENDED}"
  assert_output --partial "refusing ${LOG_DIR}/${P_STARTED_RAY_HEAD}"
  run grep -c "address=10.0.0.9" "$FAKE_RAY_LOG"
  assert_output 0
}

@test "a temp dir that is not the job's own (made first by someone else) is not used: a fresh private one is" {
  local planted="/tmp/rb${SLURM_JOB_ID}"
  mkdir -m 0777 "$planted" "${planted}/nodeA"
  chmod 0777 "$planted" "${planted}/nodeA"
  printf '10.6.6.6:7379\n' >"${planted}/nodeA/${P_LOCAL_HEAD_ADDRESS}"
  printf '10.0.0.1:7379\n' >"${LOG_DIR}/${P_STARTED_RAY_HEAD}"
  start_node "$P_WORKER_SCRIPT"
  wait_file "${FAKE_RAY_LOG}.pids" 5
  run cat "$FAKE_RAY_LOG"
  assert_output --partial "start --address=10.0.0.1:7379 "
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
