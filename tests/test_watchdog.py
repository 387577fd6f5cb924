"""The hang watch's decisions (common/runtime/watchdog.py) on heartbeat files written by hand: which
rank it names, when it waits, and that it never fires before the first step. The real thing, a
rank stopped with SIGSTOP under mpirun, horovodrun and srun, is in test_horovod.py and
test_slurm.py."""
import io
import json
import os
import re
import signal
import time
import types

import pytest
from conftest import OWN_HANDLING

from common.runtime import job_time, watchdog
from common.runtime.dllogger import run_jobs

pytestmark = OWN_HANDLING


def _peer(directory, rank, beat, idle=0.0, pid=100):
    with open(os.path.join(directory, f"rank-{rank}.json"), "w") as f:
        json.dump({"rank": rank, "host": "node2", "pid": pid + rank, "beat": beat, "idle": idle,
                   "step": 7}, f)


@pytest.fixture
def wd(tmp_path):
    d = str(tmp_path / "hb")
    os.makedirs(d)
    return watchdog.Watchdog(d, rank=0, size=3, timeout=10)


def _waited(wd, seconds):
    """As if this rank's last beat was ``seconds`` ago."""
    wd.beat(7)
    wd._last_beat = time.monotonic() - seconds


def test_before_the_first_step_nothing_fires_however_long(wd):
    _peer(wd.directory, 1, 1)
    now = time.monotonic()
    wd.check(now)
    assert wd.idle() == 0 and wd.check(now + 1000) is None


def test_a_rank_whose_heartbeat_stopped_is_named(wd):
    for r in (1, 2):
        _peer(wd.directory, r, 1)
    now = time.monotonic()
    wd.check(now)
    _peer(wd.directory, 2, 2)  # rank 2 still answers; rank 1 does not
    _waited(wd, 11)
    line = wd.check(now + 6)
    assert line.startswith("no training step finished on rank 0 for 11 s (--hang_timeout 10)")
    assert "rank 1 (node2, pid 101) stopped answering 6 s ago" in line and "rank 2" not in line


def test_no_line_while_this_rank_still_steps_or_a_peer_is_only_briefly_quiet(wd):
    for r in (1, 2):
        _peer(wd.directory, r, 1)
    now = time.monotonic()
    wd.check(now)
    _waited(wd, 3)
    assert wd.check(now + 30) is None  # this rank stepped 3 s ago: nothing to say
    _waited(wd, 11)
    _peer(wd.directory, 1, 2, idle=11)
    _peer(wd.directory, 2, 2, idle=11)
    assert wd.check(now + 31) is not None  # both answer, both wait: a stuck collective
    _peer(wd.directory, 1, 3, idle=1)  # rank 1 still works (rank 0 waits for it): no hang
    assert wd.check(now + 32) is None


def test_every_rank_answering_but_waiting_is_a_stuck_collective(wd):
    now = time.monotonic()
    for r in (1, 2):
        _peer(wd.directory, r, 5, idle=12)
    wd.check(now)
    for r in (1, 2):
        _peer(wd.directory, r, 6, idle=13)
    _waited(wd, 12)
    assert wd.check(now + 1).endswith(
        "every rank answers but none finishes a step (a collective is stuck); ending the job")


def test_a_rank_woken_from_a_stop_does_not_name_the_rank_that_named_it(wd):
    """slurmstepd sends SIGCONT before it kills a step: the stopped rank wakes with its own
    wait long past the timeout and the rank that named it gone quiet (it has just exited). It
    must not print a second line naming that rank."""
    for r in (1, 2):
        _peer(wd.directory, r, 1)
    now = time.monotonic()
    assert wd.tick(now) is None
    _waited(wd, 40)  # its last step was before the stop
    assert wd.tick(now + 40) is None  # the first round after the freeze: watching afresh
    for t in range(41, 47):  # the others' silence counts from the wake-up (rounds 1 s apart)
        assert wd.tick(now + t) is None, t
    assert "rank 1 (node2" in wd.tick(now + 47)  # ... and is named once it lasts


def test_a_rank_ends_quietly_once_another_has_said_why(wd):
    """The rank that names the culprit marks its heartbeat as ending the job; the others (a
    stopped rank woken by slurmstepd's SIGCONT, which then waits KillWait for its SIGKILL) end
    without a second line."""
    _peer(wd.directory, 1, 1)
    _peer(wd.directory, 2, 1)
    now = time.monotonic()
    with open(os.path.join(wd.directory, "rank-2.json"), "w") as f:
        json.dump({"rank": 2, "host": "node2", "pid": 102, "beat": 2, "idle": 12,
                   "ending": "rank 1 stopped answering"}, f)
    assert wd.check(now) == ""


def test_ranks_it_cannot_see_are_named_after_twice_the_timeout(wd):
    _peer(wd.directory, 1, 1)
    now = time.monotonic()
    wd.check(now)
    _peer(wd.directory, 1, 2, idle=15)
    _waited(wd, 15)
    assert wd.check(now + 1) is None
    _peer(wd.directory, 1, 3, idle=21)
    _waited(wd, 21)
    assert "rank(s) 2 cannot be seen from here" in wd.check(now + 2)


def test_only_the_lowest_answering_rank_speaks_first(tmp_path):
    d = str(tmp_path)
    w2 = watchdog.Watchdog(d, rank=2, size=3, timeout=10)  # rank 0 stopped; 1 and 2 answer
    _peer(d, 0, 1)
    _peer(d, 1, 1)
    now = time.monotonic()
    w2.check(now)
    _peer(d, 1, 2)
    _waited(w2, 11)
    assert w2.check(now + 6) is None  # rank 1 says it; rank 2 follows only if still alive
    _peer(d, 1, 3)
    assert w2.check(now + 7) is None
    _peer(d, 1, 4)
    assert "rank 0 (node2, pid 100) stopped answering" in w2.check(now + 8)


def test_the_thread_writes_its_heartbeat_fires_once_and_cleans_up(tmp_path):
    ended, lines = [], []

    class Stream:
        def write(self, text):
            lines.append(text)

        def flush(self):
            pass
    d = str(tmp_path / "hb")
    wd = watchdog.Watchdog(d, rank=0, size=2, timeout=2, exit=ended.append, stream=Stream())
    assert wd.interval == 1.0
    with wd:
        _peer(d, 1, 1)
        wd.beat(1)
        assert json.load(open(os.path.join(d, "rank-0.json")))["pid"] == os.getpid()
        deadline = time.time() + 20
        while not ended and time.time() < deadline:
            time.sleep(0.2)
        # It told the others that it ends the job, so that they end without a line of their own.
        assert json.load(open(os.path.join(d, "rank-0.json")))["ending"].startswith(
            "no training step finished")
    assert ended == [watchdog.EXIT_STATUS]
    assert "".join(lines).startswith("main.py: error (rank 0): no training step finished on "
                                     "rank 0 for ")
    assert "rank 1 (node2, pid 101) stopped answering" in "".join(lines)
    assert not os.path.exists(os.path.join(d, "rank-0.json"))


def _ranks(size, rank=0):
    """A stand-in for Distributed's rank facts and rank 0's broadcast (the real one is run by
    every multi-rank test)."""
    return types.SimpleNamespace(size=size, rank=rank, is_chief=rank == 0,
                                 broadcast_object=lambda obj: obj)


def test_off_for_one_process_or_a_zero_timeout(tmp_path):
    assert watchdog.for_run(str(tmp_path), _ranks(1), 600) is watchdog.OFF
    assert watchdog.for_run(str(tmp_path), _ranks(2), 0) is watchdog.OFF
    watch = watchdog.for_run(str(tmp_path), _ranks(2), 600)
    assert isinstance(watch, watchdog.Watchdog) and len(watch.run) == 16


def test_a_record_left_by_another_run_is_not_read(tmp_path):
    """A killed job's heartbeats outlive it, its "ending" mark included: the next job's ranks
    must not take it as theirs (one that read it before rank 0 rewrote the file ended without
    a line)."""
    d = str(tmp_path)
    with open(os.path.join(d, "rank-1.json"), "w") as f:
        json.dump({"rank": 1, "host": "node2", "pid": 7, "beat": 9, "idle": 30, "run": "old",
                   "ending": "rank 0 stopped answering"}, f)
    wd = watchdog.Watchdog(d, rank=0, size=2, timeout=10, run="new")
    assert wd.check(time.monotonic()) is None and wd._read(1) is None
    _waited(wd, 21)  # and it counts as not seen yet, not as a rank that answers
    assert "rank(s) 1 cannot be seen from here" in wd.check(time.monotonic())


def test_a_stop_that_no_step_follows_ends_the_rank_after_the_grace(wd):
    """A rank waiting in a collective for a rank that is gone cannot reach the step where a stop
    signal is taken (Slurm's SIGTERM after a task died elsewhere, then its SIGKILL after
    KillWait): it ends itself once no step has come for the grace."""
    for r in (1, 2):
        _peer(wd.directory, r, 1)
    now = time.monotonic()
    wd.beat(3)
    wd.stop_requested(signal.SIGTERM, now)
    assert wd.stop_grace() == watchdog.STOP_GRACE_S
    assert wd.check(now + 4) is None
    with wd.working():  # a checkpoint or an evaluation at a sync point: no step is expected
        assert wd.check(now + 60) is None
    wd._last_beat = now  # as if the work ended then
    line = wd.check(now + 6)
    assert line.startswith("SIGTERM came 6 s ago and no training step has finished on rank 0 "
                           "since: it waits in a collective for a rank that is gone")


def test_the_grace_follows_the_longest_step(wd):
    wd.beat(1)
    wd._last_beat -= 3.0  # a 3-second step
    wd.beat(2)
    assert wd.stop_grace() == pytest.approx(9.0, abs=0.1)
    wd2 = watchdog.Watchdog(wd.directory, rank=0, size=2, timeout=8)
    wd2.beat(1)
    wd2._last_beat -= 4.0
    wd2.beat(2)
    assert wd2.stop_grace() == 8  # never more than the hang timeout


def test_the_thread_takes_a_stop_signal_that_the_main_thread_never_handles(tmp_path):
    """The signal reaches the watch through Python's wake-up descriptor, whether or not the main
    thread ever gets to run its handler: no step follows, so the rank ends with its line."""
    ended, lines = [], []
    d = str(tmp_path / "hb")
    wd = watchdog.Watchdog(d, rank=0, size=2, timeout=30, exit=ended.append,
                           stream=types.SimpleNamespace(write=lines.append, flush=lambda: None))
    previous = signal.signal(signal.SIGTERM, lambda *_: None)  # a handler, as GracefulStop's
    try:
        with wd:
            _peer(d, 1, 1)
            wd.beat(1)
            os.kill(os.getpid(), signal.SIGTERM)
            deadline = time.time() + 20
            while not ended and time.time() < deadline:
                time.sleep(0.1)
            assert json.load(open(os.path.join(d, "rank-0.json")))["stopping"] == "SIGTERM"
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert ended == [watchdog.EXIT_STATUS] and wd.stop_signal == "SIGTERM"
    assert re.match(r"main\.py: error \(rank 0\): SIGTERM came [5-9] s ago and no training step",
                    "".join(lines)), lines
    assert signal.set_wakeup_fd(-1) == -1  # the process's wake-up descriptor as it was


# --- how many jobs a run takes (common/runtime/job_time.py) --------------------------------------
def test_the_job_estimate_says_how_many_requeues_and_where_a_cap_stops_the_run():
    env = {"JOB_END_TIME": "14400", "JOB_TIME_LIMIT": "14400"}  # a 4-hour job, just started
    assert job_time.estimate(1000, 1.0, 0, env, now=0).endswith("the run ends in this job")
    line = job_time.estimate(40000, 1.0, 0, env, now=0)  # 11 h 07 min of steps
    assert "the remaining 40,000 steps need about 11 h 07 min" in line
    assert "about 2 more job(s) after this one" in line and "MAX_REQUEUES" not in line
    capped = job_time.estimate(40000, 1.0, 0, {**env, "MAX_REQUEUES": "1"}, now=0)
    assert "MAX_REQUEUES=1 leaves 1: the run will stop near step 28,200" in capped
    assert job_time.estimate(40000, 1.0, 0, {}, now=0) is None  # not in a Slurm job


# --- one run's record over several jobs (common/dllogger.run_jobs) --------------------------
def _param(mode="train"):
    return {"type": "LOG", "step": "PARAMETER", "data": {"mode": mode}}


def _step(step, elapsed):
    return {"type": "LOG", "step": [0, step], "elapsedtime": str(elapsed), "data": {}}


def _summary(**data):
    return {"type": "LOG", "step": [], "data": data}


def test_the_jobs_of_a_run_go_back_to_the_last_completed_run():
    records = [_param(), _summary(final_step=10, train_seconds=5.0),  # an earlier, complete run
               _param(), _step(20, 1.0), _step(40, 31.0),  # killed: 30 s between its steps
               _param(), _summary(stopped_by_signal=True, train_seconds=100.0),  # time limit
               _param()]  # this job
    jobs = run_jobs(records)
    assert [j["train_seconds"] for j in jobs] == [30.0, 100.0, 0.0]
    assert run_jobs([_param("evaluate"), _summary(), _param()]) == [
        {"summary": None, "train_seconds": 0.0}]


def test_the_estimate_takes_the_median_window_not_one_stalled_by_the_network():
    """A window in which the network stalled for minutes made a 2.5-hour run look like 768 h
    ("32 more jobs"): the estimate waits for three windows and takes their median rate."""
    env = {"JOB_END_TIME": str(time.time() + 14400), "JOB_TIME_LIMIT": "14400"}
    window = types.SimpleNamespace
    windows = [window(seconds=1.0, steps=10), window(seconds=3000.0, steps=10)]
    os.environ.update(env)
    try:
        assert job_time.estimate_from(windows, 9000, 20) is None  # two windows: not yet
        line = job_time.estimate_from([*windows, window(seconds=1.2, steps=10)], 9000, 30)
    finally:
        for k in env:
            del os.environ[k]
    assert line.endswith("the remaining 9,000 steps need about 18 min at the rate so far: the run "
                         "ends in this job")  # 0.12 s a step, the median


def test_a_resumed_run_moves_an_earlier_jobs_records_of_the_steps_it_redoes(tmp_path):
    """A job killed at step 18 after its checkpoint at 10 logged 11-18; the job that resumes
    from 10 trains them again: their records move to log.json.redone, so that the log holds
    each step once. A completed run before them keeps its steps."""
    from common.runtime.dllogger import Logger, read_records, step_logs
    path = str(tmp_path / "log.json")
    earlier = Logger(json_path=path, stream=io.StringIO())
    earlier.parameters({"mode": "train"})
    for step in (5, 10, 15):
        earlier.log((1, step), {"total_loss": 1.0})
    earlier.summary({"final_step": 15})  # a completed run
    earlier.parameters({"mode": "train"})
    for step in range(1, 19):
        earlier.log((1, step), {"total_loss": 2.0})
    earlier.close()  # killed
    out = io.StringIO()
    resumed = Logger(json_path=path, stream=out)
    resumed.parameters({"mode": "train"})
    resumed.redo_after(10)
    resumed.log((1, 11), {"total_loss": 3.0})
    resumed.close()
    steps = [r["step"][1] for r in step_logs(read_records(path))]
    assert steps == [5, 10, 15, *range(1, 11), 11]
    assert [r["step"][1] for r in read_records(path + ".redone")] == list(range(11, 19))
    assert "8 record(s) of steps 11-18, logged after the checkpoint this run resumes from " \
           "(step 10), moved to log.json.redone" in out.getvalue()
