"""--export_onnx: every model's ONNX export gives its SavedModel's outputs under ONNX Runtime
(CPU): ResNet logits, SSD's post-NMS detections (NMS included in the graph), Transformer-XL's
log-probabilities and new memory. An AMP run exports a float32 graph of its weights."""
import numpy as np
import onnxruntime as ort
import pytest
import tensorflow as tf
from conftest import TINY

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


@pytest.mark.parametrize("amp", [False, True])
def test_resnet_onnx_gives_the_savedmodel_logits(tmp_path, amp):
    out = tmp_path / "export"
    runner.run(ResNetTask, ["main.py", *TINY, *BENCH, "--results_dir", str(tmp_path),
                            "--export_dir", str(out), "--export_onnx"] + (["--amp"] if amp else []))
    images = np.random.RandomState(0).randn(3, 32, 32, 3).astype(np.float32)
    want, got = _compare(out, {"images": images})
    (key,) = want
    assert got[key].dtype == np.float32
    # Under AMP the SavedModel computes in bfloat16, the ONNX graph in float32.
    np.testing.assert_allclose(got[key], want[key], atol=0.05 if amp else 1e-4)
    if not amp:
        return
    import onnx
    graph = onnx.load(str(out / "model.onnx")).graph
    assert not [n for n in graph.node if n.op_type == "Cast"
                and any(a.i == onnx.TensorProto.BFLOAT16 for a in n.attribute)]


def test_ssd_onnx_gives_the_detections_and_what_nms_takes(tmp_path):
    trainer = runner.setup(SSDTask, ["main.py", "--arch", "resnet_tiny", "--image_size", "128",
                                     "--batch_size", "2", *BENCH, "--results_dir", str(tmp_path),
                                     "--export_dir", str(tmp_path / "export"), "--export_onnx"])
    trainer.log.close()
    # Untrained scores sit within 1e-3 of each other, and which of two near-tied boxes NMS
    # keeps turns on rounding; a random class head with logits of standard deviation 2 gives
    # every anchor a score of its own.
    images = np.random.RandomState(0).randn(2, 128, 128, 3).astype(np.float32)
    kernel, bias = (next(v for v in trainer.model.variables if v.path == f"class_head/{name}")
                    for name in ("kernel", "bias"))
    kernel.assign(tf.random.stateless_normal(kernel.shape, (1, 2)))
    bias.assign(tf.zeros_like(bias))
    logits = trainer.model(images, training=False)["cls_logits"]
    kernel.assign(kernel * 2.0 / tf.math.reduce_std(logits))
    trainer.export(str(tmp_path / "export"))
    want, got = _compare(tmp_path / "export", {"images": images})
    assert sorted(want) == ["boxes", "classes", "num_detections", "scores"]
    np.testing.assert_array_equal(got["num_detections"], want["num_detections"])
    assert want["num_detections"].min() > 0
    _same_detections(got, want)
    # The graph before NMS, for TensorRT's EfficientNMS plugin: every anchor's box and scores.
    want, got = _compare(tmp_path / "export", {"images": images}, "decoded",
                         "model_before_nms.onnx")
    assert got["decoded_boxes"].shape == (2, len(trainer.task.anchors), 4)
    assert got["class_scores"].shape == (2, len(trainer.task.anchors), 90)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], atol=1e-5)


def _same_detections(a, b):
    """Each image's detections alike up to order: two scores 1e-6 apart may swap places."""
    for i, n in enumerate(b["num_detections"]):
        rows = [np.concatenate([d["boxes"][i, :n], d["scores"][i, :n, None],
                                d["classes"][i, :n, None]], axis=1) for d in (a, b)]
        for row in rows[0]:
            close = np.all(np.abs(rows[1] - row) <= [1e-4] * 4 + [1e-5, 0], axis=1)
            assert close.any(), (i, row)


def test_txl_onnx_gives_log_probs_and_memory(tmp_path, corpus):
    out = tmp_path / "export"
    runner.run(TransformerXLTask, ["main.py", "--preset", "tiny", "--data_dir", corpus, *BENCH,
                                   "--results_dir", str(tmp_path), "--export_dir", str(out),
                                   "--export_onnx"])
    rng = np.random.RandomState(0)
    saved = tf.saved_model.load(str(out)).signatures["serving_default"]
    layers, _, _, d_model = saved.structured_input_signature[1]["mems"].shape
    vocab = len((out / "vocab.txt").read_text().splitlines())
    feeds = {"tokens": rng.randint(0, vocab, (2, 5)).astype(np.int32),
             "mems": rng.randn(layers, 2, 3, d_model).astype(np.float32)}
    want, got = _compare(out, feeds)
    np.testing.assert_allclose(got["log_probs"], want["log_probs"], atol=1e-4)
    np.testing.assert_allclose(got["new_mems"], want["new_mems"], atol=1e-4)
    assert np.allclose(np.exp(got["log_probs"]).sum(-1), 1, atol=1e-3)  # a distribution


def test_export_onnx_needs_export_dir(tmp_path):
    with pytest.raises(runner.UsageError, match="--export_onnx writes model.onnx into "
                                                "--export_dir"):
        runner.run(ResNetTask, ["main.py", *TINY, *BENCH, "--results_dir", str(tmp_path),
                                "--export_onnx"])
