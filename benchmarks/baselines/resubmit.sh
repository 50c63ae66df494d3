#!/usr/bin/env bash
# A plain resubmit, as a user would script it without raysub watch (benchmarks/recovery.py, kind
# "resubmit"): submit JOB_SCRIPT and, each time the job has left squeue, submit it again, RESUBMITS times
# (default 1). It asks squeue every POLL seconds (default 1), looks at nothing else (not how the job
# ended, not its logs) and waits no backoff. Prints one line per event, "<event> <job id> <epoch s>":
# submitted (once sbatch has returned) and gone (the first squeue that no longer lists the job).
#
#   resubmit.sh JOB_SCRIPT [RESUBMITS] [POLL]
set -euo pipefail

JOB=""

main() {
  local script=$1 resubmits=${2:-1} poll=${3:-1} k
  submit "$script"
  for ((k = 0; k < resubmits; k++)); do
    while [[ -n $(squeue -h -j "$JOB" -o %i 2>/dev/null) ]]; do sleep "$poll"; done
    printf 'gone %s %s\n' "$JOB" "${EPOCHREALTIME/,/.}"
    submit "$script"
  done
}

# Submits $1 from this directory and sets JOB to its id.
submit() {
  JOB=$(sbatch --parsable "$1")
  JOB=${JOB%%;*}
  printf 'submitted %s %s\n' "$JOB" "${EPOCHREALTIME/,/.}"
}

main "$@"
