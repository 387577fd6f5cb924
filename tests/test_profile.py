"""--profile START:STOP: a profiler trace TensorBoard reads, and the share of matmul and
convolution time computed in 16-bit types (from the ops the CPU ran) or on tensor cores (from
GPU kernel names; checked on a hand-made trace, there being no GPU here)."""
import glob
import os

import pytest
from conftest import TINY

from common import profiling, runner
from rn50.task import ResNetTask
from txl.task import TransformerXLTask

BENCH = ["--iter_unit", "batch", "--num_iter", "4", "--warmup_steps", "1"]


def _trace(results_dir):
    (path,) = glob.glob(os.path.join(str(results_dir), "tensorboard", "plugins", "profile", "*",
                                     "*.xplane.pb"))
    return path


@pytest.mark.parametrize("amp", [False, True])
def test_training_benchmark_profile_types_the_convolution_time(tmp_path, amp):
    s = runner.run(ResNetTask, ["main.py", *TINY, "--mode", "training_benchmark", *BENCH,
                                "--profile", "2:3", "--results_dir", str(tmp_path)]
                   + (["--amp"] if amp else []))
    assert os.path.getsize(_trace(tmp_path)) > 0
    assert s["profiled_steps"] == 2
    assert 0.2 < s["matmul_conv_share"] <= 1  # a ResNet's time is mostly convolutions
    assert s.get("matmul_conv_untyped_share", 0) < 0.05
    top = dict(part.rsplit(" ", 1) for part in s["top_op_types"].split(", "))
    assert 1 < len(top) <= 8 and any("Conv2D" in name for name in top)
    shares = [float(v.rstrip("%")) for v in top.values()]
    assert shares == sorted(shares, reverse=True) and sum(shares) <= 101
    if amp:
        assert s["matmul_conv_16bit_share"] > 0.9  # bfloat16, but for float32 logits' matmul
    else:
        assert s["matmul_conv_16bit_share"] == 0


def test_training_loop_and_inference_benchmark_profile(tmp_path, corpus):
    s = runner.run(TransformerXLTask, ["main.py", "--preset", "tiny", "--seed", "3",
                                       "--data_dir", corpus, "--mode", "train", *BENCH,
                                       "--display_every", "10", "--profile", "2:2", "--amp",
                                       "--results_dir", str(tmp_path / "train")])
    assert s["profiled_steps"] == 1 and s["final_step"] == 4  # a sync point at step 2 only
    assert s["matmul_conv_share"] > 0.1 and s["matmul_conv_16bit_share"] > 0.5
    s = runner.run(TransformerXLTask, ["main.py", "--preset", "tiny", "--seed", "3",
                                       "--data_dir", corpus, "--mode", "inference_benchmark",
                                       *BENCH, "--profile", "3:9", "--results_dir",
                                       str(tmp_path / "infer")])
    assert s["profiled_steps"] == 2  # a range past the end stops with the run
    assert s["matmul_conv_share"] > 0.1 and s["matmul_conv_16bit_share"] == 0


@pytest.mark.parametrize("spec", ["3", "0:2", "5:4", "a:b"])
def test_a_malformed_range_is_one_line(tmp_path, spec):
    with pytest.raises(runner.UsageError, match=f"--profile {spec}: give START:STOP"):
        runner.run(ResNetTask, ["main.py", *TINY, "--mode", "training_benchmark", *BENCH,
                                "--profile", spec, "--results_dir", str(tmp_path)])


def test_gpu_kernels_are_classed_by_name(tmp_path):
    """A hand-made GPU trace: kernel names as Ampere and Hopper runs show them."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2
    kernels = {  # name: microseconds
        "sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x32": 40,
        "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn": 20,
        "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1": 10,
        "ampere_sgemm_128x64_nn": 10,  # float32 without tensor cores
        "void Eigen::internal::EigenMetaKernel<Eigen::TensorEvaluator<float>>": 20,
    }
    space = xplane_pb2.XSpace()
    plane = space.planes.add(name="/device:GPU:0")
    line = plane.lines.add(name="Stream #14")
    for i, (name, us) in enumerate(kernels.items(), 1):
        plane.event_metadata[i].name = name
        line.events.add(metadata_id=i, duration_ps=us * 1_000_000)
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(space.SerializeToString())
    r = profiling.summarize(str(path))
    assert r["matmul_conv_share"] == pytest.approx(80 / 100)
    assert r["matmul_conv_16bit_share"] == pytest.approx(60 / 80)
    assert r["tensor_core_share"] == pytest.approx(70 / 80)


def test_a_range_a_resumed_run_has_passed_is_said_and_nothing_is_profiled(tmp_path, capsys):
    args = ["main.py", *TINY, "--mode", "train", "--iter_unit", "batch", "--results_dir",
            str(tmp_path)]
    runner.run(ResNetTask, [*args, "--num_iter", "3"])
    s = runner.run(ResNetTask, [*args, "--num_iter", "5", "--profile", "1:2"])
    assert s["final_step"] == 5 and "profiled_steps" not in s
    assert ("profile: steps 1:2 come before this run's first step, 4 (it resumes a run): "
            "nothing is profiled") in capsys.readouterr().out
    assert not glob.glob(str(tmp_path / "tensorboard" / "plugins" / "profile" / "*"))


@pytest.mark.parametrize("mode", ["evaluate", "predict"])
def test_profile_of_a_mode_without_steps_is_refused(tmp_path, capsys, mode, digits_records):
    code = runner.main(ResNetTask, ["main.py", *TINY, "--mode", mode, "--profile", "1:2",
                                    "--data_dir", digits_records, "--to_predict", "x",
                                    "--results_dir", str(tmp_path)])
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"main.py: error: --profile traces training or benchmark steps; --mode {mode} has none: "
        "profile --mode inference_benchmark instead")
