"""scripts/gpu_smoke.sh in --dry-run: every stage's command line, each main.py command valid
against that model's flags, the rank report run for real; and the table it ends with."""
import os
import shlex
import subprocess

import pytest
from conftest import ROOT

from common import flags, presets

MODELS = presets.MODELS


def _task(model):
    return presets.task_class(model)


def _dry_run(tmp_path, data_root, **env):
    full = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "LAUNCHER"))}
    full.update(SMOKE_DIR=str(tmp_path / "smoke"), DATA_ROOT=data_root, **env)
    return subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu_smoke.sh"), "--dry-run"],
                          capture_output=True, text=True, env=full, timeout=120)


@pytest.fixture
def data_root(tmp_path, digits_records, shapes_records, corpus):
    root = tmp_path / "data"
    root.mkdir()
    for name, path in (("imagenet", digits_records), ("coco", shapes_records),
                       ("wt103", corpus)):
        os.symlink(path, root / name)
    return str(root)


def test_every_stage_on_every_model_with_valid_flags(tmp_path, data_root):
    proc = _dry_run(tmp_path, data_root, GPUS="8", PYTHON="python")
    assert proc.returncode == 0, proc.stderr[-2000:]
    stages = dict(line.split(": ", 1) for line in proc.stdout.splitlines()
                  if ": " in line and not line.startswith("rank "))
    for model in MODELS:
        for stage in ("dali-1gpu", "dali-8gpu", "profile", "xla", "memory-fp32", "memory-tf32",
                      "infer"):
            assert f"{stage}-{model}" in stages, sorted(stages)
        # TF-TRT where this TensorFlow has TensorRT: here it has not (TFTRT=0 in the env).
        assert stages[f"tftrt-{model}"].startswith("skipped (this TensorFlow has no TensorRT")
    assert "ssd-eval" in stages and "ranks" in stages
    assert stages["dali-8gpu-ssd320"].startswith("mpirun --allow-run-as-root --bind-to none -np 8")
    for name, line in stages.items():
        if line.startswith("skipped ("):
            continue
        cmd = shlex.split(line)
        main = [i for i, c in enumerate(cmd) if c.endswith("/main.py")]
        if not main:
            continue
        model = os.path.basename(os.path.dirname(cmd[main[0]]))
        task = _task(model)
        fv = flags.parse(flags.build(task.define_flags, task.flag_defaults),
                         ["main.py", *cmd[main[0] + 1:]])
        assert fv.dali and bool(fv.amp) == (not name.startswith("memory-")), name
        if name.startswith("memory-"):  # FP32 without TF32, and TF32
            assert fv.tf32 == name.startswith("memory-tf32") and fv.no_tf32 == (
                not fv.tf32), name
            assert fv.mode == "training_benchmark", name
        if name.startswith("infer-"):
            assert fv.mode == "inference_benchmark" and fv.use_tftrt is None, name
        assert fv.xla == name.startswith("xla-") and (fv.profile is not None) == \
            name.startswith("profile-")
    # The one stage that needs no GPU ran: this machine's rank report, without TensorFlow's
    # start-up lines; and a dry run writes nothing.
    assert "rank 0/1 local 0 on" in proc.stdout and "computes on the CPU" in proc.stdout
    assert "cuInit" not in proc.stderr and "cuda drivers" not in proc.stderr, proc.stderr
    assert not (tmp_path / "smoke").exists()


def test_under_slurm_the_multi_gpu_stages_go_through_srun(tmp_path, data_root):
    proc = _dry_run(tmp_path, data_root, GPUS="4", SLURM_JOB_ID="7", SLURM_JOB_NUM_NODES="2",
                    SLURM_CPUS_ON_NODE="64")
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("dali-4gpu-resnet50v1.5:")][0]
    assert line.split(": ", 1)[1].startswith(
        "srun --mpi=pmix --ntasks-per-node=4 --kill-on-bad-exit=1 --cpus-per-task=16 "
        "--cpu-bind=none bash ")


def test_without_a_gpu_the_real_run_is_refused_with_one_line(tmp_path, data_root):
    full = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    full.update(SMOKE_DIR=str(tmp_path / "s"), DATA_ROOT=data_root, GPUS="0")
    proc = subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu_smoke.sh")],
                          capture_output=True, text=True, env=full, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("gpu_smoke.sh: error: no GPU (nvidia-smi lists none)")


def test_the_table_shows_each_stage_with_its_figures_or_its_error(tmp_path):
    from benchtools import smoke
    from common.dllogger import Logger
    ok = tmp_path / "dali-8gpu-ssd320"
    (ok / "run").mkdir(parents=True)
    (ok / "exit_code").write_text("0\n")
    log = Logger(enabled=True, json_path=str(ok / "run" / "log.json"))
    log.summary({"world_size": 8, "train_images_per_s": 5123.4, "gpu_memory_peak_mib": 20480})
    log.close()
    bad = tmp_path / "xla-transformerxl"
    bad.mkdir()
    (bad / "exit_code").write_text("1\n")
    (bad / "stderr").write_text("noise\nmain.py: error: something precise\n")
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    (ranks / "exit_code").write_text("0\n")
    (ranks / "stdout").write_text("rank 1/2 local 1 on n: x\nrank 0/2 local 0 on n: y\n")
    skipped = tmp_path / "tftrt-ssd320"
    skipped.mkdir()
    (skipped / "skipped").write_text("this TensorFlow has no TensorRT\n")
    assert smoke.main([str(tmp_path)]) == 1  # a stage failed
    table = (tmp_path / "table.md").read_text()
    assert "| dali-8gpu-ssd320 | PASS | 8 proc, 5123 img/s, peak 20480 MiB |" in table
    assert "| xla-transformerxl | FAIL (1) | main.py: error: something precise |" in table
    assert "| ranks | PASS | 2 rank(s): rank 0/2 local 0 on n: y | rank 1/2 local 1 on n: x |" \
        in table
    assert "| tftrt-ssd320 | skipped | this TensorFlow has no TensorRT |" in table
    assert "2 of 3 stages passed (1 skipped: not possible on this machine)" in table
