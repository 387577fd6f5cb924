"""Exports that describe themselves, and a real Triton server in front of them.

Each image model's ``serving_default`` takes encoded images and gives, on the records' own
bytes, what the model gives on the evaluation pipeline's batch; ``preprocessed`` takes that
batch. ``assets/`` holds the class names and ``client.json``, which names every signature's
real inputs and outputs. ``--export_triton``'s configs parse with Triton's own
``model_config.proto`` (tritonclient, in scripts/triton_env.sh's environment) and name the
model's inputs and outputs; a Triton server (PyTriton's binary, serving the SavedModel through
scripts/serve_pytriton.py) answers scripts/triton_client.py, over HTTP and gRPC, with the
SavedModel's outputs."""
import json
import os
import subprocess
import time

import numpy as np
import pytest
import tensorflow as tf
from conftest import ROOT, TINY, free_ports

from common import runner
from rn50 import config as rn50_config
from rn50 import tfdata_pipeline as rn50_data
from rn50.task import ResNetTask
from ssd import tfdata_pipeline as ssd_data
from ssd.task import SSDTask
from txl.task import TransformerXLTask

NO_RUN = ["--mode", "inference_benchmark", "--iter_unit", "batch", "--num_iter", "2",
          "--warmup_steps", "1", "--seed", "3"]


def _export(task_cls, tmp, args, onnx=False):
    """(trainer, export dir, Triton repository) of a model set up from ``args`` (untrained)."""
    out, repo = tmp / "export", tmp / "triton"
    trainer = runner.setup(task_cls, ["main.py", *args, *NO_RUN, "--results_dir", str(tmp),
                                      "--export_dir", str(out), "--export_triton", str(repo),
                                      *(["--export_onnx"] if onnx else [])])
    trainer.export(str(out))
    trainer.log.close()
    return trainer, out, repo


@pytest.fixture(scope="module")
def resnet(tmp_path_factory, digits_records):
    return _export(ResNetTask, tmp_path_factory.mktemp("rn50"),
                   [*TINY, "--data_dir", digits_records], onnx=True)


@pytest.fixture(scope="module")
def ssd(tmp_path_factory, shapes_records):
    trainer, out, repo = _export(SSDTask, tmp_path_factory.mktemp("ssd"),
                                 [*TINY, "--data_dir", shapes_records])
    return trainer, out, repo


@pytest.fixture(scope="module")
def txl(tmp_path_factory, corpus):
    return _export(TransformerXLTask, tmp_path_factory.mktemp("txl"),
                   ["--preset", "tiny", "--data_dir", corpus])


def _records(trainer, parse):
    """(the first validation shard, its records' encoded images in order)."""
    first = trainer.task.record_files("validation")[:1]
    return first, [parse(r).numpy() for r in tf.data.TFRecordDataset(first)]


def _signature(export, name):
    return tf.saved_model.load(str(export)).signatures[name]


def test_resnet_signatures_on_image_bytes_equal_the_evaluation_pipeline(resnet):
    trainer, export, _ = resnet
    f = trainer.flags
    shard, encoded = _records(trainer, lambda r: rn50_data.parse(r, f.num_classes)[0])
    images, _ = next(iter(rn50_data.dataset(shard, 64, f.image_size, False,
                                            num_classes=f.num_classes)))
    want = trainer.model(images, training=False).numpy()
    assert len(encoded) == len(want) > 1
    served = _signature(export, "serving_default")(images=tf.constant(encoded))
    np.testing.assert_allclose(served["logits"].numpy(), want, atol=1e-5)
    np.testing.assert_allclose(served["probabilities"].numpy(), tf.nn.softmax(want), atol=1e-6)
    np.testing.assert_array_equal(served["classes"].numpy(), np.argmax(want, -1))
    pre = _signature(export, "preprocessed")(images=images)
    np.testing.assert_allclose(pre["logits"].numpy(), want, atol=1e-5)
    # A PNG of the same pixels is served as the JPEG's decoded pixels are.
    pixels = tf.io.decode_jpeg(encoded[0], channels=3)
    png = _signature(export, "serving_default")(images=tf.io.encode_png(pixels)[None])
    np.testing.assert_allclose(png["logits"].numpy()[0], want[0], atol=1e-5)


def test_ssd_signatures_on_image_bytes_equal_the_evaluation_pipeline(ssd):
    trainer, export, _ = ssd
    f, task = trainer.flags, trainer.task
    shard, encoded = _records(trainer, lambda r: ssd_data.parse(r, f.num_classes)["encoded"])
    batch = next(iter(ssd_data.dataset(shard, 64, f.image_size, False, task.anchors,
                                       f.num_classes)))
    want = {k: v.numpy() for k, v in task.detect(trainer.model, batch["images"]).items()}
    assert len(encoded) == len(want["scores"]) > 1
    for name, feed in (("serving_default", tf.constant(encoded)),
                       ("preprocessed", batch["images"])):
        got = {k: v.numpy() for k, v in _signature(export, name)(images=feed).items()}
        assert sorted(got) == ["detection_boxes", "detection_classes", "detection_scores",
                               "num_detections"]
        np.testing.assert_array_equal(got["num_detections"], want["num_detections"])
        np.testing.assert_allclose(got["detection_scores"], want["scores"], atol=1e-5)
        np.testing.assert_allclose(got["detection_boxes"], want["boxes"], atol=1e-5)
        np.testing.assert_array_equal(got["detection_classes"], want["classes"])


@pytest.mark.parametrize("model", ["resnet", "ssd", "txl"])
def test_client_json_names_every_signature_and_the_assets_are_the_data(model, request):
    trainer, export, _ = request.getfixturevalue(model)
    info = json.loads((export / "assets" / "client.json").read_text())
    loaded = tf.saved_model.load(str(export))
    assert sorted(info["signatures"]) == sorted(loaded.signatures)
    for name, fn in loaded.signatures.items():
        described = info["signatures"][name]
        assert described["inputs"] == {
            k: {"dtype": v.dtype.name, "shape": [-1 if d is None else d for d in v.shape]}
            for k, v in fn.structured_input_signature[1].items()}
        assert sorted(described["outputs"]) == sorted(fn.structured_outputs)
    f = trainer.flags
    assert info["model"] == trainer.task.name and info["trained_precision"] == "float32"
    assert info["checkpoint_settings"] == {
        **{n: getattr(f, n) for n in trainer.task.checkpoint_flags},
        **trainer.task.checkpoint_facts()}
    data = f.data_dir
    if model == "txl":
        assert (export / "assets" / "vocab.txt").read_text() == open(
            os.path.join(data, "vocab.txt")).read()
        assert json.loads((export / "assets" / "config.json").read_text())["n_layer"] == \
            trainer.task.cfg.n_layer
        return
    from common.images import MEAN, STD
    assert info["mean"] == list(MEAN) and info["std"] == list(STD)
    assert info["input_size"] == [f.image_size, f.image_size]
    if model == "resnet":
        assert (export / "assets" / "labels.txt").read_text() == open(
            os.path.join(data, "labels.txt")).read()
        assert info["resize_shorter_side"] == rn50_config.eval_resize(f.image_size)
    else:
        assert json.loads((export / "assets" / "label_map.json").read_text()) == json.load(
            open(os.path.join(data, "label_map.json")))


def test_the_client_prepares_an_image_as_evaluation_does(resnet, ssd, tmp_path):
    """scripts/triton_client.py prepares images itself (Pillow, client.json's recipe) for the
    models that take float input (ONNX, TensorRT): within Pillow's and TensorFlow's resize
    rounding of the evaluation's input."""
    from PIL import Image
    client = _client_module()
    rng = np.random.RandomState(1)
    pixels = (rng.rand(61, 87, 3) * 255).astype(np.uint8)
    path = tmp_path / "a.png"
    Image.fromarray(pixels).save(path)
    for (trainer, export, _), eval_image in ((resnet, rn50_data.eval_image),
                                              (ssd, ssd_data.eval_image)):
        info = json.loads((export / "assets" / "client.json").read_text())
        got = client.prepare(str(path), info)
        want = eval_image(tf.io.encode_png(pixels), trainer.flags.image_size).numpy()
        assert got.shape == want.shape
        assert np.abs(got - want).mean() < 0.02  # normalised units (a pixel level: 0.017)


def _client_module():
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "triton_client", os.path.join(ROOT, "scripts", "triton_client.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- Triton ---------------------------------------------------------------------------------
# The server and Triton's protobuf run in scripts/triton_env.sh's environment, the same for
# both stacks, on an export whose signatures the tests above check in each.
TRITON_ENV = pytest.mark.one_stack(
    "pip", "Triton's server and protobuf run in scripts/triton_env.sh's environment, the same "
    "for both stacks")
@pytest.fixture(scope="module")
def triton_python():
    """scripts/triton_env.sh's python (tritonclient, PyTriton; made at first use)."""
    proc = subprocess.run(["bash", os.path.join(ROOT, "scripts", "triton_env.sh")],
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip().splitlines()[-1]


PARSE = """
import json, sys
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2
out = {}
for path in sys.argv[1:]:
    config = text_format.Parse(open(path).read(), model_config_pb2.ModelConfig())
    out[path] = json_format.MessageToDict(config, preserving_proto_field_name=True)
print(json.dumps(out))
"""


def _parsed_configs(python, repo):
    paths = sorted(str(p) for p in repo.glob("*/config.pbtxt*"))
    proc = subprocess.run([python, "-c", PARSE, *paths], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {os.path.basename(os.path.dirname(p)): c
            for p, c in json.loads(proc.stdout).items()}


@TRITON_ENV
def test_the_triton_repository_parses_and_names_the_models_tensors(resnet, txl, triton_python):
    import onnx
    trainer, export, repo = resnet
    configs = _parsed_configs(triton_python, repo)
    assert sorted(configs) == ["resnet50_onnx", "resnet50_savedmodel", "resnet50_tensorrt"]
    assert not (repo / "resnet50_tensorrt" / "config.pbtxt").exists()  # until the engine is
    assert "trtexec --onnx=../resnet50_onnx/1/model.onnx --saveEngine=1/model.plan" in (
        repo / "resnet50_tensorrt" / "build_engine.sh").read_text()
    saved = configs["resnet50_savedmodel"]
    fn = _signature(export, "serving_default")
    assert saved["platform"] == "tensorflow_savedmodel" and saved["max_batch_size"] == 64
    assert "dynamic_batching" in saved
    assert [i["name"] for i in saved["input"]] == ["images"]
    assert saved["input"][0]["data_type"] == "TYPE_STRING"
    assert sorted(o["name"] for o in saved["output"]) == sorted(fn.structured_outputs)
    logits = next(o for o in saved["output"] if o["name"] == "logits")
    assert logits["dims"] == [str(trainer.flags.num_classes)]  # int64 as JSON strings
    assert (repo / "resnet50_savedmodel" / "1" / "model.savedmodel" / "saved_model.pb").exists()
    graph = onnx.load(str(repo / "resnet50_onnx" / "1" / "model.onnx")).graph
    for name in ("resnet50_onnx", "resnet50_tensorrt"):
        c = configs[name]
        assert [i["name"] for i in c["input"]] == [i.name for i in graph.input]
        assert sorted(o["name"] for o in c["output"]) == sorted(o.name for o in graph.output)
        assert c["input"][0]["dims"] == [str(trainer.flags.image_size)] * 2 + ["3"]
    assert configs["resnet50_tensorrt"]["platform"] == "tensorrt_plan"
    # Transformer-XL's memory leads with the layers: served unbatched, full shapes.
    (name, c), = _parsed_configs(triton_python, txl[2]).items()
    assert name == "transformerxl_savedmodel" and c.get("max_batch_size", 0) == 0
    assert sorted(i["name"] for i in c["input"]) == ["mems", "tokens"]
    assert "dynamic_batching" not in c


class _Server:
    """scripts/serve_pytriton.py on an export, in the Triton environment, until closed."""

    def __init__(self, python, export, tmp, *args):
        self.http, self.grpc, metrics = free_ports(3)
        ready = tmp / f"ready-{self.http}"
        self.log = open(tmp / f"server-{self.http}.log", "w")
        self.proc = subprocess.Popen(
            [python, os.path.join(ROOT, "scripts", "serve_pytriton.py"), "--export_dir",
             str(export), "--http_port", str(self.http), "--grpc_port", str(self.grpc),
             "--metrics_port", str(metrics), "--ready_file", str(ready), *args],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 180
        while not ready.exists():
            assert self.proc.poll() is None, (tmp / f"server-{self.http}.log").read_text()[-3000:]
            assert time.time() < deadline, "the Triton server did not start in 180 s"
            time.sleep(0.5)

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def _ask(python, server, model, files, protocol, *args):
    url = f"localhost:{server.http if protocol == 'http' else server.grpc}"
    proc = subprocess.run([python, os.path.join(ROOT, "scripts", "triton_client.py"), "--model",
                           model, "--url", url, "--protocol", protocol, *args, *files],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.splitlines()


@TRITON_ENV
def test_a_triton_server_answers_the_client_with_the_savedmodels_outputs(
        resnet, ssd, triton_python, tmp_path):
    from PIL import Image
    rng = np.random.RandomState(2)
    files = []
    for n, (h, w) in enumerate([(40, 52), (33, 33), (70, 45)]):
        path = tmp_path / f"{n}.{'png' if n == 1 else 'jpg'}"
        Image.fromarray((rng.rand(h, w, 3) * 255).astype(np.uint8)).save(path)
        files.append(str(path))
    encoded = tf.constant([open(p, "rb").read() for p in files])
    for (_, export, _), model in ((resnet, "resnet50_savedmodel"),
                                        (ssd, "ssd320_savedmodel")):
        want = {k: v.numpy() for k, v in _signature(export, "serving_default")(
            images=encoded).items()}
        server = _Server(triton_python, export, tmp_path)
        try:
            for protocol in ("http", "grpc"):
                lines = _ask(triton_python, server, model, files, protocol, "--json",
                             "--batch_size", "2")
                got = [json.loads(line) for line in lines]
                assert [g["file"] for g in got] == files
                for row, g in enumerate(got):
                    assert sorted(g) == sorted(["file", *want])
                    for k, v in want.items():
                        np.testing.assert_allclose(np.reshape(g[k], v[row].shape), v[row],
                                                   atol=1e-5, err_msg=f"{model} {protocol} {k}")
            labels = str(export / "assets" / ("labels.txt" if "resnet" in model
                                              else "label_map.json"))
            said = _ask(triton_python, server, model, files, "grpc", "--labels", labels)
            assert [s.split(":")[0] for s in said] == files
            if "resnet" in model:
                names = open(labels).read().split()
                assert all(line.split(": ")[1].split()[0] in names for line in said)
        finally:
            server.close()


@TRITON_ENV
def test_serve_pytriton_refuses_a_directory_that_is_no_export(tmp_path, triton_python):
    proc = subprocess.run([triton_python, os.path.join(ROOT, "scripts", "serve_pytriton.py"),
                           "--export_dir", str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip() == (f"serve_pytriton.py: error: {tmp_path} holds no export of "
                                   "this repository (no assets/client.json)")

