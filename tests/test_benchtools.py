"""The benchmark scripts' FLOP count: the graph count that compares our models with their peers
agrees with the layer count, and counts matmuls with their transposes and nested functions.
benchtools.onednn: oneDNN's verbose log summed by primitive and direction, steps found."""
import json
import os

import keras
import pytest
import tensorflow as tf
from conftest import ROOT, TINY

from benchtools import onednn
from common.tools.mfu import forward_flops, graph_flops
from rn50.model import build_resnet
from ssd.model import build_ssd


@pytest.mark.parametrize("build, shape", [
    (lambda: build_resnet("resnet_tiny", 10, 64), (1, 64, 64, 3)),
    (lambda: build_ssd("resnet_tiny", 4, 128), (1, 128, 128, 3)),
])
def test_graph_count_equals_the_layer_count(build, shape):
    model = build()
    assert graph_flops(lambda x: model(x, training=False), tf.TensorSpec(shape)) == \
        forward_flops(model) > 0


def test_graph_count_reads_transposes_batches_and_nested_functions():
    @tf.function
    def inner(a, b):
        return tf.matmul(a, b, transpose_a=True)  # (5, 3)^T (5, 4): 2 * 3 * 4 * 5

    def fn(a, b, x, y):
        return inner(a, b), tf.linalg.matmul(x, y, adjoint_b=True)  # 7 x (2, 6) (8, 6)^T

    specs = [tf.TensorSpec(s) for s in ((5, 3), (5, 4), (7, 2, 6), (7, 8, 6))]
    assert graph_flops(fn, *specs) == 2 * 3 * 4 * 5 + 7 * 2 * 2 * 8 * 6


def test_graph_count_refuses_dynamic_shapes():
    dense = keras.layers.Dense(3)
    with pytest.raises(ValueError, match="dynamic shape"):
        graph_flops(lambda x: dense(x), tf.TensorSpec((None, 4)))


def _exec(kind, impl, prop, mds, desc, ms):
    return (f"onednn_verbose,v1,primitive,exec,cpu,{kind},{impl},{prop},{mds},"
            f"attr-scratchpad:user,,{desc},{ms}\n")


_CONV = "mb16_ic64oc64_ih56oh56kh3sh1dh0ph1_iw56ow56kw3sw1dw0pw1"
_STEP = [  # one step: a weight reorder, a 3x3 convolution forward and its weight gradient, a matmul
    _exec("reorder", "jit:uni", "undef", "src:f32::blocked:cdba::f0 dst:f32::blocked:Acdb64a::f0",
          "64x64x3x3", 0.5),
    _exec("convolution", "brg_conv_fwd:avx512_core", "forward_training",
          "src:f32::blocked:acdb::f0", _CONV, 4.0),
    _exec("reorder", "jit:uni", "undef", "src:f32::blocked:cdba::f0 dst:f32::blocked:Bcda64b::f0",
          "64x64x3x3", 0.5),  # same problem, other format: not a step start
    _exec("convolution", "jit:avx512_core", "backward_weights", "src:f32::blocked:acdb::f0",
          _CONV, 8.0),
    _exec("matmul", "brg_matmul:avx512_core", "undef", "src:f32::blocked:abc::f0",
          "4x128x256:4x256x512", 1.0),
]


def test_onednn_summary_of_a_log(tmp_path, capsys):
    log = tmp_path / "verbose.log"
    log.write_text("I0000 an unrelated line\n" + "onednn_verbose,v1,info,cpu,isa:avx512\n"
                   + "".join(_STEP) * 3 + "onednn_verbose,v1,primitive,exec,cpu,reorder,bad\n")
    conv = 2 * 16 * 64 * 64 * 56 * 56 * 9  # FLOPs of the 3x3 convolution
    assert onednn.conv_flops(_STEP[1].split(",")[-2]) == conv
    assert onednn.matmul_flops("4x128x256:4x256x512") == 2 * 4 * 128 * 256 * 512
    assert onednn.inner_product_flops("mb16ic2048oc1000") == 2 * 16 * 2048 * 1000
    assert onednn.conv_flops("g32mb2_ic64oc64_ih8oh8kh3sh1dh0ph1") == 2 * 2 * 64 * 2 * 64 * 9

    out = tmp_path / "s.json"
    assert onednn.main(["--log", str(log), "--skip_steps", "1", "--json", str(out)]) == 0
    s = json.loads(out.read_text())
    assert (s["steps"], s["skipped_steps"], s["total_ms"]) == (3, 1, 2 * 14.0)
    rows = {(r["kind"], r["prop"]): r for r in s["by_direction"]}
    assert rows[("convolution", "backward_weights")]["count"] == 2
    assert rows[("convolution", "backward_weights")]["share"] == pytest.approx(16 / 28)
    assert rows[("convolution", "forward_training")]["gflops"] == pytest.approx(conv / 4e-3 / 1e9)
    assert rows[("matmul", "undef")]["gflops"] == pytest.approx(2 * 4 * 128 * 256 * 512 / 1e6)
    assert rows[("reorder", "undef")]["gflops"] is None and rows[("reorder", "undef")]["count"] == 4
    assert [r["kind"] for r in s["by_direction"]][0] == "convolution"  # longest first
    odd = onednn.summarise([{"kind": "matmul", "prop": "undef", "desc": "an unknown layout",
                             "impl": "x", "ms": 1.0}])
    assert odd["by_direction"][0]["gflops"] is None  # left blank, not guessed
    assert "| convolution | backward_weights | 2 | 16 | 57.1% |" in capsys.readouterr().out


def test_onednn_refuses_what_it_cannot_summarise(tmp_path):
    log = tmp_path / "verbose.log"
    log.write_text("".join(_STEP) * 2)
    with pytest.raises(SystemExit, match="the log has 2 steps; cannot skip 2"):
        onednn.main(["--log", str(log), "--skip_steps", "2"])
    empty = tmp_path / "empty.log"
    empty.write_text("no verbose lines\n")
    with pytest.raises(SystemExit, match="no oneDNN executions"):
        onednn.main(["--log", str(empty)])
    with pytest.raises(SystemExit):  # neither a log nor a command
        onednn.main([])


def test_onednn_run_counts_every_convolution_of_a_step(tmp_path):
    """End to end on the tiny ResNet: the run's oneDNN kernels, and steps found right (17
    convolutions per step: the stem and four blocks of three plus a projection)."""
    out = tmp_path / "s.json"
    main_py = os.path.join(ROOT, "resnet50v1.5", "main.py")
    onednn.main(["--skip_steps", "1", "--json", str(out), "--", main_py, *TINY,
                 "--mode", "training_benchmark", "--iter_unit", "batch", "--num_iter", "3",
                 "--warmup_steps", "1", "--results_dir", str(tmp_path / "run")])
    s = json.loads(out.read_text())
    rows = {(r["kind"], r["prop"]): r for r in s["by_direction"]}
    if not any(kind == "convolution" for kind, _ in rows):
        # TensorFlow runs convolutions through oneDNN's convolution primitives where the CPU
        # has AVX-512; on an AVX2-only one, as im2col and oneDNN's gemm, which the verbose log
        # does not tie to a convolution or a step.
        pytest.skip(f"no oneDNN convolution primitive on this CPU (it ran {sorted(rows)})")
    assert s["steps"] == 3
    assert rows[("convolution", "forward_training")]["count"] == 17 * 2
    assert rows[("convolution", "backward_weights")]["count"] == 17 * 2
    assert rows[("convolution", "backward_data")]["count"] == 16 * 2  # not the stem's input
    assert all(rows[("convolution", p)]["gflops"] > 0
               for p in ("forward_training", "backward_weights", "backward_data"))


def test_a_failed_run_is_told_by_its_last_error_line_or_its_exit_code():
    import subprocess
    import sys

    from benchtools import failure
    loud = subprocess.run([sys.executable, "-c", "import sys; print('noise', file=sys.stderr); "
                           "print('main.py: --batch_size must be positive', file=sys.stderr); "
                           "print(file=sys.stderr); sys.exit(2)"], stderr=subprocess.PIPE,
                          text=True)
    assert failure(loud) == "main.py: --batch_size must be positive"
    quiet = subprocess.run([sys.executable, "-c", "raise SystemExit(3)"], stderr=subprocess.PIPE,
                           text=True)
    assert failure(quiet) == "exit code 3"


def test_the_export_memory_is_the_trees_peak_with_each_processs_own(tmp_path):
    """benchtools.export_memory samples the whole process tree: a parent holding 100 MB that
    starts a child holding 300 MB (as main.py starts tf2onnx) peaks at their sum together,
    each process's own peak named by its command."""
    import sys

    from benchtools import export_memory
    child = "import time; b = bytearray(300 << 20); b[::4096] = b'x' * len(b[::4096]); " \
            "time.sleep(1.5)"
    parent = ("import subprocess, sys; b = bytearray(100 << 20); "
              "b[::4096] = b'x' * len(b[::4096]); "
              f"subprocess.run([sys.executable, '-c', {child!r}], check=True)")
    out = tmp_path / "memory.json"
    assert export_memory.main(["--out", str(out), "--", sys.executable, "-c", parent]) == 0
    result = json.loads(out.read_text())
    assert result["exit_code"] == 0 and result["packages"]["tensorflow"] == tf.__version__
    assert 0.38 <= result["tree_peak_rss_gib"] <= 0.6, result
    child_peak, parent_peak = result["processes"]  # the largest first
    assert child_peak["command"].startswith(f"{sys.executable} -c import time"), child_peak
    assert 0.29 <= child_peak["hwm_gib"] <= 0.4 and 0.09 <= parent_peak["hwm_gib"] <= 0.2, \
        result["processes"]
