"""How many Slurm jobs a run will take, said once its rate is measured: a 90-epoch recipe under
a 4-hour limit is several jobs, each requeued at its limit (``scripts/slurm_job.sh``), and a
user who capped the requeues (``MAX_REQUEUES``) learns in the first minutes, not at the end,
that the run will stop short.

``scripts/slurm_job.sh`` exports ``JOB_END_TIME`` (Unix seconds) and ``JOB_TIME_LIMIT`` (seconds)
from ``squeue``; Slurm sets ``SLURM_RESTART_COUNT`` on a requeued job. Outside such a job there
is nothing to say.
"""
from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Mapping

# What a requeued job spends before its first step and at its end (start-up, restore, the
# stop before the limit): a job's limit is not all training.
JOB_OVERHEAD_S = 600


def _duration(seconds: float) -> str:
    minutes = max(0, round(seconds / 60))
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min"


def estimate(remaining_steps: int, seconds_per_step: float, step: int,
             environ: Mapping[str, str] = os.environ, now: float | None = None) -> str | None:
    """One line: whether the run ends in this job, or how many more it needs; None outside a
    job whose limit is known."""
    try:
        end, limit = float(environ["JOB_END_TIME"]), float(environ["JOB_TIME_LIMIT"])
    except (KeyError, ValueError):
        return None
    now = time.time() if now is None else now
    left, need = end - now, remaining_steps * seconds_per_step
    head = (f"this job's time limit comes in {_duration(left)}; the remaining {remaining_steps:,} "
            f"steps need about {_duration(need)} at the rate so far")
    if need < left - JOB_OVERHEAD_S / 2:
        return f"{head}: the run ends in this job"
    per_job = max(limit - JOB_OVERHEAD_S, limit / 2)
    more = math.ceil(max(0.0, need - left) / per_job) or 1
    line = f"{head}: about {more} more job(s) after this one (it requeues itself at the limit)"
    cap = environ.get("MAX_REQUEUES", "")
    if cap.isdigit():
        allowed = int(cap) - int(environ.get("SLURM_RESTART_COUNT", "0") or 0)
        if more > allowed:
            reach = step + int((max(0.0, left) + max(0, allowed) * per_job) / seconds_per_step)
            line += (f"; MAX_REQUEUES={cap} leaves {max(0, allowed)}: the run will stop near step "
                     f"{reach:,} (raise MAX_REQUEUES or sbatch --time, or resubmit then)")
    return line


# Timed windows (display intervals) the estimate waits for: their median rate, not their mean,
# so that one window stalled by the network or the file system (minutes for a few steps) does
# not make a 2.5-hour run look like 768 hours.
ESTIMATE_WINDOWS = 3


def estimate_from(timed_windows, remaining_steps: int, step: int) -> str | None:
    """``estimate`` at the median rate of a run's timed windows (``loop.Clock.timed``), once
    there are ``ESTIMATE_WINDOWS`` of them; None before."""
    rates = sorted(w.seconds / w.steps for w in timed_windows if w.steps)
    if len(rates) < ESTIMATE_WINDOWS:
        return None
    return estimate(remaining_steps, statistics.median(rates), step)


def jobs_so_far(records, seconds: float) -> dict:
    """The summary's part about jobs: this job's training time (``seconds``) and, for a run
    resumed over several jobs (a time limit, a preemption), how many it took and their
    training time in all, from its log's ``records`` (``dllogger.run_jobs``)."""
    from common.runtime import dllogger
    out = {"train_seconds": round(seconds, 1)}
    try:
        earlier = dllogger.run_jobs(records)[:-1]  # the last is this job's
    except (OSError, ValueError):
        earlier = []
    if earlier:
        out.update(jobs=len(earlier) + 1, total_train_seconds=round(
            seconds + sum(j["train_seconds"] for j in earlier), 1))
    return out
