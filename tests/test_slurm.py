"""The project's Slurm launch on a real one-node Slurm (tests/slurm_cluster.py): every model's
own ``scripts/slurm.sbatch`` through ``sbatch``, its ``srun --mpi=pmix`` tasks forming one
Horovod job with one results directory, the same training as ``mpirun -np 2``, a graceful stop
by ``scancel``, and error lines that name their rank.

The node has this machine's CPUs and no GPU, so each job overrides the sbatch files' GPU
request with ``--gpus-per-node=0`` and asks for 2 tasks on the one node."""
import os
import shutil
import sys
import time

import numpy as np
import pytest
from conftest import ROOT, TINY, run_cli
from slurm_cluster import UNFINISHED, SlurmCluster, missing

from common.runtime.dllogger import read_records

pytestmark = pytest.mark.skipif(
    bool(missing()) or shutil.which("mpirun") is None,
    reason=f"Slurm is not installed ({', '.join(missing())} missing): "
           "bash scripts/install_test_deps.sh")

# Two tasks on the one node, instead of the sbatch files' 8 per node on GPU nodes.
NODE = ["--gpus-per-node=0", "--nodes=1", "--ntasks-per-node=2"]
# Slurm's own behaviour under faults: the NGC stack's suite runs these (pytest.ini, one_stack).
# How sbatch, srun and PMIx start the ranks: the pip stack's suite runs these.
LAUNCH_ONLY = pytest.mark.one_stack(
    "pip", "sbatch, srun and PMIx start the ranks alike under both stacks; Horovod's own "
    "behaviour is tested on both (tests/test_horovod.py)")
CLUSTER_ONLY = pytest.mark.one_stack(
    "pip", "Slurm's requeues, preemption and signals and the batch shell do not change with the "
    "Python stack")
RN50_TINY = [*TINY, "--batch_size", "4", "--iter_unit", "batch", "--num_iter", "4",
             "--mode", "train", "--seed", "1"]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    cluster = SlurmCluster(str(tmp_path_factory.mktemp("slurm"))).start()
    yield cluster
    cluster.stop()


def _summary(results_dir):
    records = read_records(os.path.join(results_dir, "log.json"))
    params = [r["data"] for r in records if r.get("step") == "PARAMETER"]
    summaries = [r["data"] for r in records if r.get("step") == []]
    return params, summaries


def _sbatch(slurm, script, args, env, out):
    """Runs a model's slurm.sbatch from the repository's root; returns its output."""
    job = slurm.sbatch([*NODE, "-o", out, os.path.join(ROOT, script), *args],
                       env={"PYTHON": sys.executable, **env}, cwd=ROOT)
    state = slurm.wait(job)
    text = open(out).read()
    assert state == "COMPLETED", f"job {job} {state}:\n{text[-4000:]}"
    return text


@LAUNCH_ONLY
def test_resnet_sbatch_is_one_horovod_job_and_trains_as_mpirun_does(slurm, tmp_path):
    srun_dir, mpirun_dir = str(tmp_path / "srun"), str(tmp_path / "mpirun")
    out = _sbatch(slurm, "resnet50v1.5/scripts/slurm.sbatch", ["fp32", "noxla", *RN50_TINY],
                  {"DATA_DIR": "", "RESULTS_DIR": srun_dir}, str(tmp_path / "job.out"))
    assert out.count("processes: 2, batch 4 per process, global batch 8") == 1  # rank 0 only
    params, summaries = _summary(srun_dir)
    assert len(params) == 1 and params[0]["world_size"] == 2  # one log, by rank 0
    assert len(summaries) == 1 and summaries[0]["final_step"] == 4
    assert os.listdir(os.path.join(srun_dir, "checkpoints"))  # rank 0 saved
    # The same recipe through mpirun -np 2 (train.sh's default launcher) trains alike.
    proc = run_cli(["bash", os.path.join(ROOT, "resnet50v1.5", "scripts", "train.sh"), "fp32",
                    "2", "noxla", *RN50_TINY],
                   env={"DATA_DIR": "", "RESULTS_DIR": mpirun_dir, "PYTHON": sys.executable},
                   timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, (mpirun_summary,) = _summary(mpirun_dir)
    assert mpirun_summary["world_size"] == 2
    np.testing.assert_allclose(summaries[0]["final_loss"], mpirun_summary["final_loss"],
                               rtol=1e-6)


@LAUNCH_ONLY
# The sbatch path is scripts/slurm_job.sh's for every model (ResNet-50's job, the test before,
# runs in the suite); SSD320's two-rank evaluation is test_ssd's (tf.data, mpirun). Its job, with
# DALI's shards on two tasks: `make test-slow` (the suite's time budget).
@pytest.mark.slow
def test_ssd_sbatch_trains_and_evaluates_with_dali_on_two_tasks(slurm, tmp_path, shapes_records):
    results = str(tmp_path / "r")
    out = _sbatch(slurm, "ssd320/scripts/slurm.sbatch",
                  ["fp32", "noxla", "--arch", "resnet_tiny", "--image_size", "64",
                   "--display_every", "1", "--seed", "0"],
                  {"DATA_DIR": shapes_records, "RESULTS_DIR": results, "NUM_ITER": "2",
                   "BATCH_SIZE": "2"}, str(tmp_path / "job.out"))
    assert out.count("processes: 2, batch 2 per process, global batch 4") == 1
    params, (summary,) = _summary(results)
    assert params[0]["world_size"] == 2 and params[0]["dali"] is True
    assert summary["final_step"] == 2 and summary["eval_images"] == 8  # the whole split once
    assert "DetectionBoxes_Precision/mAP@.50IOU" in summary


@LAUNCH_ONLY
# The sbatch path is scripts/slurm_job.sh's for every model (ResNet-50's and SSD320's jobs run
# in the suite) and Transformer-XL's two-rank global batch is test_txl_main's: `make test-slow`.
@pytest.mark.slow
def test_transformerxl_sbatch_keeps_the_global_batch_over_two_tasks(slurm, tmp_path, corpus):
    results = str(tmp_path / "r")
    out = _sbatch(slurm, "transformerxl/scripts/slurm.sbatch",
                  ["fp32", "noxla", *TINY, "--batch_size", "4", "--seed", "3",
                   "--display_every", "1"],
                  {"DATA_DIR": corpus, "RESULTS_DIR": results, "NUM_ITER": "3", "DALI": "1",
                   "BATCH_CHUNK": "1"}, str(tmp_path / "job.out"))
    assert out.count("processes: 2, batch 4 per process, global batch 8") == 1
    params, (summary,) = _summary(results)
    assert params[0]["world_size"] == 2 and params[0]["dali"] is True
    assert summary["final_step"] == 3 and np.isfinite(summary["eval_ppl"])


@CLUSTER_ONLY
# A stop on a save step, one checkpoint, is test_horovod's under mpirun (a signal on one rank);
# under scancel: `make test-slow` (the suite's time budget).
@pytest.mark.slow
def test_scancel_on_a_save_step_stops_both_tasks_with_one_checkpoint(slurm, tmp_path):
    """SIGTERM from scancel reaches every task; they stop at one step, rank 0 saves it once,
    the job completes (exit 0), and a new job resumes from that checkpoint."""
    results = str(tmp_path / "r")
    log = tmp_path / "job.out"
    args = [*RN50_TINY, "--num_iter", "100000", "--save_checkpoint_steps", "1"]
    job = slurm.sbatch([*NODE, "-o", str(log),
                        os.path.join(ROOT, "resnet50v1.5/scripts/slurm.sbatch"), "fp32", "noxla",
                        *args],
                       env={"PYTHON": sys.executable, "DATA_DIR": "", "RESULTS_DIR": results},
                       cwd=ROOT)
    deadline = time.time() + 180
    while time.time() < deadline and "step 20/" not in (log.read_text() if log.exists() else ""):
        time.sleep(0.5)
    assert slurm.run(["scancel", "--signal=TERM", job]).returncode == 0
    state = slurm.wait(job, timeout=120)
    text = log.read_text()
    assert state == "COMPLETED" and slurm.job_exit_code(job) == "0:0", text[-3000:]
    assert "Traceback" not in text and text.count("SIGTERM: stopped at step ") == 1
    stopped = int(text.split("SIGTERM: stopped at step ")[1].split(",")[0])
    assert stopped >= 20
    ckpts = os.listdir(os.path.join(results, "checkpoints"))
    assert f"ckpt-{stopped}.index" in ckpts and not [c for c in ckpts if "tmp" in c]
    out = _sbatch(slurm, "resnet50v1.5/scripts/slurm.sbatch",
                  ["fp32", "noxla", *RN50_TINY, "--num_iter", str(stopped + 2)],
                  {"DATA_DIR": "", "RESULTS_DIR": results}, str(tmp_path / "resume.out"))
    assert f"restored {results}/checkpoints/ckpt-{stopped} at step {stopped}" in out


@LAUNCH_ONLY
def test_srun_error_lines_name_each_rank(slurm, tmp_path):
    proc = slurm.run(["srun", "-n2", "--mpi=pmix", sys.executable,
                      os.path.join(ROOT, "resnet50v1.5", "main.py"), "--data_dir",
                      str(tmp_path / "nowhere"), "--results_dir", str(tmp_path / "r")])
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    errors = sorted(ln for ln in proc.stderr.splitlines() if "main.py: error" in ln)
    assert errors == [f"main.py: error (rank {r}): --data_dir {tmp_path}/nowhere does not exist "
                      "or is not a directory" for r in (0, 1)]


@LAUNCH_ONLY
def test_srun_without_pmix_is_refused_instead_of_training_twice(slurm, tmp_path):
    """Without an MPI plugin each task is an MPI world of its own: refused with one line,
    rather than two runs writing one results directory."""
    proc = slurm.run(["srun", "-n2", "--mpi=none", sys.executable,
                      os.path.join(ROOT, "resnet50v1.5", "main.py"), *RN50_TINY,
                      "--results_dir", str(tmp_path / "r")])
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if "main.py: error" in ln]
    assert len(errors) == 2 and all(e.endswith(
        "srun started 2 processes without an MPI plugin: run srun --mpi=pmix (or the plugin "
        "Open MPI was built for: srun --mpi=list)") for e in errors), proc.stderr[-2000:]


# --- long runs: a time limit, a lost rank (scripts/slurm_job.sh, common/runtime/watchdog.py) --
def _submit(slurm, tmp_path, args, results, log, **env):
    return slurm.sbatch([*NODE, "-o", str(log),
                         os.path.join(ROOT, "resnet50v1.5/scripts/slurm.sbatch"), "fp32", "noxla",
                         *args],
                        env={"PYTHON": sys.executable, "DATA_DIR": "", "RESULTS_DIR": results,
                             **env}, cwd=ROOT)


def _wait_for(log, text, timeout=180):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if text in (log.read_text() if log.exists() else ""):
            return
        time.sleep(0.5)
    raise AssertionError(f"no {text!r} in {timeout} s:\n" + log.read_text()[-3000:])


def _release(slurm, job):
    """Lets a requeued job start without Slurm's hold-back (its BeginTime, a minute or two), but
    not within the second of its requeue: slurmd revokes the old start's credential with a time
    in seconds, and a start in that second is killed ("Job credential revoked")."""
    time.sleep(3)
    slurm.run(["scontrol", "update", f"JobId={job}", "StartTime=now"])


def _weights(results):
    import tensorflow as tf
    reader = tf.train.load_checkpoint(os.path.join(results, "checkpoints"))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
            if "model" in k and "OPTIMIZER" not in k}


@CLUSTER_ONLY
# The stop at a common step with a checkpoint and the exact resume are test_horovod's under
# mpirun; the requeue by slurm_job.sh under a real Slurm: `make test-slow` (the suite's time
# budget).
@pytest.mark.slow
def test_the_time_limit_warning_stops_requeues_and_resumes_as_one_run(slurm, tmp_path):
    """What Slurm does before a job's limit (sbatch --signal=B:USR1@300), sent at once with
    scancel --batch: the ranks stop at a step with a checkpoint, the job requeues itself (same id,
    same results directory), resumes at that step and completes, with the weights of an
    uninterrupted run and one log whose last summary counts both jobs."""
    results, log = str(tmp_path / "r"), tmp_path / "job.out"
    args = [*RN50_TINY, "--num_iter", "150", "--display_every", "10"]
    # The same run without the stop, in one job beside it (the partition shares the node).
    whole = str(tmp_path / "whole")
    whole_job = _submit(slurm, tmp_path, args, whole, tmp_path / "whole.out")
    job = _submit(slurm, tmp_path, args, results, log)
    _wait_for(log, "step 50/")
    assert slurm.run(["scancel", "--signal=USR1", "--batch", job]).returncode == 0
    deadline = time.time() + 120
    while time.time() < deadline and not (slurm._job_field(job, "Restarts", "0") == "1"
                                          and slurm.job_state(job) == "PENDING"):
        time.sleep(0.5)
    assert slurm._job_field(job, "Restarts", "0") == "1", log.read_text()[-3000:]
    _release(slurm, job)
    state = slurm.wait(job, timeout=300)
    text = log.read_text()
    assert state == "COMPLETED" and "Traceback" not in text, text[-4000:]
    assert text.count("SIGUSR1: stopped at step ") == 1
    stopped = int(text.split("SIGUSR1: stopped at step ")[1].split(",")[0])
    assert "requeueing job" in text and f"slurm_job.sh: job {job}, start 2" in text
    assert f"restored {results}/checkpoints/ckpt-{stopped} at step {stopped}" in text
    records = read_records(os.path.join(results, "log.json"))
    run_loss = "total_loss"  # ResNet-50's (NVIDIA's name)
    steps = [r["step"][1] for r in records if r["type"] == "LOG" and isinstance(r["step"], list)
             and run_loss in r["data"]]
    assert steps == sorted(set(steps)) and steps[-1] == 150  # continuous, none twice
    params, summaries = _summary(results)
    assert len(params) == 2 and summaries[-1]["jobs"] == 2 and summaries[-1]["final_step"] == 150
    assert summaries[-1]["total_train_seconds"] > summaries[-1]["train_seconds"]
    from benchtools.report import find_runs
    (run,) = find_runs([results])  # one run: both jobs' steps, the last summary
    assert [s for s, _ in run.series(run_loss)] == steps and run.summary["jobs"] == 2
    # The uninterrupted run: the same weights.
    assert slurm.wait(whole_job, timeout=300) == "COMPLETED", (tmp_path / "whole.out").read_text()
    a, b = _weights(results), _weights(whole)
    assert a.keys() == b.keys() and a
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-6, err_msg=k)


# The same stop, checkpoint and requeue as the time limit's (the test before, in the suite),
# started by a preemption's SIGTERM instead of the limit's warning: `make test-slow`.
@CLUSTER_ONLY
@pytest.mark.slow
def test_a_preempted_job_stops_with_a_checkpoint_and_comes_back_to_resume(slurm, tmp_path):
    """A job of the cluster's urgent partition (PriorityTier 2) takes the node: Slurm sends
    SIGTERM to the steps (GraceTime 60 s), the ranks stop with a checkpoint, and the job, which
    Slurm would count as completed for ending within its grace, requeues itself; it runs again
    after the urgent job and resumes at that step."""
    results, log = str(tmp_path / "r"), tmp_path / "job.out"
    job = _submit(slurm, tmp_path, [*RN50_TINY, "--num_iter", "150", "--display_every", "10"],
                  results, log)
    _wait_for(log, "step 50/")
    urgent = slurm.sbatch(["-p", "urgent", "--exclusive", "-N1", "-o", str(tmp_path / "u.out"),
                           "--wrap", "sleep 2"])
    assert slurm.wait(urgent, timeout=180) == "COMPLETED"
    deadline = time.time() + 60
    while time.time() < deadline and slurm.job_state(job) != "PENDING":
        time.sleep(0.5)
    _release(slurm, job)
    state = slurm.wait(job, timeout=300)
    text = log.read_text()
    assert state == "COMPLETED" and slurm._job_field(job, "Restarts", "?") == "1", text[-4000:]
    stopped = int(text.split("SIGTERM: stopped at step ")[1].split(",")[0])
    assert "slurm_job.sh: the job was preempted: the run stopped before its end" in text
    assert f"restored {results}/checkpoints/ckpt-{stopped} at step {stopped}" in text
    assert _summary(results)[1][-1]["final_step"] == 150


# The ranks' stand-in for the "complete" case: main.py's run ended at its last step as the
# signal came (its log, a real run's, has a final summary that is not a stopped run's).
_FINISHED = ("import signal, sys, time; signal.signal(signal.SIGUSR1, lambda *_: sys.exit(0)); "
             "print('waiting for the signal', flush=True); time.sleep(300)")


@CLUSTER_ONLY
# A job that is not requeued: the complete run's case in the suite; spent requeues (the same
# branch of slurm_job.sh, its count) in `make test-slow` (the suite's time budget).
@pytest.mark.parametrize("case", ["complete", pytest.param("spent", marks=pytest.mark.slow)])
def test_a_complete_run_or_a_spent_max_requeues_is_not_requeued(slurm, tmp_path, case):
    """USR1 (the time limit is near) requeues the job, unless the run is complete by then or
    MAX_REQUEUES requeues are spent."""
    results, log = str(tmp_path / "r"), tmp_path / "job.out"
    if case == "spent":
        job = _submit(slurm, tmp_path, [*RN50_TINY, "--num_iter", "100000",
                                        "--display_every", "10"], results, log, MAX_REQUEUES="0")
        _wait_for(log, "step 30/")
    else:
        proc = run_cli([sys.executable, os.path.join(ROOT, "resnet50v1.5", "main.py"),
                        *RN50_TINY, "--results_dir", results])
        assert proc.returncode == 0, proc.stderr[-3000:]
        script = tmp_path / "job.sh"
        script.write_text(f"#!/bin/bash\n#SBATCH --requeue\nexec bash {ROOT}/scripts/slurm_job.sh "
                          f"{sys.executable} -c \"{_FINISHED}\"\n")
        job = slurm.sbatch(["--nodes=1", "--ntasks=1", "-o", str(log), str(script)],
                           env={"RESULTS_DIR": results})
        _wait_for(log, "waiting for the signal")
    assert slurm.run(["scancel", "--signal=USR1", "--batch", job]).returncode == 0
    assert slurm.wait(job, timeout=120) == "COMPLETED"
    text = log.read_text()
    if case == "spent":
        assert "start 1 of at most 1" in text and "MAX_REQUEUES=0 requeues are spent" in text
    else:
        assert "slurm_job.sh: the run is complete: not requeued" in text, text[-3000:]
    assert "requeueing job" not in text
    assert slurm._job_field(job, "Restarts", "?") == "0"


@CLUSTER_ONLY
# A killed task ending the job is srun's own --kill-on-bad-exit; a stopped one is the
# watchdog's, whose mpirun case (test_horovod, a rank that stops answering or dies) the suite
# runs: `make test-slow` (the suite's time budget).
@pytest.mark.slow
@pytest.mark.parametrize("sig", ["KILL", "STOP"])
def test_a_lost_rank_under_srun_ends_the_job_within_the_bound(slurm, tmp_path, sig):
    """SIGKILL: Slurm's own "task 1: Killed". SIGSTOP (a rank that neither dies nor answers):
    rank 0's --hang_timeout watch names it and srun --kill-on-bad-exit ends the step."""
    import json
    results, log = tmp_path / "r", tmp_path / "job.out"
    job = _submit(slurm, tmp_path, [*RN50_TINY, "--num_iter", "100000", "--display_every", "1",
                                    "--save_checkpoint_steps", "5", "--hang_timeout", "10"],
                  str(results), log)
    _wait_for(log, "step 12/")
    victim = json.load(open(results / ".heartbeat" / "rank-1.json"))["pid"]
    sent = time.monotonic()
    os.kill(victim, getattr(__import__("signal"), f"SIG{sig}"))
    state = slurm.wait(job, timeout=120)
    took = time.monotonic() - sent
    text = log.read_text()
    assert state == "FAILED" and "Traceback" not in text, text[-3000:]
    if sig == "KILL":
        assert took < 15 and "task 1: Killed" in text, text[-3000:]
    else:
        assert took < 10 + 3 + 10, f"{took:.0f} s"
        lines = [ln for ln in text.splitlines() if "stopped answering" in ln]
        assert len(lines) == 1 and "rank 1 (" in lines[0] and f"pid {victim})" in lines[0]
    ckpts = os.listdir(results / "checkpoints")
    assert any(c.endswith(".index") for c in ckpts) and not [c for c in ckpts if "tmp" in c]
    if sig == "STOP":  # a new job resumes from the last checkpoint
        last = max(int(c[5:-6]) for c in ckpts if c.startswith("ckpt-") and c.endswith(".index"))
        out = _sbatch(slurm, "resnet50v1.5/scripts/slurm.sbatch",
                      ["fp32", "noxla", *RN50_TINY, "--num_iter", str(last + 2)],
                      {"DATA_DIR": "", "RESULTS_DIR": str(results)}, str(tmp_path / "resume.out"))
        assert f"restored {results}/checkpoints/ckpt-{last} at step {last}" in out


@pytest.mark.slow
def test_a_real_time_limit_is_outlived_by_requeueing(slurm, tmp_path):
    """The limit itself, not a stand-in: --time=2 with the warning 60 s before it. Slurm may send
    the warning up to a minute early and checks limits every 30 s or so, so each job trains for
    somewhere under two minutes; the run needs several and completes as one."""
    results, log = str(tmp_path / "r"), tmp_path / "job.out"
    job = slurm.sbatch([*NODE, "--time=2", "--signal=B:USR1@60", "-o", str(log),
                        os.path.join(ROOT, "resnet50v1.5/scripts/slurm.sbatch"), "fp32", "noxla",
                        *RN50_TINY, "--num_iter", "6000", "--display_every", "100"],
                       env={"PYTHON": sys.executable, "DATA_DIR": "", "RESULTS_DIR": results},
                       cwd=ROOT)
    deadline = time.time() + 1800
    while time.time() < deadline:
        state = slurm.job_state(job)
        if state == "PENDING" and slurm._job_field(job, "Restarts", "0") != "0":
            _release(slurm, job)
        if state not in UNFINISHED:
            break
        time.sleep(2)
    text = log.read_text()
    assert state == "COMPLETED" and "Traceback" not in text, text[-4000:]
    restarts = int(slurm._job_field(job, "Restarts", "0"))
    assert restarts >= 1 and text.count("requeueing job") == restarts
    assert "DUE TO TIME LIMIT" not in text
    params, summaries = _summary(results)
    assert summaries[-1]["final_step"] == 6000 and summaries[-1]["jobs"] == restarts + 1
