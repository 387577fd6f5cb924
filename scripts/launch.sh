#!/usr/bin/env bash
# Runs a model's main.py with a precision preset on one machine, several (mpirun -H), or a
# SLURM allocation (srun, optionally in a container through pyxis/enroot): the part of every
# model's train.sh that is the same.
#   bash scripts/launch.sh MAIN_PY PRECISION GPUS [xla|noxla] [main.py flags]
#   PRECISION: amp (float16 + dynamic loss scaling on a GPU), tf32, or fp32 (TF32 off)
#   GPUS: GPUs per machine (one process each)
# Every process runs through scripts/bind.sh, which binds it to the CPUs and memory of its GPU's
# NUMA node (as NVIDIA's bind.sh); the launchers themselves bind nothing.
# Environment:
#   LAUNCHER=mpirun (default) | horovodrun | srun
#   CONTROLLER=gloo|mpi     horovodrun only: Horovod's controller (horovodrun's own choice
#                           by default: MPI where Horovod has it)
#   PYTHON=python           the interpreter every process runs
#   HOSTS=node1:8,node2:8   mpirun/horovodrun across machines (GPUS is then ignored)
#   NET_IFACE=eth1          the network interface ranks talk over, where nodes have several:
#                           NCCL_SOCKET_IFNAME, HOROVOD_GLOO_IFACE and Open MPI's TCP transports
#   SRUN_MPI=pmix           srun's --mpi plugin (pmi2 where the site's Slurm has no PMIx)
#   CONTAINER=IMAGE         srun only: run in this image (pyxis: --container-image, written
#                           [USER@][REGISTRY#]IMAGE[:TAG] or a .sqsh path), with
#   CONTAINER_WORKDIR       the repository inside it (default /workspace/tf-model-scripts, the
#   MOUNTS=src:dst,...      Dockerfile's) and these mounts (--container-mounts)
#   DRY_RUN=1               print the command line instead of running it
#   STOP_TIMEOUT=300        seconds ranks left behind by a dead launcher get to stop before
#                           they are killed
#   END_GRACE=10            seconds a launcher gets to end the job after a rank's --hang_timeout
#                           watch ended it (common/runtime/watchdog.py); then it is killed
set -euo pipefail
usage="usage: launch.sh MAIN_PY amp|tf32|fp32 GPUS [xla|noxla] [flags]"
die() { echo "launch.sh: error: $*" >&2; exit 2; }
MAIN=${1:?$usage}
PRECISION=${2:?$usage}
GPUS=${3:?$usage}
XLA=${4:-noxla}
shift $(( $# < 4 ? $# : 4 ))
[[ "$GPUS" =~ ^[1-9][0-9]*$ ]] || die "GPUS must be a positive number, not $GPUS"

# The precisions of common/tools/named_precisions.py (PRECISION_FLAGS), copied: this script runs where Python may
# not (the batch host of a pyxis job); tests/test_launchers.py checks that the two agree.
case "$PRECISION" in
  amp) flags=(--amp) ;;
  tf32) flags=(--tf32) ;;
  fp32) flags=(--no_tf32) ;;
  *) die "precision must be amp, tf32 or fp32, not $PRECISION" ;;
esac
case "$XLA" in
  xla) flags+=(--xla) ;;
  noxla) ;;
  *) die "the xla argument must be xla or noxla, not $XLA" ;;
esac

# The interface between nodes, where they have several: NCCL's and Gloo's own variables (every
# launcher passes them on), Open MPI's TCP transports (mpirun's -mca below; srun's tasks read
# the same from the environment), horovodrun's --network-interface.
if [ -n "${NET_IFACE:-}" ]; then
  [[ "$NET_IFACE" =~ ^[A-Za-z0-9_.:@-]+(,[A-Za-z0-9_.:@-]+)*$ ]] ||
    die "NET_IFACE names network interfaces (eth1, or eth1,eth2), not '$NET_IFACE'"
  export NCCL_SOCKET_IFNAME=$NET_IFACE HOROVOD_GLOO_IFACE=$NET_IFACE
  export OMPI_MCA_btl_tcp_if_include=$NET_IFACE OMPI_MCA_oob_tcp_if_include=$NET_IFACE
fi
case "${CONTROLLER:-}" in
  "") ;;
  gloo|mpi) [ "${LAUNCHER:-mpirun}" = horovodrun ] ||
    die "CONTROLLER=$CONTROLLER is horovodrun's choice (LAUNCHER=horovodrun); mpirun and srun start Horovod with MPI" ;;
  *) die "CONTROLLER must be gloo or mpi, not $CONTROLLER" ;;
esac
# Every process of this job carries it: launch.sh finds its ranks on this machine by it, and
# the ranks' heartbeats name it (the ending mark it watches for below).
export LAUNCH_ID="launch-$$-$RANDOM"

# What every rank on another machine needs from this shell's environment (mpirun -x).
forward=(-x PATH -x LAUNCH_ID)
for v in LD_LIBRARY_PATH TF_ENABLE_AUTO_MIXED_PRECISION NVIDIA_TF32_OVERRIDE TF_XLA_FLAGS \
         TF_CPP_MIN_LOG_LEVEL PYTHONPATH \
         $(compgen -v | grep -E '^(NCCL|HOROVOD|OMPI_MCA)_' || true); do
  if [ -n "${!v+x}" ]; then forward+=(-x "$v"); fi
done

# The slots of HOSTS=a:8,b:8: the processes an mpirun/horovodrun across machines starts.
hosts_slots() {
  local n=0 h hs
  IFS=, read -ra hs <<< "$HOSTS"
  for h in "${hs[@]}"; do
    [[ "$h" =~ ^[^:]+:[1-9][0-9]*$ ]] || die "HOSTS entries are host:slots, not '$h'"
    n=$(( n + ${h##*:} ))
  done
  echo "$n"
}

main=$MAIN
bind=$(cd "$(dirname "$0")" && pwd)/bind.sh
launch=()
case "${LAUNCHER:-mpirun}" in
  mpirun)
    if [ -n "${HOSTS:-}" ]; then  # Horovod's documented multi-host line
      np=$(hosts_slots) || exit 2
      launch=(mpirun --allow-run-as-root -np "$np" -H "$HOSTS" --bind-to none --map-by slot
              "${forward[@]}" -mca pml ob1 -mca btl ^openib)
    elif [ "$GPUS" -gt 1 ]; then  # no binding by mpirun: bind.sh follows each GPU's socket
      launch=(mpirun --allow-run-as-root --bind-to none -np "$GPUS")
    fi ;;
  horovodrun)
    if [ -n "${HOSTS:-}" ]; then
      np=$(hosts_slots) || exit 2
      launch=(horovodrun -np "$np" -H "$HOSTS")
    elif [ "$GPUS" -gt 1 ]; then
      launch=(horovodrun -np "$GPUS" -H "localhost:$GPUS")
    fi
    if [ ${#launch[@]} -gt 0 ]; then
      if [ -n "${CONTROLLER:-}" ]; then launch+=("--$CONTROLLER"); fi
      if [ -n "${NET_IFACE:-}" ]; then launch+=(--network-interface "$NET_IFACE"); fi
    fi ;;
  srun)  # one task per GPU on every node of the allocation; Horovod finds its ranks by PMIx
    [ -n "${SLURM_JOB_ID:-}${DRY_RUN:-}" ] ||
      die "LAUNCHER=srun runs inside a SLURM allocation (sbatch or salloc)"
    # srun does not pass sbatch's --cpus-per-task on (Slurm 22.05 and later): without it each
    # task gets one CPU for its input pipeline, TensorFlow's threads and Horovod's.
    cpus=${SLURM_CPUS_ON_NODE:-}
    [ -z "$cpus" ] || [[ "$cpus" =~ ^[0-9]+$ ]] || die "SLURM_CPUS_ON_NODE is not a number: $cpus"
    # --kill-on-bad-exit: a task that fails (or whose --hang_timeout watch ends it) ends the step,
    # rather than leaving the others in their next allreduce until the job's time limit.
    launch=(srun --mpi="${SRUN_MPI:-pmix}" --ntasks-per-node="$GPUS" --kill-on-bad-exit=1)
    if [ -n "$cpus" ]; then
      launch+=(--cpus-per-task=$(( cpus / GPUS > 0 ? cpus / GPUS : 1 )))
      # Unbound: bind.sh binds each task to its GPU's NUMA node. Only where Slurm binds tasks at
      # all (a task/none cluster warns at every srun that it ignores the option).
      if [ -n "${DRY_RUN:-}" ] || ! scontrol show config 2>/dev/null |
          grep -qE '^TaskPlugin +=.*task/none'; then
        launch+=(--cpu-bind=none)
      fi
    fi
    if [ -n "${CONTAINER:-}" ]; then
      # pyxis (enroot) reads an image as [USER@][REGISTRY#]IMAGE[:TAG], or a squashfs file's
      # path: without '#', "registry.example.com/team/img" names an image on Docker Hub.
      # NVIDIA's stock TensorFlow image holds neither this code nor its Keras (3.3.2 where
      # the code needs 3.15): srun would fail in every task, after the job waited its turn.
      case "${CONTAINER##*/}" in
        tensorflow:*|nvidia+tensorflow+*)
          die "CONTAINER=$CONTAINER is NVIDIA's stock TensorFlow image, which holds neither this code nor Keras 3.15: build this repository's image on it (docker build -t tf-model-scripts .) and give that (docs/running.md, Containers on Slurm)" ;;
      esac
      case "$CONTAINER" in
        /*|./*|../*|*.sqsh|*#*) ;;
        */*)
          registry=${CONTAINER%%/*}
          if [[ "$registry" == *.* || "$registry" == *:* || "$registry" == localhost ]]; then
            die "CONTAINER=$CONTAINER: pyxis reads images as [USER@][REGISTRY#]IMAGE[:TAG], so this is looked up on Docker Hub; write CONTAINER=$registry#${CONTAINER#*/}"
          fi ;;
      esac
      # pyxis splits --container-mounts at commas and each mount at colons: no escaping.
      for v in DATA_DIR RESULTS_DIR; do
        case "${!v:-}" in
          *,*|*:*) die "$v=${!v} holds a comma or a colon, which pyxis's --container-mounts cannot take: use a path without them" ;;
        esac
      done
      root=$(cd "$(dirname "$0")/.." && pwd)
      workdir=${CONTAINER_WORKDIR:-/workspace/tf-model-scripts}
      case "$MAIN" in
        "$root"/*) main="$workdir/${MAIN#"$root"/}"; bind="$workdir/scripts/bind.sh" ;;
        *) die "MAIN_PY must be inside this repository ($root) to be found in the container" ;;
      esac
      launch+=(--container-image="$CONTAINER"
               --container-workdir="$workdir")
      if [ -n "${MOUNTS:-}" ]; then launch+=(--container-mounts="$MOUNTS"); fi
    fi ;;
  *) die "LAUNCHER must be mpirun, horovodrun or srun, not $LAUNCHER" ;;
esac

py=${PYTHON:-python}
if [ ${#launch[@]} -gt 0 ]; then
  cmd=("${launch[@]}" bash "$bind" "$py" "$main" "${flags[@]}" "$@")
else  # one process: nothing to follow (main.py takes GPU 0)
  cmd=("$py" "$main" "${flags[@]}" "$@")
fi
if [ -n "${DRY_RUN:-}" ]; then
  printf '%q ' "${cmd[@]}" | sed 's/ $//'
  echo
  exit 0
fi
[ ${#launch[@]} -gt 0 ] || exec "${cmd[@]}"  # one process
# mpirun takes SIGTERM as an abort: it signals the ranks, kills them about a second later and
# exits 1 whatever they did; horovodrun runs mpirun under a shell in a session of its own, so a
# signal to it or to that shell leaves mpirun and the ranks running unseen. SIGUSR1 mpirun
# forwards to every rank, which main.py takes as a request to stop at a step they agree on,
# with a checkpoint (common/runtime/graceful_stop.py; a rank that is still starting stops at once).
# So the job runs in a session of its own (a terminal's Ctrl-C reaches only this script), and
# a SIGTERM or Ctrl-C here becomes SIGUSR1 to this job's mpirun (which forwards it to every
# rank, on every host) and to its ranks on this machine (horovodrun's Gloo has no mpirun);
# they are found by LAUNCH_ID, which every process of the job inherits. srun forwards a
# signal to every task itself: it gets SIGTERM for SIGTERM and Ctrl-C (its first SIGINT only
# reports), SIGUSR1 for SIGUSR1. Whatever ends the launcher (horovodrun, its shell, mpirun),
# ranks still running are asked to stop the same way and waited for: nothing keeps training
# unseen.
job_pids() {  # this job's processes here: "ranks" (PYTHON MAIN_PY ...) or "mpirun"
  local p words
  for p in /proc/[0-9]*; do
    { grep -qxz "LAUNCH_ID=$LAUNCH_ID" "$p/environ"; } 2>/dev/null || continue
    { mapfile -d '' -t words <"$p/cmdline"; } 2>/dev/null || continue
    case $1 in
      ranks) [ "${words[1]:-}" = "$main" ] || continue ;;
      mpirun) case "$(basename "${words[0]:-}")" in mpirun|orterun|prterun) ;; *) continue ;; esac ;;
    esac
    echo "${p#/proc/}"
  done
}
ask_to_stop() {  # $1: why
  local p
  echo "launch.sh: $1: asking the ranks to stop at a common step with a checkpoint (SIGUSR1)" >&2
  for p in $(job_pids mpirun) $(job_pids ranks); do
    kill -USR1 "$p" 2>/dev/null || true
  done
}
stopping=""
on_signal() {  # $1: the signal's name
  stopping=$1
  if [ "${launch[0]}" = srun ]; then
    [ "$1" = SIGUSR1 ] && kill -USR1 "$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  else
    ask_to_stop "$1"
  fi
}
trap 'on_signal SIGTERM' TERM
trap 'on_signal SIGINT' INT
trap 'on_signal SIGUSR1' USR1  # Slurm's warning before a time limit (sbatch --signal=B:USR1@)

# A rank whose --hang_timeout watch ends the job marks its heartbeat (in --results_dir, which
# every node shares) with this launch's id. A launcher that can reach every node ends the job
# at that rank's exit; one that cannot (a node cut off, or dead before Slurm's SlurmdTimeout or
# TCP's retries notice) waits for it for minutes. END_GRACE seconds after the mark, it is killed.
results=./results  # main.py's default
prev=""
for a in "$@"; do
  case "$prev" in --results_dir) results=$a ;; esac
  case "$a" in --results_dir=*) results=${a#--results_dir=} ;; esac
  prev=$a
done
end_grace=${END_GRACE:-10}
[[ "$end_grace" =~ ^[0-9]+$ ]] || die "END_GRACE must be a whole number of seconds, not $end_grace"
ended_by() {  # the rank whose heartbeat marks this launch as ended, if any
  local f
  f=$(grep -lE "\"launch\": \"$LAUNCH_ID\".*\"ending\": " "$results"/.heartbeat/rank-*.json \
      2>/dev/null | head -n 1)
  [ -n "$f" ] || return 1
  f=${f##*/rank-}
  echo "${f%.json}"
}

launcher_exit() {  # what the launcher's exit status $1 (over 128) says, for the last line
  local sig
  if [ "$1" = 205 ] && [ "${launch[0]}" != srun ]; then  # Open MPI's, not a signal
    echo "mpirun exited 205: it lost the daemon (orted) of a node it started ranks on (the node cut off, down, or the daemon killed) and ended the job; the same command resumes from the last checkpoint"
    return
  fi
  sig=$(kill -l $(( $1 - 128 )) 2>/dev/null) || return 0
  echo "${launch[0]} exited $1: it or a rank was killed (SIG$sig; the lines above say which): the job ended without a stop checkpoint; the steps since the last checkpoint (--save_checkpoint_steps) are lost, and the same command resumes from it"
}

if command -v setsid >/dev/null; then setsid "${cmd[@]}" & else "${cmd[@]}" & fi
pid=$!
ended_rank="" ended_at="" forced=""
while kill -0 "$pid" 2>/dev/null; do
  if [ -z "$ended_rank" ] && ended_rank=$(ended_by); then
    ended_at=$SECONDS
  fi
  if [ -n "$ended_rank" ] && [ $(( SECONDS - ended_at )) -ge "$end_grace" ]; then
    left=$(job_pids ranks)
    also=""
    [ -z "$left" ] || also=" and the ranks on this host"
    echo "launch.sh: rank $ended_rank ended the job (its line above), but ${launch[0]} has not ended $end_grace s later (it waits for a node it cannot reach): killing it$also; the ranks of an unreachable node end by their own watch" >&2
    kill -KILL "$pid" $left 2>/dev/null || true
    forced=1
    break
  fi
  sleep 1 || true  # a terminal's Ctrl-C reaches it too: the trap has taken it
done
rc=0
if [ -n "$forced" ]; then
  wait "$pid" 2>/dev/null || true  # bash's own "Killed" line: this script has said why
  rc=1
else
  wait "$pid" || rc=$?
fi
left=$(job_pids ranks)
if [ -n "$left" ] && [ "${launch[0]}" != srun ]; then
  # the launcher ended under its ranks (its shell or mpirun killed); srun's tasks are Slurm's
  ask_to_stop "${launch[0]} ended (exit $rc) with $(echo "$left" | wc -w) rank(s) still running"
  waited=0
  while [ -n "$(job_pids ranks)" ] && [ "$waited" -lt "${STOP_TIMEOUT:-300}" ]; do
    sleep 1 || true
    waited=$(( waited + 1 ))
  done
  left=$(job_pids ranks)
  if [ -n "$left" ]; then
    echo "launch.sh: ranks $(echo $left) did not stop within STOP_TIMEOUT=${STOP_TIMEOUT:-300} s: killed" >&2
    kill -KILL $left 2>/dev/null || true
  else
    echo "launch.sh: the ranks have stopped" >&2
  fi
fi
if [ -n "$stopping" ]; then
  echo "launch.sh: $stopping: the job stopped (exit $rc)" >&2
elif [ -z "$forced" ] && [ "$rc" -gt 128 ]; then
  why=$(launcher_exit "$rc")
  [ -z "$why" ] || echo "launch.sh: $why" >&2
fi
exit "$rc"
