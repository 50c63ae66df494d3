# Loaded by every bats file: bats-support and bats-assert from node_modules, and helpers.
REPO="$(cd -- "${BATS_TEST_DIRNAME}/../.." && pwd)"
export REPO
load "${REPO}/node_modules/bats-support/load"
load "${REPO}/node_modules/bats-assert/load"

# The Python that has raysub installed (tests/test_bats.py passes it on).
PYTHON=${RAYSUB_TEST_PYTHON:-python3}

# Every name of raysub.protocol as P_<NAME>: P_ENDED=ENDED, P_TIMELINE=timeline.jsonl,
# P_ENV_CANARY=_RAYSUB_CANARY, P_PHASE_CANARY_OK=canary_ok, ... so no test spells a protocol name itself.
# Asked of raysub once per bats file, then read by every test.
protocol_names="${BATS_FILE_TMPDIR}/protocol_names.bash"
if [[ ! -e $protocol_names ]]; then
  "$PYTHON" -c '
import shlex
from raysub.protocol import template_names
for name, value in sorted(template_names().items()):
    print(f"P_{name}={shlex.quote(value)}")
' >"${protocol_names}.tmp" || return 1
  mv -- "${protocol_names}.tmp" "$protocol_names"
fi
# shellcheck source=/dev/null # generated just above
source "$protocol_names"

# Renders a job with the given 'raysub render' options and writes the scripts it embeds into
# $LOG_DIR exactly as the job would, plus the canary, so node scripts can run here with fakes.
render_node_scripts() {
  mkdir -p "$LOG_DIR"
  "$PYTHON" -m raysub render "$@" >"${BATS_TEST_TMPDIR}/job.sub"
  "$PYTHON" - "${BATS_TEST_TMPDIR}/job.sub" "$LOG_DIR" <<'PY'
import sys
from pathlib import Path

from raysub.validate import extract

for script in extract(Path(sys.argv[1]).read_text()):
    target = Path(sys.argv[2]) / script.name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(script.text)
PY
  printf '%s\n' "${!P_ENV_CANARY}" >"${LOG_DIR}/${P_CANARY}"
  [[ -d ${LOG_DIR}/${P_STAGE_DIR} ]] || mkdir -m 0700 "${LOG_DIR}/${P_STAGE_DIR}"
}

# Runs the command "${@:2}" every 0.1 s until it succeeds, for up to $1 seconds; fails if it never
# does. Tests wait for what they look for this way, never for a fixed time: a loaded CI machine may
# take seconds for what takes a tenth of one here.
wait_for() {
  local tenths=$(($1 * 10))
  shift
  until "$@"; do
    ((tenths-- > 0)) || return 1
    sleep 0.1
  done
}

# Waits up to $2 seconds (default 10) for file $1 to exist.
wait_file() {
  wait_for "${2:-10}" test -e "$1"
}
