"""scripts/gpu_smoke.sh in --dry-run: every stage's command line, each main.py command valid
against that model's flags, the rank report run for real; and the table it ends with."""
import os
import shlex
import subprocess

import pytest
from conftest import ROOT

from common import flags, models

pytestmark = pytest.mark.one_stack(
    "pip", "gpu_smoke.sh is bash and its stages' command lines, the same for both stacks")

MODELS = models.MODELS


def _task(model):
    return models.task_class(model)


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


def _stages(proc) -> dict:
    return dict(line.split(": ", 1) for line in proc.stdout.splitlines()
                if ": " in line and not line.startswith("rank "))


def _main_flags(model, argv):
    task = _task(model)
    return flags.parse(flags.build(task.config.define_flags, task.config.FLAG_DEFAULTS),
                       ["main.py", *argv])


PER_MODEL = ("parity", "dali-compare", "dali-1gpu", "dali-8gpu", "fp16-allreduce",
             "static-loss-scale", "resume-fp16", "export", "profile", "xla", "memory-fp32",
             "memory-tf32", "infer")


def test_every_stage_on_every_model_with_valid_flags(tmp_path, data_root):
    proc = _dry_run(tmp_path, data_root, GPUS="8", PYTHON="python", TENSORRT="1",
                    POLYGRAPHY="1", TRITON="1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    stages = _stages(proc)
    smoke = tmp_path / "smoke"
    for model, name in (("resnet50v1.5", "resnet50"), ("ssd320", "ssd320")):
        run = smoke / f"export-{model}" / "run"
        assert stages[f"tensorrt-{model}"] == f"bash {run}/triton.tensorrt/build_engines.sh"
        made, fp16, int8 = (shlex.split(c) for c in stages[f"tensorrt-compare-{model}"].split(
            " && "))
        assert made[:3] == ["python", "-m", "benchtools.tensorrt_inputs"]
        assert made[made.index("--triton_dir") + 1] == f"{run}/triton"
        onnx = "model.onnx" if model == "resnet50v1.5" else "model_before_nms.onnx"
        assert fp16[2:5] == ["polygraphy", "run", f"{run}/export/{onnx}"]
        assert {"--trt", "--fp16", "--onnxrt"} <= set(fp16) and "--int8" not in fp16
        assert int8[4] == f"{run}/export/{onnx[:-5]}_int8.onnx" and "--int8" in int8
        assert fp16[fp16.index("--data-loader-script") + 1].endswith(
            "benchtools/tensorrt_inputs.py:load_data")
        assert shlex.split(stages[f"triton-perf-{model}"])[2:4] == [f"{run}/triton/triton",
                                                                     name]
    assert not any(s.startswith(("tensorrt-", "triton-perf-")) and "transformerxl" in s
                   for s in stages)
    for model in MODELS:
        for stage in PER_MODEL:
            assert f"{stage}-{model}" in stages, (stage, model, sorted(stages))
            assert not stages[f"{stage}-{model}"].startswith("skipped"), (stage, model)
        # TF-TRT where this TensorFlow has TensorRT: here it has not (TFTRT=0 in the env).
        assert stages[f"tftrt-{model}"].startswith("skipped (this TensorFlow has no TensorRT")
        assert (f"dali-cpu-{model}" in stages) == (model != "transformerxl")  # no decoding
    assert "nchw-resnet50v1.5" in stages and "nchw-ssd320" not in stages  # ResNet's flag only
    assert "ssd-eval" in stages and "ranks" in stages
    assert stages["dali-8gpu-ssd320"].startswith("mpirun --allow-run-as-root --bind-to none -np 8")
    assert stages["fp16-allreduce-resnet50v1.5"].startswith("mpirun --allow-run-as-root")
    # Without nccl-tests here: Horovod's allreduce timed on the 8 ranks.
    assert "-np 8" in stages["nccl"] and "benchtools/allreduce.py" in stages["nccl"]
    for name, line in stages.items():
        if line.startswith("skipped ("):
            continue
        for command in line.split(" && "):  # resume-fp16: two runs
            cmd = shlex.split(command)
            if "benchtools.parity" in cmd:  # the flags after -- are main.py's
                model = cmd[cmd.index("benchtools.parity") + 1]
                fv = _main_flags(model, cmd[cmd.index("--") + 1:])
                assert fv.data_dir and not fv.dali and not fv.amp, name
                assert ("--run_flags=--data_format NCHW" in cmd) == name.startswith("nchw-")
                continue
            if "benchtools.dali_compare" in cmd:
                model = cmd[cmd.index("benchtools.dali_compare") + 1]
                assert name == f"dali-compare-{model}"
                assert os.path.isdir(cmd[cmd.index("--data_dir") + 1]), name
                continue
            main = [i for i, c in enumerate(cmd) if c.endswith("/main.py")]
            if not main:
                continue
            model = os.path.basename(os.path.dirname(cmd[main[0]]))
            fv = _main_flags(model, cmd[main[0] + 1:])
            assert fv.dali and bool(fv.amp) == (not name.startswith("memory-")), name
            if name.startswith("memory-"):  # FP32 without TF32, and TF32
                assert fv.tf32 == name.startswith("memory-tf32") and fv.no_tf32 == (
                    not fv.tf32), name
                assert fv.mode == "training_benchmark", name
            if name.startswith("infer-"):
                assert fv.mode == "inference_benchmark" and fv.use_tftrt is None, name
            assert fv.xla == name.startswith("xla-") and (fv.profile is not None) == \
                name.startswith("profile-")
            assert fv.fp16_allreduce == name.startswith("fp16-allreduce-"), name
            assert fv.dali_cpu == name.startswith("dali-cpu-"), name
            assert (fv.static_loss_scale == 128) == name.startswith("static-loss-scale-"), name
            if name.startswith("export-"):
                assert fv.mode == "evaluate" and fv.export_dir and fv.export_onnx, name
                assert fv.export_triton == f"{smoke}/export-{model}/run/triton", name
                assert fv.export_onnx_int8 == (model != "transformerxl"), name
                assert fv.model_dir.endswith(f"dali-1gpu-{model}/run/checkpoints"), name
        if name.startswith("resume-fp16-"):  # half the steps, then the same results to all
            first, second = (shlex.split(c) for c in line.split(" && "))
            assert first[first.index("--num_iter") + 1] == "10"
            assert second[second.index("--num_iter") + 1] == "20"
            assert first[first.index("--results_dir") + 1] == \
                second[second.index("--results_dir") + 1]
    # The one stage that needs no GPU ran: this machine's rank report, without TensorFlow's
    # start-up lines; and a dry run writes nothing.
    assert "rank 0/1 local 0 on" in proc.stdout and "computes on the CPU" in proc.stdout
    assert "cuInit" not in proc.stderr and "cuda drivers" not in proc.stderr, proc.stderr
    assert not (tmp_path / "smoke").exists()


# `make test-slow` (the suite's time budget): every stage's command line is
# test_every_stage_on_every_model_with_valid_flags'.
@pytest.mark.slow
def test_with_one_gpu_the_multi_gpu_stages_are_listed_as_skipped(tmp_path, data_root):
    """GPUS unset on a machine without one: the dry run still lists every stage, the multi-GPU
    ones with their reason; nccl-tests' binary is used where it is given."""
    proc = _dry_run(tmp_path, data_root, PYTHON="python", ALL_REDUCE_PERF="/opt/nccl/arp",
                    TENSORRT="0", POLYGRAPHY="0", TRITON="0", INT8="0")
    assert proc.returncode == 0, proc.stderr[-2000:]
    stages = _stages(proc)
    for model in ("resnet50v1.5", "ssd320"):  # TensorRT's and Triton's tools are not here
        assert stages[f"tensorrt-{model}"] == \
            "skipped (trtexec is not on PATH (NVIDIA's TensorRT container has it))"
        assert stages[f"tensorrt-compare-{model}"] == \
            "skipped (needs trtexec's TensorRT and polygraphy on PATH)"
        assert stages[f"triton-perf-{model}"] == ("skipped (tritonserver and perf_analyzer are "
                                                  "not on PATH (Triton's containers))")
        assert "--export_onnx_int8" not in stages[f"export-{model}"]  # INT8=0
    why = "skipped (one GPU here (GPUS=1): needs 2 or more)"
    for model in MODELS:
        assert stages[f"dali-multigpu-{model}"] == why
        assert stages[f"fp16-allreduce-{model}"] == why
        assert not stages[f"parity-{model}"].startswith("skipped")
    assert stages["nccl"] == why
    proc = _dry_run(tmp_path, data_root, GPUS="2", PYTHON="python",
                    ALL_REDUCE_PERF="/opt/nccl/arp")
    assert _stages(proc)["nccl"] == "/opt/nccl/arp -b 8M -e 256M -f 2 -g 2"


# `make test-slow` (the suite's time budget): every stage's command line is
# test_every_stage_on_every_model_with_valid_flags'.
@pytest.mark.slow
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
    from common.runtime.dllogger import Logger
    ok = tmp_path / "dali-8gpu-ssd320"
    (ok / "run").mkdir(parents=True)
    (ok / "exit_code").write_text("0\n")
    log = Logger(enabled=True, json_path=str(ok / "run" / "log.json"))
    log.parameters({"model": "ssd320"})
    log.summary({"world_size": 8, "train_throughput": 5123.4, "gpu_memory_peak_mib": 20480})
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
