#!/usr/bin/env bats
# The sandbox's node script (raysub/job/templates/sandbox.sh.j2), run here: it is ready only once the sandbox
# command's own process listens on its port, and it takes its port from the node's block of Ray's
# ports unless --sandbox-port pins one.
# Readiness waits allow 30 s: under CI the bats run at nice 10 beside the real-Slurm jobs at nice 0, and a
# niced sandbox that starts its server can take more than the 10 s that always sufficed alone.

setup() {
  load test_helper
  export LOG_DIR="${BATS_TEST_TMPDIR}/logs"
  export "${P_ENV_LOG_DIR}=${LOG_DIR}" "${P_ENV_CANARY}=token-${BATS_TEST_NUMBER}"
  export SLURM_JOB_ID="${BATS_ROOT_PID}${BATS_TEST_NUMBER}" SLURMD_NODENAME=nodeA SLURM_PROCID=0
  # A port nobody here uses: the kernel's pick, given back at once.
  PORT=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  # Listens on the port it is given in the sandbox's variable (as a code-execution server would), or
  # fails to bind and exits.
  SERVER="exec \"${PYTHON}\" -m http.server --bind 127.0.0.1 \"\$${P_SANDBOX_PORT_ENV}\""
}

teardown() {
  if [[ -n ${node_pid:-} ]]; then kill "$node_pid" 2>/dev/null || true; fi
  if [[ -n ${stranger_pid:-} ]]; then kill "$stranger_pid" 2>/dev/null || true; fi
  pkill -f -- "http.server --bind 127.0.0.1 ${PORT}" 2>/dev/null || true
}

render_sandbox() {
  render_node_scripts --nodes 2 --gpus-per-node 0 --interface lo --no-monitor --sandbox-timeout 5 "$@" -- true
}

start_sandbox() {
  node_log="${BATS_TEST_TMPDIR}/sandbox.log"
  bash "${LOG_DIR}/${P_SANDBOX_SCRIPT}" >"$node_log" 2>&1 3>&- &
  node_pid=$!
}

wait_sandbox() {
  status=0
  wait "$node_pid" || status=$?
  node_pid=""
  output=$(<"$node_log")
}

# Runs a sandbox pinned to $PORT with command $1 (and render options after it) to its end: it must fail
# without announcing itself.
run_refused_sandbox() {
  render_sandbox --sandbox-port "$PORT" --sandbox-command "$@"
  export "${P_SANDBOX_PORT_ENV}=${PORT}"
  start_sandbox
  wait_sandbox
  assert_failure
  assert [ ! -e "${LOG_DIR}/${P_SANDBOX_READY_PREFIX}nodeA" ]
}

# Another user's server (here: a process that is not the sandbox's) listening on $PORT.
start_stranger() {
  "$PYTHON" -c '
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
print("listening", flush=True)
time.sleep(60)
' "$PORT" >"${BATS_TEST_TMPDIR}/stranger" &
  stranger_pid=$!
  wait_file "${BATS_TEST_TMPDIR}/stranger" 5
  until grep -q listening "${BATS_TEST_TMPDIR}/stranger"; do sleep 0.05; done
}

@test "a pinned port: ready once the sandbox command's own process listens there" {
  render_sandbox --sandbox-port "$PORT" --sandbox-command "$SERVER"
  export "${P_SANDBOX_PORT_ENV}=${PORT}" # as the batch script exports it
  start_sandbox
  wait_file "${LOG_DIR}/${P_SANDBOX_READY_PREFIX}nodeA" 30
  assert_equal "$(cat "${LOG_DIR}/${P_SANDBOX_READY_PREFIX}nodeA")" "127.0.0.1:${PORT}"
  printf 'driver finished\n' >"${LOG_DIR}/${P_ENDED}"
  wait_sandbox
  assert_output --partial "ready on port ${PORT}"
}

@test "another process on the pinned port: not ready, and the job ends naming the port" {
  start_stranger
  run_refused_sandbox "$SERVER"
  assert_output --partial "port ${PORT} on nodeA is held by another process (user $(id -un), uid $(id -u)), not this sandbox's: pin another --sandbox-port"
  run cat "${LOG_DIR}/${P_ENDED}"
  assert_output --partial "sandbox on nodeA: port ${PORT} on nodeA is held by another process"
}

@test "a port that answers is not enough: a sandbox command that never listens times out" {
  start_stranger # answers on the port, while the sandbox command itself listens nowhere
  run_refused_sandbox "sleep 30"
  assert_output --partial "port ${PORT} on nodeA is held by another process"
}

@test "ours beside a stranger's on another address is not ready: a client of the port might reach the stranger's" {
  start_stranger # on 127.0.0.1, while the sandbox command listens on 127.0.0.2, both on the same port
  run_refused_sandbox "${SERVER/127.0.0.1/127.0.0.2}" --sandbox-timeout 2
  assert_output --partial "port ${PORT} on nodeA is held by another process"
}

@test "a job that ends while the sandbox starts: the sandbox leaves quietly, without a failure of its own" {
  render_sandbox --sandbox-port "$PORT" --sandbox-command "sleep 30"
  export "${P_SANDBOX_PORT_ENV}=${PORT}"
  start_sandbox
  sleep 0.3
  printf 'head on nodeA: it failed\n' >"${LOG_DIR}/${P_ENDED}"
  wait_sandbox
  assert_success
  assert_output --partial "job ended before the sandbox was ready: head on nodeA: it failed"
  refute_output --partial FATAL
}

@test "the port of the node's block: taken from what the node's Ray published, and given to the command" {
  render_sandbox --no-exclusive --sandbox-command "printf '%s\n' \"\$${P_SANDBOX_PORT_ENV}\" >${BATS_TEST_TMPDIR}/told; ${SERVER}"
  start_sandbox
  sleep 0.5
  assert [ ! -e "${BATS_TEST_TMPDIR}/told" ] # it waits for the node's Ray to pick its block
  (umask 077 && printf '%s\n' "$PORT" >"${LOG_DIR}/${P_SANDBOX_PORT_PREFIX}nodeA")
  wait_file "${LOG_DIR}/${P_SANDBOX_READY_PREFIX}nodeA" 30
  assert_equal "$(cat "${BATS_TEST_TMPDIR}/told")" "$PORT"
  assert_equal "$(cat "${LOG_DIR}/${P_SANDBOX_READY_PREFIX}nodeA")" "127.0.0.1:${PORT}"
  printf 'driver finished\n' >"${LOG_DIR}/${P_ENDED}"
  wait_sandbox
}

@test "the port of the node's block: waiting for it (the head's --setup, its GPU preflight) counts not against --sandbox-timeout" {
  # 8 s: time enough for the server (a Python) to listen under CI's load, where 3 s once was not.
  render_sandbox --no-exclusive --sandbox-command "$SERVER" --sandbox-timeout 8
  start_sandbox
  sleep 8.5 # longer than --sandbox-timeout, before the node's Ray picks its block
  (umask 077 && printf '%s\n' "$PORT" >"${LOG_DIR}/${P_SANDBOX_PORT_PREFIX}nodeA")
  wait_file "${LOG_DIR}/${P_SANDBOX_READY_PREFIX}nodeA" 30
  printf 'driver finished\n' >"${LOG_DIR}/${P_ENDED}"
  wait_sandbox
  assert_success
  assert_output --partial "ready on port ${PORT}"
}

@test "the port of the node's block: a file someone else could have written is refused" {
  render_sandbox --no-exclusive --sandbox-command "$SERVER"
  printf '%s\n' "$PORT" >"${LOG_DIR}/${P_SANDBOX_PORT_PREFIX}nodeA"
  chmod 0666 "${LOG_DIR}/${P_SANDBOX_PORT_PREFIX}nodeA"
  start_sandbox
  wait_sandbox
  assert_failure
  assert_output --partial "refusing ${LOG_DIR}/${P_SANDBOX_PORT_PREFIX}nodeA"
}
