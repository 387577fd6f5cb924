"""Real 2-process runs on localhost: horovodrun and mpirun, exact averaged updates, stop signal."""
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import ROOT, TINY, run_cli
from linear_task import expected_params

from common.runtime import quiet_start
from common.runtime.dllogger import read_records

WORKER = os.path.join(ROOT, "tests", "hvd_worker.py")
pytestmark = pytest.mark.skipif(
    shutil.which("horovodrun") is None or shutil.which("mpirun") is None,
    reason="Horovod or MPI is not installed (scripts/install_deps.sh)")

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2"]


def _check_ranks(out, steps, world=2, atol=1e-6):
    r0, r1 = (np.load(os.path.join(out, f"rank{r}.npz")) for r in range(world))
    assert int(r0["world"]) == world and int(r0["step"]) == int(r1["step"]) == steps
    for name in ("kernel", "bias"):
        np.testing.assert_array_equal(r0[name], r1[name])  # identical on both ranks
    w, b = expected_params(world, steps)
    np.testing.assert_allclose(r0["kernel"], w, atol=atol)
    np.testing.assert_allclose(r0["bias"], b, atol=atol)


@pytest.mark.parametrize("launcher", [
    # horovodrun starts the same mpirun under a shell, and the suite starts ranks by horovodrun
    # in the launcher's signal case (pip): `make test-slow` (the suite's time budget); the
    # allreduce itself (mpirun's case) in both suites.
    pytest.param("horovodrun", marks=pytest.mark.slow),
    pytest.param("mpirun", marks=pytest.mark.both_stacks)])
def test_two_ranks_agree_on_the_averaged_update(tmp_path, launcher):
    out = str(tmp_path / "out")
    cmd = (["horovodrun", "-np", "2", "-H", "localhost:2"] if launcher == "horovodrun"
           else MPIRUN)
    proc = run_cli(cmd + [sys.executable, WORKER, out, "--num_iter", "3"])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    _check_ranks(out, steps=3)
    assert "global batch 8" in proc.stdout  # 4 per process x 2


@pytest.mark.both_stacks
def test_fp16_gradient_compression_is_close(tmp_path):
    out = str(tmp_path / "out")
    proc = run_cli(MPIRUN + [sys.executable, WORKER, out, "--num_iter", "2", "--fp16_allreduce"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    _check_ranks(out, steps=2, atol=1e-2)


# Which step the ranks stop at is this repository's code over Horovod's allreduce, which
# test_two_ranks_agree_on_the_averaged_update runs on both stacks.
RANKS_ONLY = pytest.mark.one_stack(
    "pip", "the ranks' agreement on a stop is this repository's code over Horovod's allreduce, "
    "which runs on both stacks (test_two_ranks_agree_on_the_averaged_update)")


@pytest.mark.parametrize("rank, sig, save_every", [
    pytest.param(1, signal.SIGTERM, "0", marks=RANKS_ONLY),
    # Rank 1 by SIGTERM is the suite's case; Ctrl-C on rank 0 and a save on every step:
    # `make test-slow` (the suite's time budget).
    pytest.param(0, signal.SIGINT, "1", marks=pytest.mark.slow),
    pytest.param(1, signal.SIGTERM, "1", marks=pytest.mark.slow)])
def test_a_signal_on_one_rank_stops_both_at_the_same_step_then_resumes(tmp_path, rank, sig,
                                                                        save_every):
    """Also on a step that saves anyway (--save_checkpoint_steps 1): one save, every rank
    exits 0."""
    out = str(tmp_path / "out")
    args = [sys.executable, WORKER, out, "--num_iter", "100000", "--save_checkpoint_steps",
            save_every]
    proc = subprocess.Popen(MPIRUN + args, stdout=open(tmp_path / "log", "w"),
                            stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    while time.time() < deadline and "step 20/" not in (tmp_path / "log").read_text():
        time.sleep(0.5)
    os.kill(int((tmp_path / "out" / f"pid{rank}").read_text()), sig)  # one rank only
    assert proc.wait(timeout=120) == 0, (tmp_path / "log").read_text()[-3000:]
    assert "Traceback" not in (tmp_path / "log").read_text()
    r0, r1 = (np.load(os.path.join(out, f"rank{r}.npz")) for r in range(2))
    stopped = int(r0["step"])
    assert 20 <= stopped < 100000 and int(r1["step"]) == stopped
    np.testing.assert_array_equal(r0["kernel"], r1["kernel"])
    assert f"stopped at step {stopped}" in (tmp_path / "log").read_text()
    # The next run resumes from rank 0's checkpoint and both ranks continue from it.
    proc = run_cli(MPIRUN + [sys.executable, WORKER, out, "--num_iter", str(stopped + 2)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"restored {out}/checkpoints/ckpt-{stopped}" in proc.stdout
    _check_ranks(out, steps=stopped + 2, atol=1e-4)


# `make test-slow` (the suite's time budget): two ranks under mpirun train in this file's other
# cases and the sbatch job.
@pytest.mark.slow
def test_resnet_training_benchmark_reports_global_throughput_under_mpirun(tmp_path):
    main = os.path.join(ROOT, "resnet50v1.5", "main.py")
    proc = run_cli(MPIRUN + [sys.executable, main, "--mode", "training_benchmark", "--arch",
                             "resnet_tiny", "--image_size", "32", "--batch_size", "4",
                             "--iter_unit", "batch", "--num_iter", "4", "--warmup_steps", "1",
                             "--results_dir", str(tmp_path)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    if not quiet_start.nvidia_driver_present():  # no rank repeats TensorFlow's start-up lines
        assert proc.stderr == ""
    summary = [r for r in read_records(str(tmp_path / "log.json")) if r.get("step") == []]
    assert len(summary) == 1  # rank 0 alone writes the log
    data = summary[0]["data"]
    assert data["world_size"] == 2 and data["global_batch_size"] == 8
    assert data["train_throughput"] > 0 and data["timed_steps"] == 3


@RANKS_ONLY
def test_index_files_that_cannot_be_written_stop_every_rank_with_one_line(tmp_path,
                                                                         digits_records):
    blocker = tmp_path / "file"
    blocker.write_text("")  # index files cannot go below a regular file
    proc = run_cli(MPIRUN + [sys.executable, os.path.join(ROOT, "resnet50v1.5", "main.py"), *TINY,
                             "--data_dir", digits_records, "--data_idx_dir",
                             str(blocker / "idx"), "--dali", "--mode", "train",
                             "--results_dir", str(tmp_path / "r")], timeout=120)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    errors = sorted(ln for ln in proc.stderr.splitlines() if "main.py: error" in ln)
    assert len(errors) == 2  # both ranks stop, neither waits for the other
    assert errors[0].startswith("main.py: error (rank 0): --dali needs index files in ")
    assert errors[1].endswith("building the DALI index files failed on rank 0 (see its message)")


@pytest.fixture(autouse=True)
def _nothing_outlives_its_test(tmp_path):
    """A failed assertion must not leave a job training in the background of the rest of the
    suite (a 100,000-step job took the cores for the next hour): whatever still runs with this
    test's directory on its command line is killed."""
    yield
    import psutil
    for p in psutil.process_iter(["cmdline"]):
        if any(str(tmp_path) in a for a in p.info["cmdline"] or []):
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()


def _launch(tmp_path, launcher, *args):
    out, log = tmp_path / "r", tmp_path / "log"
    proc = subprocess.Popen(
        ["bash", os.path.join(ROOT, "scripts", "launch.sh"),
         os.path.join(ROOT, "resnet50v1.5", "main.py"), "fp32", "2", "noxla", *TINY,
         "--results_dir", str(out), *args],
        stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "PYTHON": sys.executable, "LAUNCHER": launcher})
    return proc, out, log


def _job_process(launcher_pid, first_words):
    """A process under the launcher whose command line starts with ``first_words``."""
    import psutil
    for p in psutil.Process(launcher_pid).children(recursive=True):
        try:
            if p.cmdline()[:len(first_words)] == first_words:
                return p
        except psutil.NoSuchProcess:
            continue
    return None


# The launchers' signal handling is the shell's and Open MPI's, the same under both stacks.
LAUNCHER_ONLY = pytest.mark.one_stack(
    "pip", "the launcher's signal handling (bash, Open MPI, the watchdog's Python) does not "
    "change with the Python stack")


@pytest.mark.parametrize("launcher, target, sig", [
    pytest.param("mpirun", "launch.sh", signal.SIGTERM, marks=LAUNCHER_ONLY),
    # Ctrl-C in a terminal, which launch.sh handles by SIGTERM's handler (on_signal):
    # `make test-slow` (the suite's time budget)
    pytest.param("mpirun", "launch.sh", signal.SIGINT, marks=pytest.mark.slow),
    # its /bin/sh -c mpirun ...: the same mpirun under a shell, whose signal the launcher's own
    # trap passes on as launch.sh's does: `make test-slow` (the suite's time budget)
    pytest.param("horovodrun", "its shell", signal.SIGTERM, marks=pytest.mark.slow),
])
def test_a_signal_to_the_launcher_stops_the_ranks_gracefully(tmp_path, launcher, target, sig):
    """mpirun takes SIGTERM as an abort (exit 1, ranks killed a second later), and horovodrun
    runs mpirun under a shell in a session of its own, so that a signal to either left the
    ranks training unseen. scripts/launch.sh turns a SIGTERM or Ctrl-C into SIGUSR1 to the
    job's mpirun and ranks, and asks ranks its launcher left behind to stop the same way: one
    step, one checkpoint, exit 0, and nothing left running."""
    if launcher == "horovodrun" and shutil.which("horovodrun") is None:
        pytest.skip("horovodrun is not installed")
    proc, out, log = _launch(tmp_path, launcher, "--mode", "train", "--iter_unit", "batch",
                             "--num_iter", "100000", "--save_checkpoint_steps", "5")
    deadline = time.time() + 180
    while time.time() < deadline and "step 8/" not in log.read_text():
        time.sleep(0.5)
    if target == "launch.sh" and sig == signal.SIGINT:  # a terminal's Ctrl-C: to the group
        os.killpg(proc.pid, sig)
    elif target == "launch.sh":
        proc.send_signal(sig)
    else:
        shell = _job_process(proc.pid, ["/bin/sh", "-c"])
        assert shell is not None, log.read_text()[-2000:]
        shell.send_signal(sig)
    code = proc.wait(timeout=180)
    text = log.read_text()
    assert "Traceback" not in text and text.count("SIGUSR1: stopped at step ") == 1, text[-3000:]
    stopped = int(text.split("SIGUSR1: stopped at step ")[1].split(",")[0])
    assert os.path.exists(out / "checkpoints" / f"ckpt-{stopped}.index")
    if target == "launch.sh":
        assert code == 0, text[-3000:]
        assert f"launch.sh: {signal.Signals(sig).name}: the job stopped (exit 0)" in text
    else:  # the launcher died under the ranks: they were asked to stop, then waited for
        assert "rank(s) still running" in text and "launch.sh: the ranks have stopped" in text
    assert not _ranks_of(out), "ranks left running"


def _ranks_of(results_dir):
    import psutil
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "--results_dir" in cmd and str(results_dir) in cmd:
            found.append(p)
    return found


def _catches_sigusr1(process) -> bool:
    """Whether a rank's Python has a handler for SIGUSR1 (/proc's SigCgt mask)."""
    import psutil
    try:
        with open(f"/proc/{process.pid}/status") as f:
            caught = next(ln for ln in f if ln.startswith("SigCgt:")).split()[1]
        return "python" in os.path.basename(process.cmdline()[0]) and bool(
            int(caught, 16) >> (signal.SIGUSR1 - 1) & 1)
    except (OSError, StopIteration, psutil.Error):
        return False


@LAUNCHER_ONLY
def test_a_sigterm_while_the_ranks_start_stops_them_cleanly(tmp_path):
    """Before main.py's first lines the ranks are still importing TensorFlow: the forwarded
    SIGUSR1 used to kill them ("signal 10", exit 138). They stop with one line, exit 0."""
    proc, out, log = _launch(tmp_path, "mpirun", "--mode", "train", "--iter_unit", "batch",
                             "--num_iter", "5")
    deadline = time.time() + 60
    # Both ranks' Pythons have taken SIGUSR1 (main.py's first step), and TensorFlow is still
    # importing. Before that a Python only starting ends by the signal's default action: a
    # window of the interpreter's own start-up that a fixed sleep missed on a loaded machine.
    while time.time() < deadline and sum(map(_catches_sigusr1, _ranks_of(out))) < 2:
        time.sleep(0.05)
    assert "processes: 2" not in log.read_text(), "the ranks started before the signal"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=180) == 0, log.read_text()[-3000:]
    text = log.read_text()
    assert "exited on signal" not in text and "Traceback" not in text, text[-3000:]
    assert text.count("main.py: SIGUSR1") == 2, text[-3000:]


def _rank_pid(results_dir, rank):
    """A rank's pid, from its heartbeat (common/runtime/watchdog.py)."""
    import json
    return json.load(open(results_dir / ".heartbeat" / f"rank-{rank}.json"))["pid"]


@pytest.mark.parametrize("launcher, sig", [
    # The watch that names a rank that stopped answering is rank 0's Python under mpirun as under
    # srun, whose case (tests/test_slurm.py, STOP) the suite runs: `make test-slow`.
    pytest.param("mpirun", signal.SIGSTOP, marks=pytest.mark.slow),
    # horovodrun runs the same mpirun under a shell: `make test-slow` (the suite's time budget)
    pytest.param("horovodrun", signal.SIGSTOP, marks=pytest.mark.slow),
    pytest.param("mpirun", signal.SIGKILL, marks=LAUNCHER_ONLY)])
def test_a_rank_that_stops_answering_or_dies_ends_the_job_within_the_bound(tmp_path, launcher,
                                                                          sig):
    """A rank stopped without dying left the other in its allreduce for good (100 s watched: no
    line); a killed one ended the job through the launcher. Both now end the job, with a line
    that names rank 1, within --hang_timeout and a few heartbeats; the last checkpoint is whole
    (a new job resumes from it: test_slurm.py's lost-rank test)."""
    timeout = 10
    proc, out, log = _launch(tmp_path, launcher, "--mode", "train", "--iter_unit", "batch",
                             "--num_iter", "100000", "--save_checkpoint_steps", "5",
                             "--display_every", "1", "--hang_timeout", str(timeout))
    deadline = time.time() + 180
    while time.time() < deadline and "step 12/" not in log.read_text():
        time.sleep(0.5)
    victim = _rank_pid(out, 1)
    sent = time.monotonic()
    os.kill(victim, sig)
    code = proc.wait(timeout=120)
    took = time.monotonic() - sent
    text = log.read_text()
    assert code != 0 and "Traceback" not in text, text[-3000:]
    if sig == signal.SIGSTOP:
        bound = timeout + 3 * 1.0 + 5  # the timeout, the heartbeats, the launcher's kill
        assert took < bound, f"{took:.0f} s: {text[-2000:]}"
        lines = [ln for ln in text.splitlines() if "stopped answering" in ln]
        assert len(lines) == 1 and "main.py: error (rank 0): no training step finished" in \
            lines[0] and "rank 1 (" in lines[0] and f"pid {victim})" in lines[0], text[-3000:]
    else:
        assert took < 15 and "process rank 1" in text and "signal 9" in text, text[-3000:]
    assert not _ranks_of(out), "ranks left running"
    ckpts = sorted(int(c[5:-6]) for c in os.listdir(out / "checkpoints")
                   if c.startswith("ckpt-") and c.endswith(".index"))
    assert ckpts and not [c for c in os.listdir(out / "checkpoints") if "tmp" in c]
