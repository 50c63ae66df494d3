# shellcheck shell=bash
# raysub's node bash (raysub/job/templates/node.sh.j2): what every node script (head, worker, sandbox) does first,
# and the functions they share; each sources this one copy after setting ROLE.
# shellcheck disable=SC2317,SC2329 # shared functions: traps call some, and not every script calls each
: "${ROLE:?}"
# Runtime values come from the batch script's environment, under internal names (raysub/protocol/__init__.py).
from_batch() {
  [[ -n ${!1:-} ]] || { printf 'raysub: %s is not set; run this script through the batch script\n' "$1" >&2; exit 1; }
  printf '%s' "${!1}"
}
LOG_DIR=$(from_batch _RAYSUB_LOG_DIR)
HOST=${SLURMD_NODENAME:-$(hostname -s)}
# Every process this script starts carries this mark in its environment (Ray, the driver, whatever they
# start), so that when the node script ends it can find and stop what escaped its process tree (setsid,
# nohup, daemons), even where Slurm's process tracking cannot. Unique to this attempt of this job and to
# this script: the head and a sandbox on the same node each stop only their own.
export _RAYSUB_JOB_MARK
_RAYSUB_JOB_MARK="$(from_batch _RAYSUB_CANARY) ${ROLE}"
RAYSUB_MARK="_RAYSUB_JOB_MARK=$_RAYSUB_JOB_MARK"

# shellcheck source=lib.sh
source "${LOG_DIR}/lib.sh"
# Every node must read back the token the batch script wrote: proof that LOG_DIR is shared.
check_canary() {
  local canary="${LOG_DIR}/raysub_canary" token=""
  wait_for_file "$canary" $((SECONDS + 10)) || true
  [[ -r $canary ]] && token=$(read_trusted "$canary")
  [[ $token == "$(from_batch _RAYSUB_CANARY)" ]] ||
    die "cannot read the canary in ${LOG_DIR}: is the log directory on a filesystem every node shares?"
  timeline canary_ok
}

# This node's address for Ray: from --interface, else the node name's address; never loopback.
node_ip() {
  local ip="" iface=""
  if [[ -n $iface ]]; then
    ip=$(ip -4 -o addr show dev "$iface" 2>/dev/null | awk '{ split($4, a, "/"); print a[1]; exit }')
    [[ -n $ip ]] || die "interface ${iface} has no IPv4 address on ${HOST}"
  else
    ip=$(getent ahostsv4 "$HOST" 2>/dev/null | awk '$1 !~ /^127\./ { print $1; exit }')
    if [[ -z $ip ]]; then
      ip=$(hostname -I 2>/dev/null | tr ' ' '\n' | awk '/^[0-9.]+$/ && !/^127\./ { print; exit }')
    fi
    [[ -n $ip ]] || die "no non-loopback IPv4 address for ${HOST}; pass --interface"
  fi
  printf '%s\n' "$ip"
}

# The long-running program of a node script (Ray, or the sandbox command) runs as a child, CHILD_PID,
# rather than exec'd, so that a failed start can be retried. Whenever the script exits (a Slurm TERM
# included) it kills that child's whole process tree, so nothing is re-parented out of Slurm's
# process tracking, and removes the node's Ray temp dir.
CHILD_PID=""
TEMP_DIR=""
TEMP_PARENT=""
# A grow job's node: its job's leave file, whose coming makes watch_child call leave_ray (worker.sh).
LEAVE_FILE=""

# True while process $1 runs (a dead child not yet reaped does not count).
running() {
  local stat
  [[ -r /proc/$1/stat ]] && stat=$(<"/proc/$1/stat") || return 1
  stat=${stat##*) }
  [[ ${stat%% *} != Z ]]
}

# Stops a process and then its descendants, printing their PIDs: a stopped process starts no new child,
# so the list is complete once the walk is done.
freeze_tree() {
  local pid=$1 child
  kill -STOP "$pid" 2>/dev/null || return 0
  printf '%s\n' "$pid"
  for child in $(pgrep -P "$pid" 2>/dev/null); do freeze_tree "$child"; done
}

# Kills a process and all its descendants. Ray's own shutdown stops its processes one after the other,
# up to a second each, and waits on a GCS that may already be gone; sent TERM all at once, they even
# restart helpers while dying. A job that is ending needs none of that. (Init reaps the orphans.)
kill_tree() {
  local pids
  pids=$(freeze_tree "$1")
  # shellcheck disable=SC2086 # one PID per word
  [[ -z $pids ]] || kill -KILL $pids 2>/dev/null || true
}

stop_child() {
  [[ -n $CHILD_PID ]] || return 0
  kill_tree "$CHILD_PID"
  wait "$CHILD_PID" 2>/dev/null || true
  CHILD_PID=""
}

# Kills what is left of this node's Ray even when its parent died first (and the tree walk cannot
# reach it): every process whose command line names this node's temp dir, which only this job's Ray does.
kill_strays() {
  local pattern pids
  [[ -n $TEMP_DIR ]] || return 0
  pattern=$(printf '%s/' "$TEMP_DIR" | sed 's/[.+]/\\&/g')
  pids=$(pgrep -f -- "$pattern" 2>/dev/null) || return 0
  # shellcheck disable=SC2086 # one PID per word
  kill -KILL $pids 2>/dev/null || true
}

# Kills every process of this user that carries this attempt's mark ($RAYSUB_MARK) and is not this
# script: what the job started and Slurm could not track. Builtins only, so the sweep itself starts no
# marked process. A process that cleared its environment is out of reach.
sweep_marked() {
  local dir pid entry
  for dir in /proc/[0-9]*; do
    pid=${dir#/proc/}
    # Only this node's (the minicluster's nodes share one PID space but not their network namespace).
    [[ $pid != "$$" && $pid != "$BASHPID" && -O $dir && ${dir}/ns/net -ef /proc/$$/ns/net ]] || continue
    while IFS= read -r -d '' entry; do
      if [[ $entry == "$RAYSUB_MARK" ]]; then
        kill -KILL "$pid" 2>/dev/null || true
        break
      fi
    done 2>/dev/null <"${dir}/environ" || true
  done
}

cleanup() {
  local pid helpers
  # A second TERM (Slurm sends more than one) must not cut the clean-up short.
  trap '' TERM INT
  # Ray first: it is what must not outlive the job, and Slurm may not wait long.
  stop_child
  kill_strays
  # Ray's logs, before their temp dir goes (head and workers, with --keep-ray-logs; declared in _ray.sh).
  if declare -F keep_ray_logs >/dev/null; then keep_ray_logs; fi
  [[ -z $TEMP_DIR ]] || rm -rf -- "$TEMP_DIR"
  # The job's own parent directory (one with the job id in it) goes once the last node has left it.
  [[ -z $TEMP_PARENT ]] || rmdir -- "$TEMP_PARENT" 2>/dev/null || true
  # The head lets its driver stop on its own first (declared in head.sh).
  if declare -F stop_driver >/dev/null; then stop_driver; fi
  # Background helpers (such as the head's unit counter) end with the script, children and all. Disowned
  # first: bash would otherwise report each as "Killed", which reads like a failure in a good run's log.
  helpers=$(jobs -p)
  disown -a
  for pid in $helpers; do kill_tree "$pid"; done
  sweep_marked
}
trap cleanup EXIT
# Slurm's TERM after the job has ended (ENDED exists) is the normal way out, not a failure.
trap '[[ -e $ENDED_FILE ]] && exit 0; exit 143' TERM
trap 'exit 130' INT

# Slurm ends a step (scancel, a time limit, a requeue) by sending TERM to each of its processes, the
# deepest first and this script last (proctrack/linuxproc's kill_tree), while the batch script's trap
# writes ENDED: a child that died of that TERM is nobody's failure. True when a child's exit status $1
# says TERM or HUP and the job ends (ENDED) within 5 s; this script's own TERM usually comes sooner.
ended_by_signal() {
  (($1 == 143 || $1 == 129)) || return 1
  wait_for_file "$ENDED_FILE" $((SECONDS + 5))
}

# Waits for the child to exit while watching ENDED: when the job ends elsewhere, the child is killed at
# once. Returns the child's exit status, or 0 when it was stopped because of ENDED. On a grow job's node,
# the leave file's coming hands over to leave_ray, which does not return.
watch_child() {
  local status=0
  WAITED_CS=0
  while kill -0 "$CHILD_PID" 2>/dev/null; do
    if [[ -e $ENDED_FILE ]]; then
      stop_child
      return 0
    fi
    if [[ -n $LEAVE_FILE ]]; then
      revalidate "$LEAVE_FILE"
      [[ ! -e $LEAVE_FILE ]] || leave_ray
    fi
    pause
  done
  wait "$CHILD_PID" || status=$?
  CHILD_PID=""
  return "$status"
}

# ---- end of shared functions ----

# ---- Ray helpers shared by the head and worker scripts (raysub/job/templates/_ray.sh.j2) ----
# This node's Ray temp dir (%j: job id, %n: node name), checked against AF_UNIX's path limit and made the
# job's own (0700): TEMP_DIR. Nothing is read from a directory the job did not make: where the per-job
# parent (without one, the temp dir itself) exists but is not this user's private directory, as another
# user can arrange on a shared /tmp before the job starts, the node takes a fresh one from mktemp beside
# it, and says so. Called once, before the first attempt.
prepare_temp_dir() {
  local dir=/tmp/rs-%j/%n own replaced
  dir=${dir//%j/${SLURM_JOB_ID:-0}}
  dir=${dir//%n/${HOST}}
  own=${dir%/*}
  mkdir -m 0700 -- "$own" 2>/dev/null || true
  if ! own_dir "$own"; then
    replaced=$own
    own=$(mktemp -d -- "${own%/*}/rs-XXXXXX") || die "${replaced} is not this job's, and mktemp -d failed beside it"
    log "${replaced} is not this job's own directory (another user's?); using ${own} instead"
    timeline temp_dir_replaced "$replaced"
    dir="${own}${dir#"${replaced}"}"
  fi
  TEMP_PARENT=$own
  mkdir -m 0700 -- "$dir" 2>/dev/null || own_dir "$dir" || die "cannot make ${dir}"
  (( ${#dir} + 68 <= 107 )) ||
    die "Ray temp dir ${dir} is too long for Ray's socket paths; pass a shorter --ray-temp-dir"
  TEMP_DIR=$dir
  export TMPDIR=$TEMP_DIR
}

# True when $1 is a real directory (not a link) of this user's that nobody else may enter.
own_dir() {
  local mode
  [[ -d $1 && ! -L $1 && -O $1 ]] || return 1
  mode=$(stat -c %a -- "$1") || return 1
  (((8#$mode & 8#077) == 0))
}

# Empties this node's temp dir of what a previous attempt left (never 'ray stop': it would stop every Ray
# process on the machine, other jobs' included).
# Globs, not find: a container image may have no findutils. (A glob that matches nothing stays as it is,
# and rm -f takes it as a file that is not there.)
clean_temp_dir() {
  rm -rf -- "${TEMP_DIR:?}"/* "${TEMP_DIR:?}"/.[!.]* "${TEMP_DIR:?}"/..?*
}

# What Slurm gave this job on this node, for Ray to use instead of the whole machine's CPUs and memory
# (Ray counts the machine: on a shared node it would place work on CPUs and memory the job does not
# have). CPUs: $2 (--cpus-per-task, or --head-cpus on a heterogeneous job's head) when given, else
# SLURM_CPUS_ON_NODE (the job's CPUs here, which every step sees). Memory, when the job asked for it:
# SLURM_MEM_PER_NODE, or SLURM_MEM_PER_CPU times the CPUs, in MB (0 means the whole node: left to Ray); the object store takes 30% of it, as Ray's default
# does of a machine's. Fewer CPUs or GPUs here than Ray is to use end the job before Ray starts. GPUs
# are counted only where Slurm says which it gave (SLURM_STEP_GPUS, SLURM_JOB_GPUS): CUDA_VISIBLE_DEVICES
# may be the submitting shell's.
allocation_args() {
  local gpus=$1 cpus=${2:-${SLURM_CPUS_ON_NODE:-}} bytes store
  local mb=${SLURM_MEM_PER_NODE:-} given=${SLURM_STEP_GPUS-${SLURM_JOB_GPUS-}} list=()
  if [[ ${SLURM_CPUS_ON_NODE:-} =~ ^[0-9]+$ ]] && ((SLURM_CPUS_ON_NODE < cpus)); then
    die "Ray is to use ${cpus} CPUs here, but Slurm gave this job ${SLURM_CPUS_ON_NODE} on ${HOST}"
  fi
  if [[ -n ${SLURM_STEP_GPUS+set}${SLURM_JOB_GPUS+set} ]] && ((gpus > 0)); then
    [[ -z $given ]] || IFS=, read -ra list <<<"$given"
    ((${#list[@]} >= gpus)) || die "Ray is to use ${gpus} GPUs here, but Slurm gave this job ${#list[@]} on" \
      "${HOST} (GPUs '${given}'); check --gpus-per-node against the partition's nodes"
  fi
  ALLOCATION_ARGS=()
  [[ $cpus =~ ^[0-9]+$ ]] && ALLOCATION_ARGS+=(--num-cpus="$cpus")
  if [[ -z $mb && ${SLURM_MEM_PER_CPU:-} =~ ^[0-9]+$ && $cpus =~ ^[0-9]+$ ]]; then
    mb=$((SLURM_MEM_PER_CPU * cpus))
  fi
  if [[ $mb =~ ^[0-9]+$ ]] && ((mb > 0)); then
    bytes=$((mb * 1024 * 1024))
    store=$((bytes * 3 / 10))
    ALLOCATION_ARGS+=(--memory="$((bytes - store))" --object-store-memory="$store")
  fi
}

# Ray's GCS holds connections from the worker processes of every node, each raylet those of its own: a
# soft limit of 1024 open files (many sites', and Slurm hands the submitting shell's to the job) runs out
# at a few hundred nodes, and a 2000-node cluster ran out of 65536 on its head (kuberay#4860). The soft
# limit goes up to the hard one, as any process may; a hard limit below 65536 on the head is said, since
# only the site can raise it (limits.conf, slurmd's LimitNOFILE).
raise_open_files() {
  local hard soft
  hard=$(ulimit -Hn)
  [[ $hard != unlimited ]] || hard=1048576
  ulimit -Sn "$hard" 2>/dev/null || true
  soft=$(ulimit -Sn)
  if [[ $ROLE == head && $soft != unlimited ]] && ((soft < 65536)); then
    log "warning: Ray may open at most ${soft} files on ${HOST} (the hard limit); a cluster of hundreds of nodes" \
      "needs more on its head: ask for a nofile limit of 65536 or more"
  fi
}

run_setup() {
  local setup='source /opt/venv/bin/activate'
  [[ -z $setup ]] && return 0
  log "running --setup"
  eval "$setup" || die "--setup failed with status $?"
}

start_ray() {
  ray start --block "$@" &
  CHILD_PID=$!
}

# Linux gives an outgoing connection (a data loader's, a checkpoint upload's, NCCL's bootstrap) a local
# port from ip_local_port_range, less ip_local_reserved_ports. One of Ray's ports in there can be taken at
# any time of the run, not only before 'ray start': Ray's worker processes bind theirs as they start, hours
# in. Sets EXPOSED to how many of the ports in the spans "$1..$2" "$3..$4" ... such a connection may take
# (0 where /proc/sys says nothing), and EPHEMERAL to the range.
exposed_ports() {
  local low high first last item from to
  local -a reserved=()
  EXPOSED=0 EPHEMERAL=""
  read -r low high </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || return 0
  [[ $low =~ ^[0-9]+$ && $high =~ ^[0-9]+$ ]] || return 0
  EPHEMERAL="${low}-${high}"
  # Items read "8000-8999" or "9000", comma-separated; empty by default. The kernel keeps them as a
  # bitmap and prints them merged, so no two overlap and each can be taken off by its overlap alone.
  IFS=, read -ra reserved </proc/sys/net/ipv4/ip_local_reserved_ports 2>/dev/null || true
  while (($# >= 2)); do
    first=$(($1 > low ? $1 : low)) last=$(($2 < high ? $2 : high))
    shift 2
    ((first <= last)) || continue
    EXPOSED=$((EXPOSED + last - first + 1))
    for item in ${reserved[@]+"${reserved[@]}"}; do
      from=$((${item%-*} > first ? ${item%-*} : first)) to=$((${item#*-} < last ? ${item#*-} : last))
      ((from > to)) || EXPOSED=$((EXPOSED - (to - from + 1)))
    done
  done
}

# Says, in this node's log, when Ray's ports (spans as for exposed_ports) lie in the ephemeral range.
warn_exposed_ports() {
  exposed_ports "$@"
  ((EXPOSED)) || return 0
  log "warning: ${EXPOSED} of Ray's ports on ${HOST} lie in its ephemeral port range ${EPHEMERAL}" \
    "(/proc/sys/net/ipv4/ip_local_port_range, less ip_local_reserved_ports): any outgoing connection may" \
    "take one, and a Ray worker then fails to start; give Ray ports outside it (the --*-port options)"
}

# Options every Ray node starts with; user --ray-start-arg values come last and win. The node name is
# the Slurm node name, so the head can tell which nodes have joined.
ray_node_args() {
  local ip=$1 temp=$2 gpus=$3 cpus=$4
  raise_open_files
  allocation_args "$gpus" "$cpus"
  warn_exposed_ports 6379 6379 8001 8001 8265 8265 8266 8266 8267 8267 8268 8268 8076 8076 8077 8077 8080 8080 8300 8999
  # shellcheck disable=SC2034 # the head and worker scripts start Ray with it
  RAY_ARGS=(
    ${TOPOLOGY_ARGS[@]+"${TOPOLOGY_ARGS[@]}"}
    --node-ip-address="$ip" --node-name="$HOST" --temp-dir="$temp" --num-gpus="$gpus" --disable-usage-stats
    ${ALLOCATION_ARGS[@]+"${ALLOCATION_ARGS[@]}"}
    --node-manager-port=8076 --object-manager-port=8077
    --metrics-export-port=8080 --runtime-env-agent-port=8268
    --dashboard-agent-listen-port=8266
    --dashboard-agent-grpc-port=8267
    --min-worker-port=8300 --max-worker-port=8999
  )
}

# Where this node sits (--topology, raysub/job/programs/topology.py): its NVLink domain and Slurm switch or
# block, given to Ray as NeMo-RL's resources (nvlink_domain_<ClusterUUID>, topo_rank) and raysub/ labels,
# and the GPU-to-CPU file NeMo-RL binds its workers by. $1: the node's GPUs, $2: its rank, $3: set on a head
# that runs no GPU work. Once, after --setup (Ray's Python); retries start with what it found. A user's
# --ray-start-arg comes after it in RAY_ARGS and wins. A node that cannot tell says so and starts without.
node_topology() {
  local said status=0 lines=()
  said=$(node_program topology --log-dir="$LOG_DIR" --node="$HOST" --job="${SLURM_JOB_ID:-}" --gpus="$1" --rank="$2" --address="${SLURM_TOPOLOGY_ADDR:-}" --pattern="${SLURM_TOPOLOGY_ADDR_PATTERN:-}" ${3:+--dedicated-head} --resources='{}' --nvidia-smi-timeout=60) || status=$?
  if ((status != 0)); then
    log "warning: where this node sits is not known (status ${status}); Ray starts without its topology"
    return 0
  fi
  mapfile -t lines <<<"$said"
  TOPOLOGY_ARGS=(--resources="${lines[0]}" --labels-file="${lines[1]}")
  RAY_ARGS=("${TOPOLOGY_ARGS[@]}" "${RAY_ARGS[@]}")
  [[ -z ${lines[2]:-} ]] || export NRL_GPU_CPU_AFFINITY_FILE="${lines[2]}"
}

# Ray's own logs (raylet.out, gcs_server.out, the workers' .out/.err) outlive the temp dir they are in
# only as copies: node.sh's clean-up calls this after Ray is stopped, whatever ended the job (--keep-ray-logs,
# raysub/job/programs/ray_logs.py). It says what it kept in this node's log; it never fails the clean-up.
keep_ray_logs() {
  # No Ray session here (Ray never started; Ray links session_latest to each it makes): no Python to
  # start, on each of a thousand nodes.
  [[ -n $TEMP_DIR && -L ${TEMP_DIR}/session_latest ]] || return 0
  node_program ray_logs --temp-dir="$TEMP_DIR" --log-dir="$LOG_DIR" --node="$HOST" --max-mib=64 --seconds=10 || true
}

# The GPU preflight gate (--preflight warn, raysub/job/programs/preflight.py): this node's GPUs,
# as nvidia-smi sees them before Ray starts here, into preflight.jsonl. With fail, a GPU held by
# another process or short of memory ends the job, naming it; a check that cannot run is said and passed.
preflight_gate() {
  local gpus=$1 said status=0
  ((gpus > 0)) || return 0
  said=$(node_program preflight --log-dir="$LOG_DIR" --node="$HOST" --gpus="$gpus" --mode=warn --min-free-gpu-mem=1024 --wait-gpus=0 --first-pause=1 --max-pause=30 --nvidia-smi-timeout=60) || status=$?
  if ((status == 3)); then
    blame_node "$HOST" "GPU preflight: ${said}"
    die "GPU preflight: ${said}"
  elif ((status != 0)); then
    log "warning: the GPU preflight check did not run (status ${status}${said:+: ${said}}); going on"
  fi
}
# ---- end of Ray helpers ----
