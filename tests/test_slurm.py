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
from conftest import ROOT, run_cli
from slurm_cluster import SlurmCluster, missing

from common.dllogger import read_records

pytestmark = pytest.mark.skipif(
    bool(missing()) or shutil.which("mpirun") is None,
    reason=f"Slurm is not installed ({', '.join(missing())} missing): "
           "bash scripts/install_test_deps.sh")

# Two tasks on the one node, instead of the sbatch files' 8 per node on GPU nodes.
NODE = ["--gpus-per-node=0", "--nodes=1", "--ntasks-per-node=2"]
RN50_TINY = ["--arch", "resnet_tiny", "--image_size", "32", "--batch_size", "4",
             "--iter_unit", "batch", "--num_iter", "4", "--mode", "train", "--seed", "1",
             "--lr_warmup_epochs", "0", "--display_every", "1"]


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
    assert "eval_AP50" in summary


def test_transformerxl_sbatch_keeps_the_global_batch_over_two_tasks(slurm, tmp_path, corpus):
    results = str(tmp_path / "r")
    out = _sbatch(slurm, "transformerxl/scripts/slurm.sbatch",
                  ["fp32", "noxla", "--preset", "tiny", "--batch_size", "4", "--seed", "3",
                   "--display_every", "1"],
                  {"DATA_DIR": corpus, "RESULTS_DIR": results, "NUM_ITER": "3", "DALI": "1",
                   "BATCH_CHUNK": "1"}, str(tmp_path / "job.out"))
    assert out.count("processes: 2, batch 4 per process, global batch 8") == 1
    params, (summary,) = _summary(results)
    assert params[0]["world_size"] == 2 and params[0]["dali"] is True
    assert summary["final_step"] == 3 and np.isfinite(summary["eval_ppl"])


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


def test_srun_error_lines_name_each_rank(slurm, tmp_path):
    proc = slurm.run(["srun", "-n2", "--mpi=pmix", sys.executable,
                      os.path.join(ROOT, "resnet50v1.5", "main.py"), "--data_dir",
                      str(tmp_path / "nowhere"), "--results_dir", str(tmp_path / "r")])
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    errors = sorted(ln for ln in proc.stderr.splitlines() if "main.py: error" in ln)
    assert errors == [f"main.py: error (rank {r}): --data_dir {tmp_path}/nowhere does not exist "
                      "or is not a directory" for r in (0, 1)]


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
