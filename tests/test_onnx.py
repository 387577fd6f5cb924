"""--export_onnx: every model's ONNX export gives its SavedModel's outputs under ONNX Runtime
(CPU): ResNet logits, SSD's post-NMS detections (NMS included in the graph), Transformer-XL's
log-probabilities and new memory. An AMP run exports a float32 graph of its weights."""
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tensorflow as tf
from conftest import ROOT, TINY, distinct_ssd_scores, load_script, same_detections

from common import runner
from rn50.task import ResNetTask
from ssd.task import SSDTask
from txl.task import TransformerXLTask

BENCH = ["--mode", "inference_benchmark", "--iter_unit", "batch", "--num_iter", "2",
         "--warmup_steps", "1", "--seed", "5"]


def _compare(export_dir, feeds, signature="serving_default", onnx_file="model.onnx"):
    """(SavedModel outputs, ONNX Runtime outputs) by name for the same inputs."""
    saved = tf.saved_model.load(str(export_dir)).signatures[signature]
    want = {k: v.numpy() for k, v in saved(**{k: tf.constant(v) for k, v in feeds.items()}).items()}
    session = ort.InferenceSession(str(export_dir / onnx_file),
                                   providers=["CPUExecutionProvider"])
    assert sorted(i.name for i in session.get_inputs()) == sorted(feeds)
    names = [o.name for o in session.get_outputs()]
    got = dict(zip(names, session.run(None, feeds)))
    assert sorted(got) == sorted(want)
    return want, got


# Model Optimizer quantizes in an environment of its own (scripts/modelopt_env.sh), the same
# whichever stack trains: its runs are the pip suite's; the float ONNX it starts from is
# converted and checked on both stacks.
MODELOPT = pytest.mark.one_stack(
    "pip", "Model Optimizer runs in its own environment, the same for both stacks; the float "
    "ONNX it quantizes is converted and checked on both")
INT8_HERE = os.environ.get("TEST_STACK", "pip") != "ngc"


@pytest.mark.parametrize("amp", [pytest.param(False, marks=pytest.mark.both_stacks), True])
def test_resnet_onnx_gives_the_savedmodel_logits(tmp_path, amp):
    out = tmp_path / "export"
    runner.run(ResNetTask, ["main.py", *TINY, *BENCH, "--results_dir", str(tmp_path),
                            "--export_dir", str(out), "--export_onnx"] + (["--amp"] if amp else []))
    images = np.random.RandomState(0).randn(3, 32, 32, 3).astype(np.float32)
    want, got = _compare(out, {"images": images}, "preprocessed")
    assert sorted(got) == ["classes", "logits", "probabilities"]
    assert got["logits"].dtype == np.float32 and got["classes"].dtype == np.int32
    # Under AMP the SavedModel computes in bfloat16, the ONNX graph in float32.
    np.testing.assert_allclose(got["logits"], want["logits"], atol=0.05 if amp else 1e-4)
    np.testing.assert_array_equal(got["classes"], np.argmax(got["logits"], -1))
    import onnx
    graph = onnx.load(str(out / "model.onnx")).graph
    # No host path in the file (tf2onnx wrote "converted from" the export's staging folder).
    assert graph.doc_string == "the SavedModel's preprocessed signature, converted by tf2onnx"
    if not amp:
        return
    assert not [n for n in graph.node if n.op_type == "Cast"
                and any(a.i == onnx.TensorProto.BFLOAT16 for a in n.attribute)]


# `make test-slow` (the suite's time budget): SSD320's ONNX is written by the serving tests' shared
# export; its detections through ONNX Runtime.
@pytest.mark.slow
def test_ssd_onnx_gives_the_detections_and_what_nms_takes(tmp_path, shapes_records):
    trainer = runner.setup(SSDTask, ["main.py", "--arch", "resnet_tiny", "--image_size", "128",
                                     "--batch_size", "2", *BENCH, "--results_dir", str(tmp_path),
                                     "--export_dir", str(tmp_path / "export"), "--export_onnx",
                                     "--data_dir", shapes_records,
                                     *(["--export_onnx_int8", "--calibration_images", "8"]
                                       if INT8_HERE else [])])
    trainer.log.close()
    images = np.random.RandomState(0).randn(2, 128, 128, 3).astype(np.float32)
    distinct_ssd_scores(trainer.model, images)
    trainer.export(str(tmp_path / "export"))
    want, got = _compare(tmp_path / "export", {"images": images}, "preprocessed")
    assert sorted(want) == ["detection_boxes", "detection_classes", "detection_scores",
                            "num_detections"]
    np.testing.assert_array_equal(got["num_detections"], want["num_detections"])
    assert want["num_detections"].min() > 0
    same_detections(got, want)
    # The graph before NMS, for TensorRT's EfficientNMS plugin: every anchor's box and scores.
    want, got = _compare(tmp_path / "export", {"images": images}, "decoded",
                         "model_before_nms.onnx")
    assert got["decoded_boxes"].shape == (2, len(trainer.task.anchors), 4)
    classes = trainer.flags.num_classes  # from the shapes' label_map.json
    assert got["class_scores"].shape == (2, len(trainer.task.anchors), classes)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], atol=1e-5)
    # Both, in INT8 (explicit Q/DQ; Model Optimizer's runs are the pip suite's: MODELOPT), and
    # TensorRT's EfficientNMS on the graph before NMS.
    names = ["model_before_nms.onnx"]
    if INT8_HERE:
        _check_int8(tmp_path / "export" / "model_int8.onnx", {"images": images},
                    "detection_boxes")
        names.append("model_before_nms_int8.onnx")
    for name in names:
        _check_efficient_nms(tmp_path / "export" / name, tmp_path / f"nms-{name}")


def _check_efficient_nms(src, dst):
    import onnx
    nms = load_script("ssd320", "attach_efficient_nms")
    assert nms.main([str(src), str(dst)]) == 0
    model = onnx.load(str(dst))
    onnx.checker.check_model(model, full_check=False)
    node = next(n for n in model.graph.node if n.op_type == "EfficientNMS_TRT")
    assert node.domain == "trt.plugins"
    # The plugin's class index + 1, as float32: the SavedModel's category ids (TF-OD's type).
    made = {o: n for n in model.graph.node for o in n.output}
    cast = made["detection_classes"]
    assert cast.op_type == "Cast" and made[cast.input[0]].op_type == "Add"
    assert list(made[made[cast.input[0]].input[0]].input) == list(node.input)
    assert made[made["num_detections"].input[0]].op_type == "EfficientNMS_TRT"
    assert list(node.input) == ["decoded_boxes", "class_scores"]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert attrs == {"plugin_version": b"1", "background_class": -1, "max_output_boxes": 100,
                     "score_threshold": pytest.approx(1e-8), "iou_threshold": pytest.approx(0.6),
                     "score_activation": 0, "class_agnostic": 0, "box_coding": 0}
    shapes = {o.name: ([d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim],
                       o.type.tensor_type.elem_type) for o in model.graph.output}
    batch = shapes["num_detections"][0][0]
    f32 = onnx.TensorProto.FLOAT
    assert shapes == {"num_detections": ([batch, 1], f32),
                      "detection_boxes": ([batch, 100, 4], f32),
                      "detection_scores": ([batch, 100], f32),
                      "detection_classes": ([batch, 100], f32)}
    assert isinstance(batch, str)  # any batch size
    assert {"trt.plugins"} <= {o.domain for o in model.opset_import}


def _check_int8(path, feeds, output):
    """An INT8 ONNX as TensorRT's explicit quantization takes it, Q/DQ placed by NVIDIA Model
    Optimizer: INT8 zero points of 0 (symmetric); a quantized convolution's input and weight
    both dequantized, the weight per output channel; residual additions' inputs quantized too
    (TensorRT fuses the addition into the convolution); no float16 left in the graph (what is
    not quantized stays float32); ONNX Runtime runs it."""
    import onnx
    from onnx import numpy_helper
    model = onnx.load(str(path))
    graph = model.graph
    init = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    made_by = {o: n for n in graph.node for o in n.output}
    qdq = [n for n in graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    assert len(qdq) > 10
    for n in qdq:
        zero = init[n.input[2]]
        assert zero.dtype == np.int8 and not zero.any()

    def dequantized(name):
        return name in made_by and made_by[name].op_type == "DequantizeLinear"
    quantized = [n for n in graph.node if n.op_type == "Conv" and dequantized(n.input[1])]
    assert quantized
    for conv in quantized:
        assert dequantized(conv.input[0])
        weight_dq = made_by[conv.input[1]]
        weight = made_by[weight_dq.input[0]]  # QuantizeLinear of the float32 weight
        channels = init[weight.input[0]].shape[0]
        assert init[weight_dq.input[1]].shape == (channels,)  # a scale per output channel
    assert any(n.op_type == "Add" and any(dequantized(i) for i in n.input) for n in graph.node)
    float16 = onnx.TensorProto.FLOAT16
    assert not [t for t in [*graph.value_info, *graph.output]
                if t.type.tensor_type.elem_type == float16]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert session.run([output], feeds)[0].dtype == np.float32


def test_txl_onnx_keeps_its_memory_as_tritons_implicit_state_feeds_it_back(tmp_path, corpus):
    """``model.onnx`` (the ``step`` signature) chained through ONNX Runtime as Triton's implicit
    state feeds it (zeros to start, each ``new_memory`` and ``new_memory_length`` fed back:
    triton/'s GPU models) answers what the SavedModel's ``score`` and ``serving_default``
    answer chained with the memory the Python backend keeps (growing up to the served length:
    cpu/'s model), past the point where the memory is full; without ``targets`` (generation),
    the same log-probabilities."""
    out = tmp_path / "export"
    runner.run(TransformerXLTask, ["main.py", *TINY, "--data_dir", corpus, *BENCH,
                                   "--results_dir", str(tmp_path), "--export_dir", str(out),
                                   "--export_onnx"])
    info = json.loads((out / "assets" / "client.json").read_text())
    layers, d_model, mem_len, vocab = (info[k] for k in ("n_layer", "d_model", "mem_len",
                                                         "vocab_size"))
    saved = tf.saved_model.load(str(out)).signatures
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    assert sorted(i.name for i in session.get_inputs()) == ["memory", "memory_length", "tokens"]
    assert [i.name for i in session.get_overridable_initializers()] == ["targets"]  # optional
    rng = np.random.RandomState(0)
    mems = np.zeros((layers, 2, 0, d_model), np.float32)  # the start memory cpu/ keeps
    state = {"memory": np.zeros((2, layers, mem_len, d_model), np.float32),
             "memory_length": np.zeros((2, 1), np.int32)}
    total = 0
    for q in (5, 1, 9, mem_len, 3):
        tokens = rng.randint(0, vocab, (2, q)).astype(np.int32)
        targets = rng.randint(0, vocab, (2, q)).astype(np.int32)
        score = saved["score"](tokens=tokens, targets=targets, mems=mems)
        want_logp = saved["serving_default"](tokens=tokens, mems=mems)["log_probs"].numpy()
        got = dict(zip([o.name for o in session.get_outputs()],
                       session.run(None, {"tokens": tokens, "targets": targets, **state})))
        np.testing.assert_allclose(got["nll"], score["nll"].numpy(), atol=1e-4)
        np.testing.assert_allclose(got["log_probs"], want_logp, atol=1e-4)
        (alone,) = session.run(["log_probs"], {"tokens": tokens, **state})  # no targets
        np.testing.assert_allclose(alone, got["log_probs"], atol=1e-6)
        total += q
        assert got["new_memory_length"].tolist() == [[min(total, mem_len)]] * 2
        state = {"memory": got["new_memory"], "memory_length": got["new_memory_length"]}
        mems = score["new_mems"].numpy()
    assert total > mem_len and mems.shape[2] == mem_len  # the memory was full before the end


@MODELOPT
def test_resnet_int8_onnx_is_calibrated_on_training_images(tmp_path, digits_records, capsys,
                                                           monkeypatch):
    """Calibrated on training images prepared by the weights' own recipe: here torchvision's
    IMAGENET1K_V1, which import_weights.py records for torchvision's weights (the calibration
    prepared NVIDIA's way whatever the recipe was)."""
    from common.export import onnx_int8
    from rn50 import eval_preprocessing, tfdata_pipeline
    torchvision = eval_preprocessing.torchvision("V1")
    calibrated = []
    quantize = onnx_int8.quantize
    monkeypatch.setattr(onnx_int8, "quantize", lambda src, dst, images, *a, **k: (
        calibrated.append(images), quantize(src, dst, images, *a, **k))[1])
    out = tmp_path / "export"
    runner.run(ResNetTask, ["main.py", *TINY, *BENCH, "--results_dir", str(tmp_path),
                            "--data_dir", digits_records, "--export_dir", str(out),
                            "--export_onnx_int8", "--calibration_images", "20",
                            "--eval_preprocessing", torchvision.spec()])
    assert ("INT8 by NVIDIA Model Optimizer, calibrated on 20 training images (max)"
            in capsys.readouterr().out)
    assert (out / "model.onnx").exists()  # the float32 graph it comes from
    train = sorted(str(p) for p in Path(digits_records).glob("train-*"))
    first = [next(iter(tfdata_pipeline.dataset(train, 20, 32, False, num_classes=10,
                                               prep=prep)))[0].numpy()
             for prep in (eval_preprocessing.parse(torchvision.spec(), 32),
                          eval_preprocessing.nvidia(32))]
    assert len(calibrated) == 1 and calibrated[0].shape == (20, 32, 32, 3)
    np.testing.assert_allclose(calibrated[0], first[0], atol=1e-5)
    assert np.abs(calibrated[0] - first[1]).max() > 0.1  # not NVIDIA's preparation
    # Held-out images as evaluation prepares them: what the ranges were calibrated for.
    shards = sorted(str(p) for p in Path(digits_records).glob("validation-*"))
    images = next(iter(tfdata_pipeline.dataset(shards, 12, 32, False, num_classes=10,
                                               prep=torchvision)))[0]
    images = images.numpy()
    _check_int8(out / "model_int8.onnx", {"images": images}, "logits")
    float32, int8 = (ort.InferenceSession(str(out / name)).run(["logits"], {"images": images})[0]
                     for name in ("model.onnx", "model_int8.onnx"))
    # An untrained network: the residual additions' two branches differ in scale by orders of
    # magnitude, and Model Optimizer quantizes both inputs (TensorRT's placement), so the bound
    # is loose; what INT8 costs a trained model is measured in the README (benchtools).
    assert np.abs(int8 - float32).max() < 0.5 * np.abs(float32).max()


@pytest.mark.parametrize("task,args,message", [
    (ResNetTask, [*TINY], "--export_onnx_int8 calibrates on training images: give --data_dir"),
    (TransformerXLTask, [*TINY], "--export_onnx_int8: transformerxl's ONNX is not "
     "calibrated for INT8 (the image models are: ResNet-50, SSD320)")])
def test_int8_export_is_refused_where_it_cannot_calibrate(tmp_path, task, args, message):
    with pytest.raises(runner.UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        runner.run(task, ["main.py", *args, *BENCH, "--results_dir", str(tmp_path),
                          "--export_dir", str(tmp_path / "e"), "--export_onnx_int8"])


def test_export_onnx_needs_export_dir(tmp_path):
    with pytest.raises(runner.UsageError, match="--export_onnx writes model.onnx into "
                                                "--export_dir"):
        runner.run(ResNetTask, ["main.py", *TINY, *BENCH, "--results_dir", str(tmp_path),
                                "--export_onnx"])


def test_int8_without_model_optimizer_is_refused_at_start_with_the_fix(tmp_path, digits_records,
                                                                      monkeypatch):
    """A python that lacks Model Optimizer (MODELOPT_PYTHON names this one, which has no
    PyTorch) stops the run before training, with one line naming the fix."""
    import sys
    monkeypatch.setenv("MODELOPT_PYTHON", sys.executable)
    with pytest.raises(runner.UsageError, match=(
            f"--export_onnx_int8: MODELOPT_PYTHON={sys.executable} cannot import "
            r"modelopt.onnx.quantization \(pip install 'nvidia-modelopt\[onnx\]' there, or "
            r"unset it\)")):
        runner.run(ResNetTask, ["main.py", *TINY, *BENCH, "--results_dir", str(tmp_path),
                                "--data_dir", digits_records, "--export_dir",
                                str(tmp_path / "e"), "--export_onnx_int8"])
    assert not (tmp_path / "e").exists() and not (tmp_path / "log.json").exists()


@pytest.mark.parametrize("where", ["missing", "a directory"])
def test_a_model_optimizer_python_that_is_no_program_is_one_line(tmp_path, digits_records,
                                                                monkeypatch, where):
    python = tmp_path / "venv" / "bin" / "python"
    if where == "a directory":
        python.mkdir(parents=True)
    monkeypatch.setenv("MODELOPT_PYTHON", str(python))
    what = "not there" if where == "missing" else "a directory"
    with pytest.raises(runner.UsageError, match=(
            f"--export_onnx_int8: MODELOPT_PYTHON={python} is {what}: set it to a python with "
            r"nvidia-modelopt\[onnx\] \(its bin/python\), or unset it")):
        runner.run(ResNetTask, ["main.py", *TINY, *BENCH, "--results_dir", str(tmp_path),
                                "--data_dir", digits_records, "--export_dir",
                                str(tmp_path / "e"), "--export_onnx_int8"])


# Exits 0 having written junk where Model Optimizer writes its model (and answers the import
# check): what a broken or cut quantizer can do.
JUNK_QUANTIZER = """#!/usr/bin/env bash
out=""
while [ $# -gt 0 ]; do
  if [ "$1" = --output_path ]; then out=$2; fi
  shift
done
if [ -n "$out" ]; then printf 'ONNX?\\0\\1 cut here' > "$out"; fi
exit 0
"""


@MODELOPT
# `make test-slow` (the suite's time budget): Model Optimizer's INT8 export itself is
# test_resnet_int8_onnx_is_calibrated_on_training_images'.
@pytest.mark.slow
def test_a_quantizer_that_exits_0_with_junk_replaces_nothing(tmp_path, digits_records,
                                                             monkeypatch):
    """Model Optimizer's output is checked (onnx.checker, Q/DQ, the float model's inputs and
    outputs) before it replaces anything: the earlier export stays, whole, and the line names
    the kept log (in --results_dir)."""
    fake = tmp_path / "quantizer"
    fake.write_text(JUNK_QUANTIZER)
    fake.chmod(0o755)
    monkeypatch.setenv("MODELOPT_PYTHON", str(fake))
    export = tmp_path / "e"
    export.mkdir()
    (export / "model_int8.onnx").write_bytes(b"the earlier export's good INT8 file")
    with pytest.raises(runner.TrainingError) as e:
        runner.run(ResNetTask, ["main.py", *TINY, *BENCH, "--results_dir", str(tmp_path / "r"),
                                "--data_dir", digits_records, "--export_dir", str(export),
                                "--export_onnx_int8"])
    message = str(e.value)
    assert message.startswith("INT8 quantization of model.onnx by Model Optimizer failed (log: "
                              f"{tmp_path / 'r'}/modelopt-"), message
    assert "it exited 0, but model_int8.onnx is not a valid ONNX model" in message
    assert (export / "model_int8.onnx").read_bytes() == b"the earlier export's good INT8 file"
    assert os.listdir(export) == ["model_int8.onnx"]
    assert [n for n in os.listdir(tmp_path) if n.startswith(".e.")] == []


@MODELOPT
def test_model_optimizers_environment_takes_the_pytorch_a_user_names(tmp_path):
    """scripts/modelopt_env.sh: PyPI's PyTorch by default; MODELOPT_TORCH (a requirement or a
    wheel, a CPU build on a host without a GPU) gets an environment of its own, named after it
    (--where: where it is or would be, exit 1 while it is not made)."""
    script = os.path.join(ROOT, "scripts", "modelopt_env.sh")
    env = {**os.environ, "TF_MODEL_SCRIPTS_CACHE": str(tmp_path)}

    def where(**more):
        proc = subprocess.run(["bash", script, "--where"], capture_output=True, text=True,
                              env={**env, **more}, timeout=60)
        assert proc.returncode == 1, proc.stderr  # nothing made in this cache
        return os.path.relpath(proc.stdout.strip(), tmp_path / "venvs")

    default = where()
    assert default.startswith("modelopt0.47.0-torch2.14.1-py") and default.endswith("/bin/python")
    wheel = where(MODELOPT_TORCH="/wheels/torch-2.14.1+cpu-cp311-cp311-linux_x86_64.whl",
                  MODELOPT_TORCH_INDEX="https://download.pytorch.org/whl/cpu")
    assert wheel.startswith("modelopt0.47.0-torch-2.14.1+cpu-cp311-cp311-linux_x86_64.whl-py")
    assert where(MODELOPT_TORCH="torch==2.14.1+cpu").startswith(
        "modelopt0.47.0-torch==2.14.1+cpu-py")
