# shellcheck shell=bash
# raysub's shared bash (raysub/job/templates/lib.sh.j2): the batch script and every script it writes into LOG_DIR
# source this one copy. The sourcing script sets LOG_DIR, HOST and ROLE first.
# shellcheck disable=SC2317,SC2329 # shared functions: traps call some, and not every script calls each
: "${LOG_DIR:?}" "${HOST:?}" "${ROLE:?}"
ENDED_FILE="${LOG_DIR}/ENDED"
# Where every file bash writes into LOG_DIR is made (docs/security.md): a directory the batch script made
# 0700, so no default ACL and no umask decides who may open a file before its mode is set.
STAGE="${LOG_DIR}/.stage"
TIMELINE="${LOG_DIR}/timeline.jsonl"
TIMELINE_LOCK="${LOG_DIR}/timeline.lock"

log() {
  printf '%(%H:%M:%S)T raysub %s on %s: %s\n' -1 "$ROLE" "$HOST" "$*" >&2
}

# A node that cannot go on ends the whole job, saying why, so no other node waits for it.
die() {
  log "FATAL: $*"
  end_job "${ROLE} on ${HOST}: $*"
  exit 1
}

# The name file $1 is made under before it is renamed into place: in STAGE for LOG_DIR's files, beside
# it for a node's own (its private temp dir; a rename must stay on one filesystem).
staged() {
  if [[ ${1%/*} == "$LOG_DIR" ]]; then
    printf '%s/%s.%s.%s' "$STAGE" "${1##*/}" "$HOST" "$$"
  else
    printf '%s.tmp.%s.%s' "$1" "$HOST" "$$"
  fi
}

# Writes $2 and a newline to file $1 atomically, the owner's alone (0600): readers see all of it or
# nothing, and nobody else can have written it.
publish() {
  local target=$1 content=$2 tmp
  tmp=$(staged "$target")
  printf '%s\n' "$content" >"$tmp"
  chmod 0600 -- "$tmp"
  mv -f -- "$tmp" "$target"
}

# Creates (or empties) file $1 with mode $2 (a log: 0640).
create_file() {
  local tmp
  tmp=$(staged "$1")
  : >"$tmp"
  chmod "$2" -- "$tmp"
  mv -f -- "$tmp" "$1"
}

# True when file $1 is this user's and nobody else may write it: a signal file a script may act on.
trusted() {
  local mode
  [[ -f $1 && ! -L $1 && -O $1 ]] || return 1
  mode=$(stat -c %a -- "$1") || return 1
  (((8#$mode & 8#022) == 0))
}

# The content of signal file $1, once it is shown to be trusted; otherwise the job ends, naming it.
read_trusted() {
  trusted "$1" || die "refusing $1 ($(stat -c 'owner %U, mode %a' -- "$1" 2>/dev/null)): someone else could have written it"
  printf '%s\n' "$(<"$1")"
}

# Marks the job as over, with a reason; the first writer wins, also when several nodes end it at once:
# a hard link fails when its target exists, atomically, on NFS too (a test then a rename would not).
end_job() {
  local tmp
  [[ ! -e $ENDED_FILE ]] || return 0
  tmp=$(staged "$ENDED_FILE")
  printf '%s\n' "$1" >"$tmp"
  chmod 0600 -- "$tmp"
  if ln -- "$tmp" "$ENDED_FILE" 2>/dev/null; then
    rm -f -- "$tmp"
  elif [[ -e $ENDED_FILE ]]; then
    rm -f -- "$tmp" # another node was first
    return 0
  else
    mv -f -- "$tmp" "$ENDED_FILE" # a filesystem without hard links
  fi
  timeline ended "$1"
}

# Puts node $1 on the timeline as the cause of a failure ($2, why): raysub watch leaves it out of the
# next job. Only for what is the node's own fault (its GPUs, its Ray, never joining), not for a node that
# merely saw the job end.
blame_node() {
  timeline node_failed "${1}: ${2}"
}

# A JSON string holding $1 (control characters other than newline, CR and tab become spaces).
json_string() {
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/\\n}
  s=${s//$'\r'/\\r}
  s=${s//$'\t'/\\t}
  s=${s//[$'\001'-$'\037']/ }
  printf '"%s"' "$s"
}

# Appends {"t": <epoch seconds>, "phase": $1, "node": HOST, "detail": $2} to the timeline. The flock
# keeps lines from different nodes whole (on NFS too) and, since the time is read under it, in time
# order. Where flock is missing or fails (NFSv3 without lockd: "No locks available"; Lustre mounted
# noflock), the line is written anyway: the short append is still one write. Never fatal.
timeline() {
  local rest
  rest="\"phase\": \"$1\", \"node\": $(json_string "$HOST"), \"detail\": $(json_string "${2:-}")}"
  {
    if command -v flock >/dev/null 2>&1; then flock -w 10 9 2>/dev/null || true; fi
    timeline_line "$rest" >>"$TIMELINE"
  } 9>>"$TIMELINE_LOCK" || timeline_line "$rest" >>"$TIMELINE" || true
}

timeline_line() {
  local now=${EPOCHREALTIME:-$(date +%s.%N)}
  printf '{"t": %s, %s\n' "${now/,/.}" "$1"
}

# Sleeps before the next look at something another node does: a tenth of the time waited so far, at
# least 0.05 s and at most 1.0 s (JobSpec.look_max_cs), so a wait ends at most about 10% late and a
# long one costs the shared filesystem a look per node per second, or, from a thousand nodes up, about a
# thousand looks a second for the whole job. With $1 (centiseconds) it sleeps at most that long in the
# wait's first minute, when the awaited file usually comes. Callers set WAITED_CS=0 (centiseconds) before
# their loop.
WAITED_CS=0
pause() {
  local cs=$((WAITED_CS / 10)) most=100
  ((WAITED_CS >= 6000 || $# == 0)) || most=$1
  ((cs <= most)) || cs=$most
  ((cs >= 5)) || cs=5
  WAITED_CS=$((WAITED_CS + cs))
  sleep_cs "$cs"
}

# Sleeps $1 centiseconds.
sleep_cs() {
  local hundredths
  printf -v hundredths '%02d' $(($1 % 100)) # not $(printf): a loop that runs for days forks once a look, for sleep
  # Not 'read -t' (no fork): a trapped TERM that ends the script during it can crash bash 5.2 when the
  # read's timer goes off during the clean-up ("longjmp causes uninitialized stack frame").
  sleep "$(($1 / 100)).${hundredths}"
}

# Reads the directory of file $1, which revalidates the client's cache: on NFS a cached "no such file",
# or the file a rename since replaced, can otherwise hide the new one for as long as the attribute cache
# lives. A glob that can match only the file (its last letter as a bracket expression) makes bash read
# the directory, with no fork.
revalidate() {
  local dir=${1%/*} name=${1##*/}
  : "$dir"/"${name%?}"["${name: -1}"]
}

# Waits for file $1 until second $2 of $SECONDS (0: no deadline). In its first minute it looks at most
# every 0.05 s (JobSpec.signal_look_cs): a small job notices a signal file at once, and all of
# a large one's nodes together look about a thousand times a second at most.
# Returns 0 when it exists, 1 when ENDED appears first, 2 at the deadline.
wait_for_file() {
  local file=$1 deadline=$2
  WAITED_CS=0
  while :; do
    revalidate "$file"
    [[ -e $file ]] && return 0
    [[ -e $ENDED_FILE ]] && return 1
    if ((deadline > 0 && SECONDS >= deadline)); then return 2; fi
    pause 5
  done
}

# The interpreter of the 'ray' command (its console script's shebang), else python3.
ray_python() {
  local ray_bin shebang
  ray_bin=$(command -v ray)
  IFS= read -r shebang <"$ray_bin" || true
  shebang=${shebang#\#!}
  shebang=${shebang%% *}
  if [[ ${shebang##*/} == python* && -x $shebang ]]; then
    printf '%s\n' "$shebang"
  else
    printf 'python3\n'
  fi
}

# Runs node program $1 (raysub/job/programs/$1.py, which the batch script shipped into LOG_DIR) with Ray's
# Python and the remaining arguments: LOG_DIR's copy of the package comes first on its PYTHONPATH. Not
# the working directory, which 'python -m' would put before it (Python >= 3.11 honours PYTHONSAFEPATH):
# a job submitted from a raysub checkout must still run the copy it shipped.
node_program() {
  local program=$1
  shift
  PYTHONSAFEPATH=1 PYTHONPATH="${LOG_DIR}/python${PYTHONPATH:+:${PYTHONPATH}}" \
    "$(ray_python)" -m "raysub.job.programs.${program}" "$@"
}
