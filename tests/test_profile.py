"""--profile START:STOP: a profiler trace TensorBoard reads, and the share of matmul and
convolution time computed in 16-bit types (from the ops the CPU ran) or on tensor cores (from
GPU kernel names; checked on a hand-made trace, there being no GPU here)."""
import glob
import os

import pytest
from conftest import OWN_HANDLING, TINY

from benchtools import amp_lists, profile_diff
from common import runner
from common.tools import op_table, profiling
from rn50.task import ResNetTask
from ssd.task import SSDTask
from txl.task import TransformerXLTask

BENCH = ["--iter_unit", "batch", "--num_iter", "4", "--warmup_steps", "1"]


def _trace(results_dir):
    (path,) = glob.glob(os.path.join(str(results_dir), "tensorboard", "plugins", "profile", "*",
                                     "*.xplane.pb"))
    return path


def test_training_benchmark_profile_types_the_convolution_time_and_diffs_per_op(tmp_path,
                                                                               capsys):
    """FP32 and AMP runs: the shares, the per-op table next to each trace (xprof's self times,
    the graph's types) and ``benchtools.profile_diff`` lining the two up."""
    runs = {}
    for amp in (False, True):
        out = tmp_path / ("amp" if amp else "fp32")
        s = runs[amp] = runner.run(ResNetTask, ["main.py", *TINY, "--mode", "training_benchmark",
                                                *BENCH, "--profile", "2:3", "--results_dir",
                                                str(out)] + (["--amp"] if amp else []))
        assert os.path.getsize(_trace(out)) > 0
        assert s["profiled_steps"] == 2
        assert 0.2 < s["matmul_conv_share"] <= 1  # a ResNet's time is mostly convolutions
        assert s.get("matmul_conv_untyped_share", 0) < 0.05
        top = dict(part.rsplit(" ", 1) for part in s["top_op_types"].split(", "))
        assert 1 < len(top) <= 8 and any("Conv2D" in name for name in top)
        shares = [float(v.rstrip("%")) for v in top.values()]
        assert shares == sorted(shares, reverse=True) and sum(shares) <= 101
        # bfloat16, but for the float32 logits' matmul
        assert (s["matmul_conv_16bit_share"] > 0.9) if amp else s["matmul_conv_16bit_share"] == 0
        assert os.path.dirname(s["op_table"]) == os.path.dirname(_trace(out))
        rows = op_table.read(s["op_table"])
        assert [r["self_us"] for r in rows] == sorted((r["self_us"] for r in rows), reverse=True)
        assert sum(float(r["share"]) for r in rows) == pytest.approx(1, abs=0.01)
        assert sum(r["ms_per_step"] for r in rows) == pytest.approx(
            s["op_seconds"] * 1000 / 2, rel=0.02)
        convs = [r for r in rows if "Conv2D" in r["op_type"]]
        assert len(convs) >= 17 and all(r["where"] == "host" for r in convs)
        assert {r["dtype"] for r in convs} == {"bfloat16" if amp else "float32"}
        casts = {r["dtype"] for r in rows if r["op_type"] == "Cast"}
        assert ("float32->bfloat16" in casts) if amp else not any("16" in c for c in casts)
    capsys.readouterr()
    code = profile_diff.main([str(tmp_path / "fp32"), str(tmp_path / "amp")])
    page = capsys.readouterr().out
    assert code == 0 and page.startswith("A: FP32 (fp32)\nB: AMP (bfloat16) (amp)\n")
    lines = [ln for ln in page.splitlines() if ln.startswith("| ") and "**" not in ln][2:]
    deltas = [float(ln.rsplit("|", 2)[1]) for ln in lines if "more |" not in ln]
    assert deltas == sorted(deltas, reverse=True) and "| **all ops** |" in page
    assert "B loses most in: " in page or "B gains " in page


@pytest.mark.both_stacks
def test_amp_lists_finds_the_ssd_feature_pyramid_and_only_it_in_float32(tmp_path, capsys,
                                                                      shapes_records):
    """The op-level listing: under AMP (bfloat16) every convolution SSD320 runs, forward
    and backward, is bfloat16 but the feature pyramid's, which the rewrite NVIDIA's TF1 scripts
    used would run in 16 bits; the only deny-list ops in 16 bits are the bias gradients' Sum
    (common/layers/bias.py), which the rewrite would keep in float32."""
    out = tmp_path / "amp"
    s = runner.run(SSDTask, ["main.py", *TINY, "--data_dir", shapes_records, "--mode",
                             "training_benchmark", *BENCH, "--profile", "2:3", "--amp",
                             "--results_dir", str(out)])
    assert s["precision"] == "mixed_bfloat16"
    label, rows, _ = profile_diff.load(str(out))
    table = amp_lists.tabulate(rows)
    # Ops TensorFlow names outside a layer's scope (gradients: "MatMul_4", "Sum_9") carry no
    # layer, and the graph's nodes of one bare name may differ in type: only named ones count.
    def named(found):
        return {r["op_name"] for r in found if "/" in r["op_name"]}
    convs = [r for r in rows if amp_lists.rewrite_list(r["op_type"]) == "allow"]
    fpn = {r["op_name"] for r in convs if "/fpn_" in r["op_name"]}
    assert named(table["allow_in_float32"]) == fpn
    # The table holds xprof's 500 ops of most time: the pyramid's smallest convolutions (P7's,
    # 1x1 at this size) may fall below its cut from one run to the next, its laterals do not.
    layers = {n.split("/fpn_")[1].split("/")[0] for n in fpn}
    assert len(fpn) >= 6 and {"lateral_p3_1", "lateral_p4_1"} <= layers, layers
    others = named(convs) - fpn
    assert len(others) > 50 and all(r["dtype"] == "bfloat16" for r in convs
                                    if r["op_name"] in others)
    assert {amp_lists.base_type(r["op_type"]) for r in table["deny_in_16bit"]} <= {"Sum"}
    capsys.readouterr()
    assert amp_lists.main([str(out), "--show", "3"]) == 0
    page = capsys.readouterr().out
    allow, deny = len(table["allow_in_float32"]), len(table["deny_in_16bit"])
    assert page.startswith("AMP (bfloat16) (amp)\n") and "| Conv2D | allow | " in page
    assert f"{allow} allow-list ops in float32 here" in page and f"  ... {allow - 3} more" \
        in page and f"{deny} deny-list ops in 16 bits here" in page


def test_amp_lists_reads_onednn_and_fused_names_as_the_op_they_compute():
    for name, base, listed in [("_MklNativeConv2D", "Conv2D", "allow"),
                               ("_MklNativeFusedConv2D", "Conv2D", "allow"),
                               ("_FusedMatMul", "MatMul", "allow"),
                               ("_MklMatMul", "MatMul", "allow"),
                               ("_MklNativeConv2DBackpropFilterWithBias", "Conv2DBackpropFilter",
                                "allow"),
                               ("_MklNativeFusedBatchNormV3", "FusedBatchNormV3", "infer"),
                               ("_FusedBatchNormEx", "FusedBatchNormV3", "infer"),
                               ("Sum", "Sum", "deny"), ("_MklNativeMaxPool", "MaxPool", "clear"),
                               ("Cast", "Cast", "none"), ("DivNoNan", "DivNoNan", "none")]:
        assert (amp_lists.base_type(name), amp_lists.rewrite_list(name)) == (base, listed), name
    rows = [{"op_type": t, "op_name": n, "dtype": d, "ms_per_step": ms} for t, n, d, ms in [
        ("_MklNativeConv2D", "a/conv", "float16", 4.0), ("Sum", "loss/Sum", "bfloat16", 1.0),
        ("Exp", "loss/Exp", "float32", 0.5), ("Mul", "loss/mul", "float32", 2.0),
        ("Cast", "c", "float32->bfloat16", 0.25), ("(other ops)", "(past)", "", 9.0)]]
    table = amp_lists.tabulate(rows)
    assert [r["op_name"] for r in table["deny_in_16bit"]] == ["loss/Sum"]
    assert table["allow_in_float32"] == [] and "(other ops)" not in table["types"]
    page = amp_lists.render("run", table)
    assert "5.00 of 7.75 ms/step of op time in 16-bit ops (65%)" in page
    assert "| Sum | deny | 1.00 (1) | - | - |" in page and "| Cast | none | - | - | 0.25 (1) |" \
        in page
    assert "1 deny-list ops in 16 bits here (the rewrite keeps them in float32): 1.00 ms/step:\n" \
        "  loss/Sum (Sum, bfloat16) 1.00" in page
    assert page.endswith("where their inputs are): Mul")


@OWN_HANDLING
def test_profile_diff_refuses_a_run_without_a_table_with_one_line(tmp_path, capsys):
    assert profile_diff.main([str(tmp_path), str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"profile_diff: error: {tmp_path}: no per-op table (ops.csv): run main.py "
                   "with --profile START:STOP first"]


def test_training_loop_and_inference_benchmark_profile(tmp_path, corpus):
    s = runner.run(TransformerXLTask, ["main.py", *TINY, "--seed", "3",
                                       "--data_dir", corpus, "--mode", "train", *BENCH,
                                       "--display_every", "10", "--profile", "2:2", "--amp",
                                       "--results_dir", str(tmp_path / "train")])
    assert s["profiled_steps"] == 1 and s["final_step"] == 4  # a sync point at step 2 only
    assert s["matmul_conv_share"] > 0.1 and s["matmul_conv_16bit_share"] > 0.5
    s = runner.run(TransformerXLTask, ["main.py", *TINY, "--seed", "3",
                                       "--data_dir", corpus, "--mode", "inference_benchmark",
                                       *BENCH, "--profile", "3:9", "--results_dir",
                                       str(tmp_path / "infer")])
    assert s["profiled_steps"] == 2  # a range past the end stops with the run
    assert s["matmul_conv_share"] > 0.1 and s["matmul_conv_16bit_share"] == 0


@OWN_HANDLING
@pytest.mark.parametrize("spec", ["3", "0:2", "5:4", "a:b"])
def test_a_malformed_range_is_one_line(tmp_path, spec):
    with pytest.raises(runner.UsageError, match=f"--profile {spec}: give START:STOP"):
        runner.run(ResNetTask, ["main.py", *TINY, "--mode", "training_benchmark", *BENCH,
                                "--profile", spec, "--results_dir", str(tmp_path)])


@OWN_HANDLING
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


@OWN_HANDLING
def test_gpu_op_table_says_which_eligible_ops_missed_tensor_cores(tmp_path):
    """A hand-made GPU trace through xprof's own converters: kernels with their op (``tf_op``)
    and launch details, as CUPTI records them. xprof's own "uses TensorCore" test misses
    Ampere's ``sm80_xmma`` kernels; the table counts them."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2
    kernels = [  # kernel, op, microseconds
        ("sm80_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x32",
         "model/conv1/Conv2D:Conv2D", 40),
        ("ampere_sgemm_128x64_nn", "model/dense/MatMul:MatMul", 10),  # float32: no tensor cores
        ("void Eigen::internal::EigenMetaKernel<Eigen::TensorEvaluator<float>>",
         "model/relu:Relu", 20)]
    space = xplane_pb2.XSpace()
    plane = space.planes.add(name="/device:GPU:0", id=1)
    stat_ids = {"tf_op": 1, "kernel_details": 2, "correlation_id": 3}
    for name, i in stat_ids.items():
        plane.stat_metadata[i].id, plane.stat_metadata[i].name = i, name
    line = plane.lines.add(id=1, name="Stream #14(Compute)", timestamp_ns=1000)
    t = 0
    for i, (kernel, op, us) in enumerate(kernels, 1):
        plane.event_metadata[i].id, plane.event_metadata[i].name = i, kernel
        event = line.events.add(metadata_id=i, offset_ps=t, duration_ps=us * 1_000_000)
        t += (us + 1) * 1_000_000
        event.stats.add(metadata_id=1, str_value=op)
        event.stats.add(metadata_id=2, str_value="regs:32 static_shared:0 dynamic_shared:0 "
                                                 "grid:1,1,1 block:128,1,1 occ_pct:50")
        event.stats.add(metadata_id=3, uint64_value=i)
    path = tmp_path / "gpu.xplane.pb"
    path.write_bytes(space.SerializeToString())
    rows = op_table.from_trace(str(path), 2, {"model/conv1/Conv2D": "float16"},
                               profiling.TENSOR_CORE.search)
    by_name = {r["op_name"]: r for r in rows}
    assert [r["op_name"] for r in rows] == ["model/conv1/Conv2D", "model/relu",
                                            "model/dense/MatMul"]
    conv, dense, relu = (by_name[f"model/{n}"] for n in ("conv1/Conv2D", "dense/MatMul", "relu"))
    assert conv["where"] == "device" and conv["ms_per_step"] == pytest.approx(0.02)
    assert conv["share"] == pytest.approx(40 / 70, abs=1e-3) and conv["dtype"] == "float16"
    assert (conv["tensor_core_eligible"], conv["tensor_core_share"]) == ("yes", 1.0)
    assert (dense["tensor_core_eligible"], dense["tensor_core_share"]) == ("yes", 0.0)
    assert relu["tensor_core_eligible"] == "no"
    assert op_table.missed_tensor_cores(rows) == "model/dense/MatMul (0.01 ms/step)"


@OWN_HANDLING
def test_a_range_a_resumed_run_has_passed_is_said_and_nothing_is_profiled(tmp_path, capsys):
    args = ["main.py", *TINY, "--mode", "train", "--iter_unit", "batch", "--results_dir",
            str(tmp_path)]
    runner.run(ResNetTask, [*args, "--num_iter", "3"])
    s = runner.run(ResNetTask, [*args, "--num_iter", "5", "--profile", "1:2"])
    assert s["final_step"] == 5 and "profiled_steps" not in s
    assert ("profile: steps 1:2 come before this run's first step, 4 (it resumes a run): "
            "nothing is profiled") in capsys.readouterr().out
    assert not glob.glob(str(tmp_path / "tensorboard" / "plugins" / "profile" / "*"))


@OWN_HANDLING
def test_ranges_past_the_end_or_cut_by_a_resume_say_what_is_profiled(tmp_path, capsys):
    args = ["main.py", *TINY, "--mode", "train", "--iter_unit", "batch", "--results_dir",
            str(tmp_path)]
    s = runner.run(ResNetTask, [*args, "--num_iter", "3", "--profile", "5:6"])
    assert "profiled_steps" not in s
    assert ("profile: steps 5:6 come after this run's last step, 3: nothing is profiled"
            in capsys.readouterr().out)
    s = runner.run(ResNetTask, [*args, "--num_iter", "5", "--profile", "2:4"])  # resumes at 4
    out = capsys.readouterr().out
    assert s["profiled_step_range"] == "4:4" and s["profiled_steps"] == 1
    assert "profile of steps 4:4: " in out


@OWN_HANDLING
@pytest.mark.parametrize("mode", ["evaluate", "predict"])
def test_profile_of_a_mode_without_steps_is_refused(tmp_path, capsys, mode, digits_records):
    code = runner.main(ResNetTask, ["main.py", *TINY, "--mode", mode, "--profile", "1:2",
                                    "--data_dir", digits_records, "--to_predict", "x",
                                    "--results_dir", str(tmp_path)])
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"main.py: error: --profile traces training or benchmark steps; --mode {mode} has none: "
        "profile --mode inference_benchmark instead")
