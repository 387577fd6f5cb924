"""The image client apart from a server: it prepares images for the networks alone with the
export's own preprocessing under every recorded evaluation recipe, and refuses bad arguments
with one line before it reaches a server."""


import json
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from conftest import ROOT, TINY, photographs
from triton_servers import (
    export_model,
    random_images,
    signature,
)

from rn50.task import ResNetTask


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
                        "checked against its evaluation pipeline in test_triton_repository.py)")
def test_the_client_prepares_images_as_the_export_does_for_every_recipe(tmp_path,
                                                                        digits_records):
    """serving/image_client.py prepares images for the networks alone (ONNX, TensorRT) with
    the export's own preprocessing (``--client_json``: its preprocess/ SavedModel): on
    photographs, under each recorded recipe, ``preprocessed`` on the client's input gives
    ``serving_default``'s logits on the bytes within 1% of their range and the same top-5
    order. (Its Pillow preparation rounded the long side where torchvision truncates it: up
    to 7.4% of the range off, the top 5 reordered.)"""
    from serving import image_client as client
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
        got = signature(export, "preprocessed")(images=tf.constant(images))["logits"].numpy()
        want = signature(export, "serving_default")(images=encoded)["logits"].numpy()
        spread = want.max() - want.min()
        assert spread > 0
        assert np.abs(got - want).max() <= 0.01 * spread, name
        assert (np.argsort(-got, 1)[:, :5] == np.argsort(-want, 1)[:, :5]).all(), name


def test_triton_client_refuses_bad_arguments_with_one_line(tmp_path, exported_resnet):
    """What the client can tell before it reaches a server, each one line (exit 2): the
    address, the batch size, --client_json and --labels, and tritonclient missing here (this
    environment has none: the pointer to scripts/triton_env.sh)."""
    _, export, _ = exported_resnet
    image = random_images(tmp_path, 1)[0]
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
    assert ask("--score_threshold", "nan").endswith(  # it kept no detection, saying nothing
        "argument --score_threshold: a score from 0 to 1, not nan")
    # The text client's correlation id: one over Triton's 64 bits reached the server.
    proc = subprocess.run([sys.executable, "-m", "serving.text_client", "--sequence_id",
                           str(2**64), "score", image], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].endswith(
        "argument --sequence_id: at most 2**64 - 1 (Triton's unsigned 64-bit correlation ids), "
        "not 18446744073709551616"), proc.stderr
    # The server launcher given --export_triton's folder, not its cpu/ repository: one line
    # where Triton said "Could not determine backend for model 'cpu'".
    root = exported_resnet[2]
    proc = subprocess.run([sys.executable, "-m", "serving.tritonserver",
                           f"--model-repository={root}"], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        f"tritonserver.py: error: --model-repository {root} holds --export_triton's "
        f"repositories: serve {root / 'cpu'} (this binary has the Python backend only)")
    assert ask("--url", "http://localhost:8000").startswith(
        "image_client.py: error: tritonclient is not installed here (tritonclient): run it "
        "with the environment scripts/triton_env.sh makes")
