#!/usr/bin/env bats
# Argument handling of scripts/minicluster; none of these start a daemon.

setup() {
  load test_helper
  MC="${REPO}/scripts/minicluster"
  export MINICLUSTER_DIR="${BATS_TEST_TMPDIR}/mc"
}

@test "no command prints usage and exits 2" {
  run "$MC"
  assert_failure 2
  assert_output --partial "Usage: minicluster COMMAND"
}

@test "help exits 0 and names every command" {
  run "$MC" help
  assert_success
  for cmd in up down status env steps; do
    assert_output --partial "  ${cmd}"
  done
}

@test "an unknown command exits 2 naming it" {
  run "$MC" launch
  assert_failure 2
  assert_output --partial "unknown command 'launch'"
}

@test "up rejects a node count outside 1..8 before doing anything" {
  for bad in 0 9 -1 x 2.5 ''; do
    run "$MC" up --nodes "$bad"
    assert_failure 2
    assert_output --partial "--nodes must be a whole number from 1 to 8"
  done
  assert [ ! -e "$MINICLUSTER_DIR" ]
}

@test "up without a value for --nodes exits 2" {
  run "$MC" up --nodes
  assert_failure 2
  assert_output --partial "--nodes needs a value"
}

@test "up and down refuse to run as a non-root user" {
  [[ $EUID -eq 0 ]] || skip "needs root to switch to an unprivileged user"
  for cmd in up down; do
    run setpriv --reuid=65534 --regid=65534 --clear-groups "$MC" "$cmd"
    assert_failure 1
    assert_output --partial "'${cmd}' must run as root"
  done
}

@test "env prints export lines that eval back to the run directory" {
  export MINICLUSTER_DIR="${BATS_TEST_TMPDIR}/dir with 'quotes' and \$dollar"
  run "$MC" env
  assert_success
  eval "$output"
  assert_equal "$SLURM_CONF" "${BATS_TEST_TMPDIR}/dir with 'quotes' and \$dollar/etc/slurm.conf"
}

@test "status of a cluster that never ran says down and exits 3" {
  run "$MC" status
  assert_failure 3
  assert_output --partial "minicluster: down"
}

@test "steps needs one numeric job id" {
  run "$MC" steps
  assert_failure 2
  run "$MC" steps 12x
  assert_failure 2
  assert_output --partial "JOBID must be a number"
}

@test "steps counts only the step-create lines of that job" {
  mkdir -p "${MINICLUSTER_DIR}/log"
  printf '%s\n' \
    "[t] sched: Allocate JobId=12 NodeList=node[1-4]" \
    "[t] STEPS: _slurm_rpc_job_step_create: JobId=12 StepId=0 node[2-4] usec=370" \
    "[t] STEPS: _slurm_rpc_job_step_create: JobId=123 StepId=0 node1 usec=12" \
    "[t] STEPS: _slurm_rpc_job_step_create: JobId=12 StepId=1 node1 usec=200" \
    >"${MINICLUSTER_DIR}/log/slurmctld.log"
  run "$MC" steps 12
  assert_success
  assert_output "2"
  run "$MC" steps 7
  assert_success
  assert_output "0"
}
