"""ResNet-50 v1.5 from the weights users already have (``resnet50v1.5/import_weights.py``,
``rn50/pretrained.py``): torchvision's and timm's own models with random weights give the same
logits once imported; NVIDIA's NGC TensorFlow names import; a file with a missing, extra or
mis-shaped tensor is refused with one line; the checkpoint written serves evaluate/predict (with
class names) and says what it is. Keras' weights (keras.applications, keras-hub):
tests/test_import_keras.py."""
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from conftest import ROOT, run_cli
from imported_weights import PHOTOS, imported, logits_of, predict_and_export, same_answer, say
from PIL import Image
from safetensors.numpy import load_file, save_file

from common import runner
from common.checkpoint import settings as checkpoint_settings
from common.data import images
from common.errors import UsageError
from rn50 import pretrained, weights_keras
from rn50.model import build_resnet
from rn50.task import ResNetTask

TORCH_ENV = os.path.join(ROOT, "tests", "torch_env.sh")
TORCH_REFERENCE = os.path.join(ROOT, "tests", "torch_reference.py")


@pytest.fixture(scope="module")
def torch_python():
    """tests/torch_env.sh's python (PyTorch, torchvision, timm: made at first use)."""
    proc = run_cli(["bash", TORCH_ENV], timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def torch_files(torch_python):
    """torchvision's and timm's resnet50, random weights: state dicts, inputs, logits. Made once
    for the script, its inputs and the torch environment, and kept in that environment's folder:
    the suites of both stacks read the same files (the PyTorch side, in an environment of its
    own, is the same whichever stack is under test; two minutes each time it is made)."""
    key = hashlib.sha256(torch_python.encode())
    for path in (TORCH_REFERENCE, TORCH_ENV, *PHOTOS):
        with open(path, "rb") as f:
            key.update(f.read())
    out = pathlib.Path(torch_python).parents[1] / f"test-reference-{key.hexdigest()[:16]}"
    if not out.is_dir():
        staging = out.with_name(f"{out.name}.{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        proc = run_cli([torch_python, TORCH_REFERENCE, str(staging), "--photos", *PHOTOS],
                       timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        try:
            os.rename(staging, out)  # whole or not at all
        except OSError:  # another suite's worker made it meanwhile
            shutil.rmtree(staging)
    return out


@pytest.mark.parametrize("source", [pytest.param("torchvision", marks=pytest.mark.both_stacks),
                                    "timm"])
def test_logits_equal_the_source_frameworks_own(torch_files, source):
    model, settings, notes = imported(source, torch_files / f"{source}.safetensors")
    assert settings == {"arch": "resnet50", "num_classes": 1000, "image_size": 224,
                        "padding": "symmetric", "eval_preprocessing": "nvidia"} and notes == []
    x = np.load(torch_files / "images.npy")
    theirs = np.load(torch_files / f"{source}_logits.npy")
    ours = logits_of(model, x)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-4 * np.abs(theirs).max())
    assert (ours.argmax(1) == theirs.argmax(1)).all()


def test_pth_files_read_as_the_safetensors_beside_them(torch_python, torch_files, capsys,
                                                       tmp_path):
    """With PyTorch (its environment): the .pth state dict is the .safetensors one. Without it
    (TensorFlow's): one line saying what to do."""
    check = ("import sys, numpy as np; from safetensors.numpy import load_file; "
             "from rn50.weights_torch import read_state_dict; "
             "a = read_state_dict(sys.argv[1]); b = load_file(sys.argv[2]); "
             "assert set(a) == set(b), set(a) ^ set(b); "
             "assert all(np.array_equal(a[k], b[k].astype(np.float32)) for k in a); print(len(a))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "resnet50v1.5")])}
    proc = subprocess.run([torch_python, "-c", check, str(torch_files / "torchvision.pth"),
                           str(torch_files / "torchvision.safetensors")], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "320", proc.stderr[-2000:]
    if "torch" in sys.modules or _has_torch():
        pytest.skip("PyTorch is installed beside TensorFlow here")
    assert pretrained.main([str(torch_files / "torchvision.pth"), str(tmp_path / "out"),
                            "--from", "torchvision"]) == 1
    assert capsys.readouterr().err.strip() == (
        f"import_weights.py: error: {torch_files / 'torchvision.pth'}: reading a pickled PyTorch "
        "file needs PyTorch; without it, save the state dict as .safetensors "
        "(safetensors.torch.save_file)")


def _has_torch():
    import importlib.util
    return importlib.util.find_spec("torch") is not None


def test_the_imported_checkpoint_predicts_with_names_and_says_what_it_is(torch_files, tmp_path,
                                                                          capsys):
    labels = tmp_path / "names.txt"
    labels.write_text("".join(f"class {i}\n" for i in range(1000)))
    out = tmp_path / "rn50-tv"
    assert pretrained.main([str(torch_files / "torchvision.safetensors"), str(out), "--from",
                            "torchvision", "--labels", str(labels)]) == 0
    said = capsys.readouterr().out
    assert f"into {out}/ckpt-0 (1000 classes, --padding symmetric; evaluated with " \
        "--eval_preprocessing resize:232,crop:224,interpolation:bilinear" in said
    found = checkpoint_settings.read(str(out))
    assert found["model"] == "resnet50v1.5" and found["settings"]["padding"] == "symmetric"
    image = tmp_path / "photo.png"
    pixels = np.random.default_rng(1).integers(0, 255, (256, 256, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(image)
    runner.run(ResNetTask, ["main.py", "--mode", "predict", "--model_dir", str(out),
                            "--to_predict", str(image), "--results_dir", str(tmp_path / "p")])
    import json
    record = json.load(open(tmp_path / "p" / "predictions.json"))[0]
    # What the model computes on the evaluation crop, named from labels.txt.
    from rn50 import tfdata_pipeline
    model, _, _ = imported("torchvision", torch_files / "torchvision.safetensors")
    from rn50 import eval_preprocessing
    x = tfdata_pipeline.eval_crop(tf.constant(pixels), 224, eval_preprocessing.parse(
        found["settings"]["eval_preprocessing"], 224))[None]
    top = np.argsort(-logits_of(model, x)[0])[:5]
    assert record["top5_classes"] == [int(c) for c in top]
    assert record["top5_names"] == [f"class {c}" for c in top]
    # A flag that contradicts the checkpoint: one line naming it, exit 2.
    assert runner.main(ResNetTask, ["main.py", "--mode", "predict", "--model_dir", str(out),
                                    "--padding", "same", "--to_predict", str(image),
                                    "--results_dir", str(tmp_path / "q")]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"main.py: error: --padding same contradicts the checkpoint in --model_dir {out}, "
        "written with --padding symmetric: drop the flag (it is taken from the checkpoint) or "
        "use another checkpoint")
    # Importing over it is refused.
    assert pretrained.main([str(torch_files / "torchvision.safetensors"), str(out), "--from",
                            "torchvision"]) == 1
    assert "already holds checkpoints" in capsys.readouterr().err


# --- NVIDIA's NGC checkpoints: DeepLearningExamples' names -------------------------------------
def _nvidia_names(sd: dict) -> dict:
    """A torchvision state dict under the names DeepLearningExamples' TensorFlow ResNet-50
    gives its variables (model/resnet.py, blocks/, layers/: tf.layers.conv2d kernels HWIO,
    tf.contrib.layers.batch_norm's BatchNorm scope, a 1001-way dense)."""
    out = {}

    def conv_bn(tf_conv, tf_bn, t_conv, t_bn):
        out[tf_conv] = np.transpose(sd[f"{t_conv}.weight"], (2, 3, 1, 0))
        for ours, theirs in zip(("gamma", "beta", "moving_mean", "moving_variance"),
                                ("weight", "bias", "running_mean", "running_var")):
            out[f"{tf_bn}/BatchNorm/{ours}"] = sd[f"{t_bn}.{theirs}"]

    conv_bn("resnet50/conv2d/conv2d/kernel", "resnet50/conv2d", "conv1", "bn1")
    for s, n in enumerate((3, 4, 6, 3)):
        for b in range(n):
            block = f"resnet50/btlnck_block_{s}_{b}"
            for k in (1, 2, 3):
                conv_bn(f"{block}/bottleneck_{k}/conv2d/kernel", f"{block}/bottleneck_{k}",
                        f"layer{s + 1}.{b}.conv{k}", f"layer{s + 1}.{b}.bn{k}")
            if b == 0:
                conv_bn(f"{block}/shortcut/conv2d/conv2d/kernel", f"{block}/shortcut/conv2d",
                        f"layer{s + 1}.{b}.downsample.0", f"layer{s + 1}.{b}.downsample.1")
    background = np.full((2048, 1), 7.0, np.float32)  # class 0, never a label: dropped
    out["resnet50/output/dense/kernel"] = np.concatenate([background, sd["fc.weight"].T], 1)
    out["resnet50/output/dense/bias"] = np.concatenate([[7.0], sd["fc.bias"]]).astype(np.float32)
    return out


def _write_tf1_checkpoint(prefix: str, tensors: dict) -> None:
    graph = tf.Graph()
    with graph.as_default():
        variables = [tf.compat.v1.Variable(v, name=k) for k, v in tensors.items()]
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            tf.compat.v1.train.Saver(variables).save(session, prefix, write_meta_graph=False)


@pytest.mark.both_stacks
def test_nvidia_ngc_checkpoint_imports_as_the_same_network(torch_files, tmp_path):
    sd = {k: v.astype(np.float32) for k, v in
          load_file(str(torch_files / "torchvision.safetensors")).items()}
    tensors = _nvidia_names(sd)
    # What an NGC training checkpoint also holds: momentum slots, the step, the loss scale.
    tensors.update({f"{k}/Momentum": np.zeros_like(v) for k, v in list(tensors.items())[:5]})
    tensors["global_step"] = np.int64(112603)
    tensors["current_loss_scale"] = np.float32(128)
    prefix = str(tmp_path / "nvidia_rn50_tf_amp" / "model.ckpt-112603")
    _write_tf1_checkpoint(prefix, tensors)
    model, settings, notes = imported("nvidia", prefix)
    assert settings["padding"] == "same" and settings["num_classes"] == 1000
    assert any("1001 outputs" in n for n in notes) and any("2 training-state" in n for n in notes)
    # The same weights in the same network (TensorFlow's padding) as torchvision's import.
    reference, _, _ = imported("torchvision", torch_files / "torchvision.safetensors")
    same = build_resnet("resnet50", 1000, 224, padding="same")
    same.set_weights(reference.get_weights())
    x = np.load(torch_files / "images.npy")
    np.testing.assert_allclose(logits_of(model, x), logits_of(same, x), rtol=0, atol=1e-5)
    # A tensor missing: one line.
    del tensors["resnet50/btlnck_block_2_3/bottleneck_2/BatchNorm/moving_mean"]
    broken = str(tmp_path / "broken" / "model.ckpt-1")
    _write_tf1_checkpoint(broken, tensors)
    with pytest.raises(pretrained.DataError, match="has no resnet50/btlnck_block_2_3/bottleneck_2/"
                       "BatchNorm/moving_mean: not a ResNet-50 of this architecture"):
        pretrained.read("nvidia", broken, "resnet50")


# --- each source's own evaluation recipe -----------------------------------------------------
def test_each_source_records_its_own_recipe(tmp_path):
    from rn50 import eval_preprocessing as recipes
    v1, v2 = recipes.torchvision("V1").spec(), recipes.torchvision("V2").spec()
    assert v1.startswith("resize:256,crop:224,interpolation:bilinear,antialias:1,")
    assert v2.startswith("resize:232,crop:224,interpolation:bilinear,antialias:1,")
    # torchvision: the weights' name (--weights_name, or its download name when the file's hash
    # agrees: test_torchvision_weights_are_named_by_their_download_name_when_the_hash_agrees).
    assert pretrained.source_recipe("torchvision", "/w/a.pth", None, "IMAGENET1K_V1") == (v1, [])
    assert pretrained.source_recipe("torchvision", "/w/a.pth", None, "IMAGENET1K_V2") == (v2, [])
    spec, notes = pretrained.source_recipe("torchvision", "/w/weights.safetensors", None)
    assert spec == v2 and "--recipe torchvision_v1" in notes[0]
    assert pretrained.source_recipe("torchvision", "/w/x.pth", "torchvision_v1") == (v1, [])
    # timm: the pretrained_cfg beside the weights (the Hugging Face hub's config.json).
    (tmp_path / "config.json").write_text(json.dumps({"pretrained_cfg": {
        "input_size": [3, 224, 224], "crop_pct": 0.875, "interpolation": "bilinear",
        "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}}))
    assert pretrained.source_recipe("timm", str(tmp_path / "model.safetensors"), None) == (
        "resize:256,crop:224,interpolation:bilinear,antialias:1,mean:127.5/127.5/127.5,"
        "std:127.5/127.5/127.5", [])
    spec, notes = pretrained.source_recipe("timm", "/w/model.safetensors", None)
    assert spec.startswith("resize:235,crop:224,interpolation:bicubic,") and "a1_in1k" in notes[0]
    assert pretrained.source_recipe("keras", "/w/x.h5", None)[0].startswith(
        "resize:squash,crop:224,interpolation:nearest,antialias:0,mean:123.68/116.779/103.939")
    assert pretrained.source_recipe("nvidia", "/w/model.ckpt", None) == ("nvidia", [])
    # keras-hub: the preset's image converter, else resnet_50_imagenet's with a note; a recipe
    # of keras.layers.Resizing reads back as itself.
    (tmp_path / "hub").mkdir()
    (tmp_path / "hub" / "image_converter.json").write_text(json.dumps({"config": {
        "image_size": [192, 192], "scale": 1 / 255, "offset": None, "interpolation": "bilinear",
        "crop_to_aspect_ratio": False}}))
    spec, notes = pretrained.source_recipe("keras_hub", str(tmp_path / "hub"), None)
    assert (spec, notes) == ("resize:stretch,crop:192,interpolation:bilinear,antialias:0,"
                             "mean:0/0/0,std:255/255/255", [])
    assert recipes.parse(spec, 192).spec() == spec
    assert recipes.parse(spec, 192).resize_for(192) is None
    spec, notes = pretrained.source_recipe("keras_hub", str(tmp_path), None)
    assert spec.startswith("resize:aspect,crop:224,interpolation:bicubic,antialias:0,")
    assert "resnet_50_imagenet" in notes[0] and recipes.parse(spec).resize_for(224) == 224
    with pytest.raises(UsageError, match="--recipe resize:10,crop:224: resize 10 and crop 224"):
        pretrained.source_recipe("timm", "/w/m.safetensors", "resize:10,crop:224")


def test_torchvision_weights_are_named_by_their_download_name_when_the_hash_agrees(
        torch_files, tmp_path, monkeypatch):
    """torchvision's download name (``resnet50-<hash>``) names the weights only when the file's
    SHA-256 begins with that hash, as torchvision's own download checks; the name chooses the
    recipe and the published accuracy."""
    from rn50 import eval_preprocessing, weights_torch
    src = torch_files / "torchvision.safetensors"
    sha = hashlib.sha256(src.read_bytes()).hexdigest()
    posing = tmp_path / "resnet50-11ad3fa6.safetensors"
    os.symlink(src, posing)
    found, notes = pretrained.identity("torchvision", str(posing), None)
    assert found["name"] is None and "published" not in found and found["sha256"] == sha
    assert notes == [f"resnet50-11ad3fa6.safetensors is named as torchvision's IMAGENET1K_V2 "
                     f"but its SHA-256 begins {sha[:8]}: not recorded as IMAGENET1K_V2"]
    monkeypatch.setitem(weights_torch.TORCHVISION_FILES, sha[:8], "IMAGENET1K_V1")
    own = tmp_path / f"resnet50-{sha[:8]}.safetensors"
    os.symlink(src, own)
    found, notes = pretrained.identity("torchvision", str(own), None)
    assert (found["name"], found["published"]["top1_accuracy"], notes) == (
        "IMAGENET1K_V1", 0.7613, [])
    assert pretrained.source_recipe("torchvision", str(own), None, found["name"])[0] == \
        eval_preprocessing.torchvision("V1").spec()


# timm's logits against timm's own are test_logits_equal_the_source_frameworks_own's; its
# photographs: `make test-slow` (the suite's time budget).
@pytest.mark.parametrize("source", ["torchvision", pytest.param("timm", marks=pytest.mark.slow)])
def test_imported_weights_answer_as_their_source_on_photographs(torch_files, tmp_path, source,
                                                                capsys):
    """torchvision's weights (IMAGENET1K_V2's recipe by default; V1's by the flag) and timm's
    (its pretrained_cfg, config.json beside model.safetensors), imported: main.py --mode predict
    and the exported serving_default give the logits of the framework's own pipeline on three
    photographs."""
    src = torch_files / ("torchvision.safetensors" if source == "torchvision" else
                         "timm/model.safetensors")
    ckpt = tmp_path / "ckpt"
    named = ["--weights_name", "IMAGENET1K_V2"] if source == "torchvision" else []
    assert pretrained.main([str(src), str(ckpt), "--from", source, *named]) == 0
    recorded = checkpoint_settings.read(str(ckpt))["settings"]["eval_preprocessing"]
    key = "torchvision_v2" if source == "torchvision" else "timm"
    want = np.load(torch_files / f"photos_{key}.npy")
    records, logits = predict_and_export(ckpt, tmp_path / "run")
    same_answer(logits, want)
    probs = tf.nn.softmax(want[0]).numpy()
    assert records[0]["top5_classes"] == [int(c) for c in np.argsort(-want[0])[:5]]
    np.testing.assert_allclose(records[0]["top5_probs"], probs[records[0]["top5_classes"]],
                               atol=2e-3)
    info = json.load(open(tmp_path / "run" / "export" / "assets" / "client.json"))
    assert info["recipe"] == recorded and info["checkpoint_settings"]["eval_preprocessing"] == \
        recorded
    # The model card: the weights' source, name, file hash (no path of this machine), licence
    # and terms, the source's published accuracy, the recipe, the packages; nothing evaluated
    # this checkpoint, so nothing scored.
    card = info["model_card"]
    assert card == json.load(open(tmp_path / "run" / "export" / "model_card.json"))
    weights = card["weights"]
    assert weights["from"] == f"{source} weights imported by import_weights.py"
    assert (weights["file_name"], weights["sha256"]) == (
        src.name, hashlib.sha256(src.read_bytes()).hexdigest())
    assert str(src.parent) not in json.dumps(card) and str(tmp_path) not in json.dumps(card)
    if source == "torchvision":
        # --weights_name IMAGENET1K_V2 on a file whose hash is not torchvision's: the user's
        # claim, without torchvision's published accuracy (it was carded with 0.80858).
        assert (weights["name"], weights["license"]) == ("IMAGENET1K_V2", "BSD-3-Clause")
        assert weights["name_claimed"] is True and "published" not in weights
        assert "(the name as the importer gave it, unconfirmed by the file)" in (
            tmp_path / "run" / "export" / "README.md").read_text()
        assert "base_model" not in card and card["license"] == "bsd-3-clause"
    else:  # from the pretrained_cfg beside the weights
        assert (weights["name"], weights["license"], card["license"], card["base_model"]) == (
            "resnet50.a1_in1k", "Apache-2.0", "apache-2.0", "timm/resnet50.a1_in1k")
        assert "huggingface.co/timm/resnet50.a1_in1k" in weights["terms"]
        # Another licence for weights that have their source's: one line, no card.
        from common import api
        from common.errors import UsageError
        with pytest.raises(UsageError, match=r"^--weights_license mit: these weights are under "
                           r"their source's licence \(Apache-2.0\); leave the flag out$"):
            api.load(str(ckpt), weights_license="mit")
    assert card["evaluation_preprocessing"] == recorded and card["scored"] is None
    assert card["exported_with"]["tensorflow"] == tf.__version__
    if source == "torchvision":  # a given flag wins over the checkpoint's recipe
        from rn50 import eval_preprocessing as recipes
        _, logits = predict_and_export(ckpt, tmp_path / "v1", "--eval_preprocessing",
                                        recipes.torchvision("V1").spec())
        same_answer(logits, np.load(torch_files / "photos_torchvision_v1.npy"))


# --- refusals ---------------------------------------------------------------------------------
@pytest.mark.parametrize("fault, expected", [
    ("missing", "has no layer3.2.bn2.running_var: not a ResNet-50 of this architecture"),
    ("extra", "holds 1 tensors this ResNet-50 does not have (first: layer5.0.conv1.weight)"),
    ("misshaped", "stage2_block1_2_conv/kernel: the source's is (3, 3, 64, 128), the model's "
                  "(3, 3, 128, 128)")])
def test_a_state_dict_with_a_missing_extra_or_misshaped_tensor_is_one_line(
        torch_files, tmp_path, capsys, fault, expected):
    sd = load_file(str(torch_files / "torchvision.safetensors"))
    if fault == "missing":
        del sd["layer3.2.bn2.running_var"]
    elif fault == "extra":
        sd["layer5.0.conv1.weight"] = np.zeros((4, 4, 1, 1), np.float32)
    else:
        sd["layer2.0.conv2.weight"] = np.zeros((128, 64, 3, 3), np.float32)
    path = str(tmp_path / f"{fault}.safetensors")
    save_file(sd, path)
    assert pretrained.main([path, str(tmp_path / "out"), "--from", "torchvision"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("import_weights.py: error: ") and expected in err[0]
    assert not os.path.exists(tmp_path / "out" / "ckpt-0.index")


def test_the_command_line_script_imports(torch_files, tmp_path):
    """The command a user types, through common/entry.py."""
    proc = run_cli([sys.executable, os.path.join(ROOT, "resnet50v1.5", "import_weights.py"),
                    str(torch_files / "timm.safetensors"), str(tmp_path / "t"), "--from", "timm",
                    "--num_classes", "10"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "the classifier starts fresh: the source has 1000 classes, the model 10" in proc.stdout
    assert checkpoint_settings.read(str(tmp_path / "t"))["settings"]["num_classes"] == 10
    assert weights_keras.STD == images.STD


def test_output_and_labels_faults_are_one_line_before_the_import(torch_files, tmp_path, capsys,
                                                                 monkeypatch):
    src = torch_files / "torchvision.safetensors"
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    code, err = say(capsys, [src, a_file, "--from", "torchvision"])
    assert code == 1 and err == [f"import_weights.py: error: out_dir {a_file} is a file, not a "
                                 "directory"]
    missing = tmp_path / "none.pth"  # was PyTorch's absence, under import_weights.py's name
    code, err = say(capsys, [missing, tmp_path / "o", "--from", "torchvision"])
    assert code == 1 and err == [f"import_weights.py: error: {missing}: no such file (the "
                                 "torchvision weights to import)"]
    proc = run_cli([shutil.which("tf-resnet50-import-weights"), str(missing),
                    str(tmp_path / "o"), "--from", "timm"])
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == (
        f"tf-resnet50-import-weights: error: {missing}: no such file (the timm weights to "
        "import)")
    read = []  # the source is not read when the output or the labels are wrong
    monkeypatch.setattr(pretrained, "read", lambda *a: read.append(a))
    code, err = say(capsys, [src, tmp_path / "o", "--from", "torchvision", "--labels",
                              tmp_path / "missing.txt"])
    assert code == 1 and err == [f"import_weights.py: error: --labels {tmp_path / 'missing.txt'}"
                                 ": No such file or directory"]
    binary = tmp_path / "labels.bin"
    binary.write_bytes(b"\xff\xfe\x00\x81" * 8)
    code, err = say(capsys, [src, tmp_path / "o", "--from", "torchvision", "--labels", binary])
    assert code == 1 and err == [f"import_weights.py: error: --labels {binary} is not text: "
                                 "give a file of class names, one a line"]
    assert read == []
    monkeypatch.undo()
    # A full disk while the checkpoint is written (TensorFlow's ResourceExhaustedError).
    from common.checkpoint import store

    def full(*a, **k):
        raise tf.errors.ResourceExhaustedError(None, None, "ckpt-0_temp; No space left on device")
    monkeypatch.setattr(store, "write_weights", full)
    code, err = say(capsys, [src, tmp_path / "full", "--from", "torchvision"])
    assert code == 1 and err == [f"import_weights.py: error: cannot write the checkpoint in "
                                 f"{tmp_path / 'full'} (ckpt-0_temp; No space left on device)"]
    assert [n for n in os.listdir(tmp_path / "full") if not n.startswith(".")] == []
    # A disk too small for the checkpoint: refused before the import, with what it needs.
    from reliability_helpers import tmpfs
    with tmpfs(tmp_path / "small", 50 * 1024) as small:
        code, err = say(capsys, [src, small, "--from", "torchvision"])
        assert code == 1 and len(err) == 1 and err[0].startswith(
            f"import_weights.py: error: out_dir {small} has ") and err[0].endswith(
            "MiB free; the checkpoint needs about 108.5 MiB"), err


def test_a_new_import_does_not_keep_an_earlier_imports_labels(torch_files, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "labels.txt").write_text("stale\n" * 1000)
    assert pretrained.main([str(torch_files / "torchvision.safetensors"), str(out), "--from",
                            "torchvision"]) == 0
    assert f"note: removed {out / 'labels.txt'}, an earlier import's" in capsys.readouterr().out
    assert not (out / "labels.txt").exists()


@pytest.mark.parametrize("fault, expected", [
    ("nan", "the source holds non-finite values (NaN or infinity): 3 in stage3_block2_2_conv/"
            "kernel: a damaged file, or weights of a run that diverged"),
    ("bias", "fc.bias (7,) does not fit fc.weight (1000, 2048): the source's classifier is "
             "damaged")])
def test_nan_weights_and_a_damaged_classifier_are_refused(torch_files, tmp_path, capsys, fault,
                                                          expected):
    sd = load_file(str(torch_files / "torchvision.safetensors"))
    if fault == "nan":
        sd["layer3.1.conv2.weight"].flat[:3] = np.nan
    else:
        sd["fc.bias"] = np.zeros(7, np.float32)
    path = str(tmp_path / f"{fault}.safetensors")
    save_file(sd, path)
    code, err = say(capsys, [path, tmp_path / "out", "--from", "torchvision"])
    assert code == 1 and len(err) == 1 and expected in err[0], err
    assert "--arch" not in err[0]


# A cut file in the suite; a flipped bit (the same reader's refusal): `make test-slow`.
@pytest.mark.parametrize("damage", [pytest.param("bit flip", marks=pytest.mark.slow), "cut"])
def test_a_damaged_nvidia_checkpoint_is_one_line(torch_files, tmp_path, capsys, damage):
    """A bit-flipped .data file (TensorFlow: "Checksum does not match") or a cut one."""
    sd = {k: v.astype(np.float32) for k, v in
          load_file(str(torch_files / "torchvision.safetensors")).items()}
    prefix = str(tmp_path / "ngc" / "model.ckpt-1")
    _write_tf1_checkpoint(prefix, _nvidia_names(sd))
    (data,) = [tmp_path / "ngc" / n for n in os.listdir(tmp_path / "ngc") if ".data-" in n]
    raw = bytearray(data.read_bytes())
    if damage == "bit flip":
        raw[len(raw) // 2] ^= 0x40
    else:
        raw = raw[:len(raw) // 3]
    data.write_bytes(bytes(raw))
    code, err = say(capsys, [prefix, tmp_path / "out", "--from", "nvidia"])
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith(f"import_weights.py: error: {prefix}: the checkpoint is damaged ("), \
        err[0]
