#!/usr/bin/env bash
# The batch shell of every model's slurm.sbatch: runs the training command (train.sh through
# srun) so that a run longer than the job's time limit finishes as one run over several jobs.
#   bash scripts/slurm_job.sh COMMAND...     (the sbatch files call it; RESULTS_DIR must be set)
#
# * Time limit: the sbatch files ask Slurm for SIGUSR1 to this shell some minutes before the
#   limit (#SBATCH --signal=B:USR1@300). It is passed on to the ranks (srun forwards it), which
#   stop at a step they agree on with a checkpoint (common/runtime/graceful_stop.py); then, unless the run
#   completed meanwhile, the job requeues itself (scontrol requeue: same job id, so the same
#   RESULTS_DIR) and its next start resumes from that checkpoint, appending to the same log.
# * Preemption: Slurm sends SIGTERM to every task, and the ranks stop with a checkpoint within
#   the partition's GraceTime. A job that ends within its GraceTime is not requeued by Slurm,
#   even with PreemptMode=REQUEUE (it completed): so this shell requeues it, seeing the
#   preemption in scontrol's PreemptTime.
# * scancel (SIGTERM, or --signal=TERM): the ranks stop with a checkpoint; no requeue.
# * A rank that dies or stops answering ends the job with an error (srun --kill-on-bad-exit,
#   main.py's --hang_timeout): no requeue, so that a fault does not loop; resubmitting resumes.
# * A node that Slurm finds down (NODE_FAIL) requeues the job (--requeue). Slurm 22.05 leaves
#   the PMIx socket of a killed step (stepd.slurm.pmix.JOB.STEP) in that node's spool, and a
#   requeued job numbers its steps from 0 again: its training step would fail to start on that
#   node ("Cannot bind() UNIX socket ... Address already in use"). So a requeued start runs
#   one empty step (no PMIx) per earlier start first, and trains in a step no start used.
# Environment:
#   RESULTS_DIR      the run's directory (its log.json says whether the run is complete)
#   MAX_REQUEUES     optional: requeue at most this many times (Slurm's SLURM_RESTART_COUNT)
#   DRY_RUN=1        print the command line (the launchers' DRY_RUN) instead of running it
# To the ranks it exports JOB_END_TIME and JOB_TIME_LIMIT (seconds), with which main.py says at
# its first measured rate how many jobs the run will take (common/runtime/job_time.py).
set -uo pipefail
me="slurm_job.sh"
[ $# -gt 0 ] || { echo "$me: error: usage: slurm_job.sh COMMAND..." >&2; exit 2; }
if [ -n "${DRY_RUN:-}" ]; then exec "$@"; fi
: "${RESULTS_DIR:?$me: RESULTS_DIR must be set}"
if [ -n "${MAX_REQUEUES:-}" ] && ! [[ "$MAX_REQUEUES" =~ ^[0-9]+$ ]]; then
  echo "$me: error: MAX_REQUEUES must be a whole number, not $MAX_REQUEUES" >&2
  exit 2
fi
job=${SLURM_JOB_ID:?$me: runs as a Slurm batch job}
restarts=${SLURM_RESTART_COUNT:-0}
log=$RESULTS_DIR/log.json

# The job's start and end, for the ranks' estimate of how many jobs the run needs.
if times=$(squeue -h -j "$job" -o "%S %e" 2>/dev/null) && [ -n "$times" ]; then
  start=$(date -d "${times% *}" +%s 2>/dev/null || true)
  end=$(date -d "${times#* }" +%s 2>/dev/null || true)
  if [[ "$start" =~ ^[0-9]+$ && "$end" =~ ^[0-9]+$ ]]; then  # not for --time=UNLIMITED
    export JOB_END_TIME=$end JOB_TIME_LIMIT=$(( end - start ))
  fi
fi
export MAX_REQUEUES=${MAX_REQUEUES:-} SLURM_RESTART_COUNT=$restarts
echo "$me: job $job, start $(( restarts + 1 ))${MAX_REQUEUES:+ of at most $(( MAX_REQUEUES + 1 ))}, results in $RESULTS_DIR" >&2

if [ "$restarts" -gt 0 ]; then
  for (( i = 0; i < restarts; i++ )); do
    srun --ntasks-per-node=1 --mpi=none true >/dev/null 2>&1 || true
  done
fi

signalled=""
forward() {  # $1: the signal; to the job's command (srun forwards it to every task)
  signalled=$1
  echo "$me: SIG$1: asking the ranks to stop at a common step with a checkpoint" >&2
  kill -"$1" "$pid" 2>/dev/null || true
}
trap 'forward USR1' USR1
trap 'forward TERM' TERM
"$@" &
pid=$!
rc=0
wait "$pid" || rc=$?
while kill -0 "$pid" 2>/dev/null; do  # woken by a trap: the ranks are still stopping
  rc=0
  wait "$pid" || rc=$?
done

# Whether the run is complete: its log's last summary is not that of a stopped run.
complete() {
  local last
  [ -f "$log" ] || return 1
  last=$(grep -F '"step": []' "$log" | tail -n 1)
  [ -n "$last" ] && [[ "$last" != *'"stopped_by_signal": true'* ]]
}
preempted() { scontrol show job "$job" 2>/dev/null | grep -qE '(^|[[:space:]])PreemptTime=[0-9]'; }
why=""
if [ "$signalled" = USR1 ]; then
  why="the time limit is near"
elif preempted; then
  why="the job was preempted"
else
  exit "$rc"
fi
if [ "$rc" -ne 0 ]; then
  echo "$me: the ranks failed while stopping (exit $rc): not requeued" >&2
  exit "$rc"
fi
if complete; then
  echo "$me: the run is complete: not requeued" >&2
  exit 0
fi
if [ -n "${MAX_REQUEUES:-}" ] && [ "$restarts" -ge "$MAX_REQUEUES" ]; then
  echo "$me: the run stopped before its end with a checkpoint, but MAX_REQUEUES=$MAX_REQUEUES requeues are spent: resubmit (same RESULTS_DIR) to resume" >&2
  exit 0
fi
echo "$me: $why: the run stopped before its end with a checkpoint: requeueing job $job to resume it" >&2
if ! scontrol requeue "$job"; then
  echo "$me: error: scontrol requeue $job failed (the job needs sbatch --requeue, and the cluster JobRequeue): resubmit with RESULTS_DIR=$RESULTS_DIR to resume" >&2
  exit 1
fi
exit 0
