"""ImageNet weights users already have, as a checkpoint of this repository's ResNet-50 v1.5
(``resnet50v1.5/import_weights.py``): weights only (``common.checkpoint.store.write_weights``) with
its ``settings.json``, which evaluate, predict, export, ``--finetune_checkpoint`` and SSD320's
``--trunk resnet_v1.5 --backbone_checkpoint`` read like any other checkpoint.

Sources, each by its own names and layouts:

* ``torchvision`` / ``timm``: a ``resnet50`` state dict (``.safetensors``, or ``.pth`` / ``.pt``
  / ``.bin`` where PyTorch is installed): ``conv1.weight``, ``bn1.running_mean``,
  ``layer1.0.downsample.0.weight``, ``fc.weight`` ... (timm's ResNet-50 has torchvision's
  names). The same network as this one: convolutions OIHW -> HWIO, the classifier transposed,
  and PyTorch's symmetric padding recorded (``--padding symmetric``), so the logits are
  torchvision's. Their input normalisation differs from NVIDIA's by under 0.01 standard
  deviations in two channels (means 116.28 and 103.53 against 116.78 and 103.94).
* ``nvidia``: NVIDIA's TensorFlow ResNet-50 v1.5 checkpoints from NGC, by the names of
  DeepLearningExamples' ``TensorFlow/Classification/ConvNets/model/resnet.py``:
  ``resnet50/conv2d/conv2d/kernel``, ``resnet50/btlnck_block_0_0/bottleneck_1/BatchNorm/gamma``,
  ``resnet50/btlnck_block_0_0/shortcut/conv2d/conv2d/kernel``, ``resnet50/output/dense/kernel``
  .... The same network and padding (TensorFlow's ``same``); NVIDIA's classifier has 1001
  outputs, the first for a background class its records never use: it is dropped. Optimizer
  slots, ``global_step`` and loss-scale variables are left.
* ``keras``: ``keras.applications.ResNet50`` weight files (``.h5``, with or without the top).
  That is ResNet-50 v1: the stride of a downsampling block is on its first 1x1 convolution, not
  on the 3x3, so the imported model is an initialisation for fine-tuning, not the same function
  (the importer says so). Its convolutions' biases are folded into the batch norms that follow
  them, its epsilon 1.001e-5 into the variances, and its caffe input (BGR, less the mean, not
  divided by the standard deviation) into the first convolution.

* ``keras_hub``: a keras-hub preset directory (``ResNetBackbone``'s ``config.json`` and
  ``model.weights.h5``; with ``task.json`` and ``task.weights.h5`` the classifier too), as
  ``save_to_preset`` writes it and as ``resnet_50_imagenet`` is downloaded (timm's
  ``resnet50.a1_in1k`` converted): keras-hub's ResNet-50 with ``bottleneck_block`` and no
  pre-activation is ResNet-50 v1.5 with PyTorch's symmetric padding, the same function. The
  preset is read by keras-hub itself (installed beside this TensorFlow; nothing is downloaded),
  layer by layer by its names (``conv1_conv``, ``stack0_block0_1_conv``, ``predictions`` ...);
  its other ResNets (v2's pre-activation, ``_vd``, 18/34's basic blocks) are refused.

Each source's evaluation recipe (``rn50/recipes.py``) is recorded in the checkpoint's settings
(``eval_preprocessing``), so that evaluation, predict, the exports and fine-tuning prepare
images as the source does: torchvision's ``IMAGENET1K_V1`` or ``V2`` (told by ``--recipe``, or
by the file name torchvision downloads, ``resnet50-0676ba61`` / ``resnet50-11ad3fa6``; else V2,
torchvision's default, with a note), timm's ``pretrained_cfg`` (the ``config.json`` that the
Hugging Face hub keeps beside ``model.safetensors``; else ``resnet50.a1_in1k``'s, timm's
default, with a note), keras.applications' own, keras-hub's image converter (the preset's
``preprocessor.json`` or ``image_converter.json``), NVIDIA's for NGC's. ``--recipe nvidia`` (or
any recipe) records another.

Every source tensor is used and every variable of the model set, or the import stops with one
line naming what is missing, left over or mis-shaped. A classifier for another number of
classes than ``--num_classes`` (or none, a ``notop`` file) leaves the classifier fresh, and the
importer says so.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile

import numpy as np

from common.checkpoint import settings as checkpoint_settings
from common.data.imagenet_stats import STD  # TensorFlow-free, as the state-dict reader is
from common.errors import DataError, UsageError, one_line, reported
from rn50 import recipes

SOURCES = ("torchvision", "timm", "nvidia", "keras", "keras_hub")
# Where each source states the terms of its weights, recorded beside the checkpoint and in its
# exports' model card (client.json): the source's own statement, not a summary of it.
TERMS = {
    "torchvision": "torchvision's BSD-3-Clause licence (github.com/pytorch/vision/blob/main/"
                   "LICENSE); its models' documentation says pre-trained weights may carry "
                   "terms of the data they were trained on (ImageNet)",
    "timm": "the model's card on the Hugging Face hub (huggingface.co/timm/<model>)",
    "nvidia": "the checkpoint's page in NVIDIA's NGC catalog (catalog.ngc.nvidia.com)",
    "keras": "Keras' applications documentation (keras.io/api/applications)",
    "keras_hub": "the preset's model card on Kaggle (kaggle.com/models/keras/resnetv1)",
}
BN = ("gamma", "beta", "moving_mean", "moving_variance")


@dataclasses.dataclass
class Imported:
    """What a source gave: weights by (our layer, its weight), the classifier's classes in the
    source (0 without one), the padding its network computes with, and notes to print."""
    weights: dict
    classes: int
    padding: str
    notes: list


# torchvision's download names of ResNet-50's ImageNet weights, by recipe.
TORCHVISION_FILES = {"resnet50-0676ba61": "V1", "resnet50-11ad3fa6": "V2"}
# timm's resnet50 default tag, resnet50.a1_in1k: its pretrained_cfg's evaluation fields.
TIMM_DEFAULT_CFG = {"input_size": (3, 224, 224), "crop_pct": 0.95, "interpolation": "bicubic",
                    "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}


def source_recipe(source: str, path: str, asked: str | None) -> tuple[str, list[str]]:
    """(the recipe to record, notes): ``asked`` (``--recipe``), else the source's own."""
    import json
    if asked:
        named = {"torchvision_v1": recipes.torchvision("V1"),
                 "torchvision_v2": recipes.torchvision("V2"),
                 "keras": recipes.keras_applications()}
        try:
            return (named[asked].spec() if asked in named else recipes.parse(asked).spec()), []
        except ValueError as e:
            raise UsageError(f"--recipe {asked}: {e}") from None
    if source == "torchvision":
        found = next((v for k, v in TORCHVISION_FILES.items() if k in os.path.basename(path)),
                     None)
        if found:
            return recipes.torchvision(found).spec(), []
        return recipes.torchvision("V2").spec(), [
            "recorded torchvision's IMAGENET1K_V2 evaluation recipe (resize 232, torchvision's "
            "default weights); for IMAGENET1K_V1's (resize 256) import with --recipe "
            "torchvision_v1"]
    if source == "timm":
        config = os.path.join(directory_of(path), "config.json")
        try:
            with open(config, encoding="utf-8") as f:
                cfg = json.load(f).get("pretrained_cfg")
        except (OSError, ValueError, AttributeError):
            cfg = None
        if isinstance(cfg, dict):
            try:
                return recipes.timm(cfg).spec(), []
            except ValueError as e:
                raise DataError(f"{config}: {e}") from None
        return recipes.timm(TIMM_DEFAULT_CFG).spec(), [
            f"no pretrained_cfg beside the weights ({config}): recorded resnet50.a1_in1k's "
            "evaluation recipe (timm's default: crop_pct 0.95, bicubic); another tag's is "
            "given with --recipe"]
    if source == "keras":
        return recipes.keras_applications().spec(), []
    if source == "keras_hub":
        return keras_hub_recipe(path)
    return recipes.NVIDIA, []


def directory_of(path: str) -> str:
    return os.path.dirname(os.path.abspath(path))


def _blocks(arch: str):
    """(stage 1..4, block 1..n) of the architecture, as rn50.model builds it."""
    from rn50.model import ARCHS
    for s, n in enumerate(ARCHS[arch].blocks, 1):
        for b in range(1, n + 1):
            yield s, b


def _keras_blocks(arch: str, block_name):
    """(our layer, theirs) of each block's convolutions in the naming keras.applications and
    keras-hub share: ``<block>_1`` to ``_3``, the projection ``<block>_0`` (``block_name(s, b)``
    names stage ``s``'s block ``b``)."""
    for s, b in _blocks(arch):
        theirs = block_name(s, b)
        for k in (1, 2, 3):
            yield f"stage{s}_block{b}_{k}", f"{theirs}_{k}"
        if b == 1:
            yield f"stage{s}_block{b}_proj", f"{theirs}_0"


def _conv(w_oihw):
    return np.transpose(w_oihw, (2, 3, 1, 0))  # PyTorch OIHW -> TensorFlow HWIO


def _take(source: dict, key: str, used: set, where: str):
    if key not in source:
        raise DataError(f"{where} has no {key}: not a ResNet-50 of this architecture")
    used.add(key)
    return np.asarray(source[key], np.float32)


def _leftovers(source, used, where, ignore=lambda k: False):
    extra = sorted(k for k in source if k not in used and not ignore(k))
    if extra:
        raise DataError(f"{where} holds {len(extra)} tensors this ResNet-50 does not have "
                        f"(first: {extra[0]}): another network's weights?")


# --- PyTorch: torchvision and timm ----------------------------------------------------------
def read_state_dict(path: str) -> dict:
    """A PyTorch state dict as numpy arrays: ``.safetensors`` (the safetensors package), or a
    pickled one (``.pth``, ``.pt``, ``.bin``: PyTorch, with ``weights_only``)."""
    if path.endswith(".safetensors"):
        from safetensors import SafetensorError
        from safetensors.numpy import load_file
        try:
            return load_file(path)
        except (SafetensorError, OSError, ValueError) as e:
            raise DataError(f"{path} is not a readable .safetensors file ({one_line(str(e))})"
                            ) from None
    try:
        import torch
    except ImportError:
        raise DataError(f"{path}: reading a pickled PyTorch file needs PyTorch; without it, "
                        "save the state dict as .safetensors (safetensors.torch.save_file)"
                        ) from None
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many types for a file it cannot read
        raise DataError(f"{path} is not a readable PyTorch file ({one_line(str(e))})") from None
    for key in ("state_dict", "model", "model_state_dict"):  # training checkpoints wrap it
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            obj = obj[key]
    if not isinstance(obj, dict):
        raise DataError(f"{path} holds a {type(obj).__name__}, not a state dict")
    return {k: v.float().numpy() for k, v in obj.items() if hasattr(v, "numpy")}


def from_torch(sd: dict, arch: str, where: str) -> Imported:
    sd = {k.removeprefix("module."): v for k, v in sd.items()}  # DistributedDataParallel's
    used, out = set(), {}

    def conv_bn(ours, conv, bn):
        out[(f"{ours}_conv", "kernel")] = _conv(_take(sd, f"{conv}.weight", used, where))
        for w, t in zip(BN, ("weight", "bias", "running_mean", "running_var")):
            out[(f"{ours}_bn", w)] = _take(sd, f"{bn}.{t}", used, where)
        used.add(f"{bn}.num_batches_tracked")  # a counter, not a weight

    conv_bn("stem", "conv1", "bn1")
    for s, b in _blocks(arch):
        torch_block = f"layer{s}.{b - 1}"
        for k in (1, 2, 3):
            conv_bn(f"stage{s}_block{b}_{k}", f"{torch_block}.conv{k}", f"{torch_block}.bn{k}")
        if b == 1:
            conv_bn(f"stage{s}_block{b}_proj", f"{torch_block}.downsample.0",
                    f"{torch_block}.downsample.1")
    classes = 0
    if "fc.weight" in sd:
        out[("logits", "kernel")] = _take(sd, "fc.weight", used, where).T
        out[("logits", "bias")] = _take(sd, "fc.bias", used, where)
        classes = out[("logits", "bias")].shape[0]
        rows = out[("logits", "kernel")].shape
        if out[("logits", "bias")].ndim != 1 or len(rows) != 2 or rows[1] != classes:
            raise DataError(f"{where}: fc.bias {tuple(out[('logits', 'bias')].shape)} does not "
                            f"fit fc.weight {tuple(rows[::-1])}: the source's classifier is "
                            "damaged")
    _leftovers(sd, used, where, ignore=lambda k: k.endswith("num_batches_tracked"))
    return Imported(out, classes, "symmetric", [])


# --- NVIDIA's TensorFlow checkpoints (DeepLearningExamples' names) --------------------------
_NV_SCOPE = "resnet50"
_NV_BN = ("gamma", "beta", "moving_mean", "moving_variance")


def from_nvidia(path: str, arch: str) -> Imported:
    import tensorflow as tf
    try:
        reader = tf.train.load_checkpoint(path)
    except (tf.errors.OpError, ValueError) as e:
        raise DataError(f"{path} is not a readable TensorFlow checkpoint prefix "
                        f"({one_line(getattr(e, 'message', str(e)))[:200]})") from None
    from common.checkpoint import store
    damaged = store.unreadable(path)  # every tensor read: a cut or bit-flipped .data
    if damaged:
        raise DataError(f"{path}: the checkpoint is damaged ({damaged}): download it again")
    names = reader.get_variable_to_shape_map()
    source = _LazyReader(reader, names)
    used, out = set(), {}
    s0 = _NV_SCOPE

    def conv_bn(ours, conv_kernel, bn_scope):
        out[(f"{ours}_conv", "kernel")] = _take(source, conv_kernel, used, path)
        for w in _NV_BN:
            out[(f"{ours}_bn", w)] = _take(source, f"{bn_scope}/BatchNorm/{w}", used, path)

    conv_bn("stem", f"{s0}/conv2d/conv2d/kernel", f"{s0}/conv2d")
    for s, b in _blocks(arch):
        block = f"{s0}/btlnck_block_{s - 1}_{b - 1}"
        for k in (1, 2, 3):
            conv_bn(f"stage{s}_block{b}_{k}", f"{block}/bottleneck_{k}/conv2d/kernel",
                    f"{block}/bottleneck_{k}")
        if b == 1:
            conv_bn(f"stage{s}_block{b}_proj", f"{block}/shortcut/conv2d/conv2d/kernel",
                    f"{block}/shortcut/conv2d")
    notes, classes = [], 0
    if f"{s0}/output/dense/kernel" in names:
        kernel = _take(source, f"{s0}/output/dense/kernel", used, path)
        bias = _take(source, f"{s0}/output/dense/bias", used, path)
        if kernel.shape[1] == 1001:  # NVIDIA's background class 0, never a label
            kernel, bias = kernel[:, 1:], bias[1:]
            notes.append("NVIDIA's classifier has 1001 outputs; the first (a background class "
                         "its ImageNet records never use) was dropped: 1000 classes")
        out[("logits", "kernel")], out[("logits", "bias")] = kernel, bias
        classes = bias.shape[0]
    # The model's tensors are under its scope; an optimizer slot extends a model tensor's name.
    _leftovers({k: None for k in names if k.startswith(s0 + "/")}, used, path,
               ignore=lambda k: any(k.startswith(u + "/") for u in used))
    others = [k for k in names if not k.startswith(s0 + "/")]
    if others:
        notes.append(f"left {len(others)} training-state tensors outside {s0}/ "
                     f"({', '.join(sorted(others)[:3])}{', ...' if len(others) > 3 else ''})")
    return Imported(out, classes, "same", notes)


class _LazyReader(dict):
    """A checkpoint reader as a mapping (tensors read when taken)."""

    def __init__(self, reader, names):
        super().__init__({k: None for k in names})
        self.reader = reader

    def __getitem__(self, key):
        return self.reader.get_tensor(key)


# --- keras.applications.ResNet50 ------------------------------------------------------------
KERAS_EPSILON = 1.001e-5


def _load_every_weight(model, path: str) -> None:
    """``model.load_weights(path)``, refused when Keras leaves a layer as initialised: newer
    Keras 3 releases then warn ("Skipping nested container ... will retain their
    freshly-initialized weights"), one warning per block, instead of raising, so that a file of
    another network printed 60 lines before its error (or none, had the rest fitted)."""
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.load_weights(path)
    left = [str(w.message) for w in caught if "freshly-initialized" in str(w.message)]
    if left:
        raise ValueError(f"{len(left)} layer group(s) of the model not in the file "
                         f"({left[0]})")
    for w in caught:  # anything else Keras said, as it said it
        warnings.showwarning(w.message, w.category, w.filename, w.lineno)


def _keras_classes(path: str) -> int | None:
    """The classes of the classifier in a ``keras.applications.ResNet50`` weight file: the
    second dimension of its one (2048, N) kernel (the legacy ``.h5`` and Keras 3's
    ``.weights.h5`` alike), None without one (``notop``)."""
    try:
        import h5py
        found = []
        with h5py.File(path, "r") as f:
            f.visititems(lambda name, obj: found.append(obj.shape[1]) if isinstance(
                obj, h5py.Dataset) and len(obj.shape) == 2 and obj.shape[0] == 2048 else None)
    except (ImportError, OSError, ValueError):
        return None  # Keras' own load says what is wrong with the file
    return found[0] if len(found) == 1 else None


def from_keras(path: str, arch: str) -> Imported:
    if arch != "resnet50":
        raise UsageError("--from keras: keras.applications has ResNet50 only (--arch resnet50)")
    import keras
    app, errors = None, []
    classes = _keras_classes(path)  # a classifier trained for its own classes, or none
    for top in ((True, False) if classes else (False,)):
        candidate = keras.applications.ResNet50(weights=None, include_top=top,
                                                classes=classes or 1000)
        try:
            _load_every_weight(candidate, path)
            app = candidate
            break
        except Exception as e:  # Keras raises ValueError, KeyError, OSError for a bad file
            errors.append(one_line(str(e))[:200])
    if app is None:
        raise DataError(f"{path} does not fit keras.applications.ResNet50 with or without its "
                        f"top ({errors[0]})")
    out = {}

    def conv_bn(ours, theirs, first=False):
        kernel, bias = (np.asarray(w, np.float32) for w in app.get_layer(f"{theirs}_conv")
                        .get_weights())
        gamma, beta, mean, var = (np.asarray(w, np.float32) for w in app.get_layer(f"{theirs}_bn")
                                  .get_weights())
        if first:  # caffe input: BGR less the mean; ours RGB (less the mean) / std
            kernel = kernel[:, :, ::-1, :] * np.asarray(STD, np.float32)[None, None, :, None]
        out[(f"{ours}_conv", "kernel")] = kernel
        out[(f"{ours}_bn", "gamma")], out[(f"{ours}_bn", "beta")] = gamma, beta
        out[(f"{ours}_bn", "moving_mean")] = mean - bias  # BN(conv + b) = BN'(conv)
        out[(f"{ours}_bn", "moving_variance")] = var + (KERAS_EPSILON - 1e-5)

    conv_bn("stem", "conv1", first=True)
    for ours, theirs in _keras_blocks(arch, lambda s, b: f"conv{s + 1}_block{b}"):
        conv_bn(ours, theirs)
    classes = 0
    if any(layer.name == "predictions" for layer in app.layers):
        kernel, bias = app.get_layer("predictions").get_weights()
        out[("logits", "kernel")], out[("logits", "bias")] = kernel, bias
        classes = bias.shape[0]
    notes = ["keras.applications.ResNet50 is ResNet-50 v1 (a downsampling block's stride on its "
             "first 1x1 convolution): these weights initialise this v1.5 network for "
             "fine-tuning; they do not compute what they computed there"]
    return Imported(out, classes, "symmetric", notes)


# --- keras-hub ------------------------------------------------------------------------------
# keras-hub's image converter of resnet_50_imagenet (its loader's from timm's resnet50.a1_in1k
# pretrained_cfg): for a preset whose converter is not on disk.
KERAS_HUB_DEFAULT_CONVERTER = {
    "image_size": [224, 224], "interpolation": "bicubic", "antialias": False,
    "crop_to_aspect_ratio": True, "scale": [1 / 255 / s for s in (0.229, 0.224, 0.225)],
    "offset": [-m / s for m, s in zip((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))]}
# What keras-hub's ResNetBackbone config must say for this network, by --arch.
KERAS_HUB_ARCHS = {"resnet50": [3, 4, 6, 3]}


def _preset_json(preset: str, name: str) -> dict | None:
    import json
    path = os.path.join(preset, name)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError) as e:
        raise DataError(f"{path} is not readable JSON ({one_line(str(e))[:200]})") from None
    if not isinstance(value, dict):
        raise DataError(f"{path} is not a keras-hub config (a JSON object)")
    return value


def _keras_hub_converter(preset: str) -> dict | None:
    """The image converter's config a preset keeps: ``preprocessor.json``'s, else
    ``image_converter.json``'s."""
    pre = _preset_json(preset, "preprocessor.json")
    if pre is not None:
        converter = pre.get("config", {}).get("image_converter")
        if isinstance(converter, dict):
            return converter.get("config", converter)
    conv = _preset_json(preset, "image_converter.json")
    return None if conv is None else conv.get("config", conv)


def keras_hub_recipe(preset: str) -> tuple[str, list[str]]:
    converter = _keras_hub_converter(preset)
    if converter is None:
        return recipes.keras_hub(KERAS_HUB_DEFAULT_CONVERTER).spec(), [
            f"no image converter in {preset} (preprocessor.json, image_converter.json): recorded "
            "resnet_50_imagenet's (224, bicubic, the central square; another is given with "
            "--recipe)"]
    try:
        return recipes.keras_hub(converter).spec(), []
    except ValueError as e:
        raise DataError(f"{preset}: keras-hub's image converter: {e} (--recipe records "
                        "another)") from None


def from_keras_hub(preset: str, arch: str) -> Imported:
    if not os.path.isdir(preset):
        raise DataError(f"{preset} is not a directory: --from keras_hub takes a keras-hub preset "
                        "directory (config.json, model.weights.h5), as save_to_preset writes "
                        "it or kagglehub downloads it")
    config = _preset_json(preset, "config.json")
    if config is None or config.get("class_name") != "ResNetBackbone":
        found = "none" if config is None else config.get("class_name")
        raise DataError(f"{preset}/config.json: not a keras-hub ResNetBackbone preset (its "
                        f"class: {found})")
    cfg = config.get("config", {})
    if not isinstance(cfg, dict):
        raise DataError(f"{preset}/config.json: its \"config\" is a {type(cfg).__name__}, not "
                        "the backbone's settings (a JSON object): not a preset save_to_preset "
                        "wrote")
    want = {"block_type": "bottleneck_block", "use_pre_activation": False,
            "input_conv_filters": [64], "input_conv_kernel_sizes": [7],
            "stackwise_num_filters": [64, 128, 256, 512],
            "stackwise_num_strides": [1, 2, 2, 2]}
    want["stackwise_num_blocks"] = KERAS_HUB_ARCHS.get(arch)
    if want["stackwise_num_blocks"] is None:
        raise UsageError("--from keras_hub: keras-hub's ResNet-50 only (--arch resnet50)")
    wrong = [f"{k} {cfg.get(k)!r}" for k, v in want.items() if cfg.get(k) != v]
    if wrong:
        raise DataError(f"{preset}: keras-hub's ResNet with {', '.join(wrong)} is not ResNet-50 "
                        "v1.5 (resnet_50_imagenet's: bottleneck blocks, no pre-activation, "
                        "blocks [3, 4, 6, 3])")
    try:
        import keras_hub
    except ImportError as e:
        raise DataError(f"--from keras_hub reads the preset with keras-hub, which is not "
                        f"installed ({one_line(str(e))}): pip install --no-deps "
                        f"keras-hub regex tokenizers (its requirements pin tensorflow-text, which "
                        f"would replace this TensorFlow)") from None
    task = os.path.exists(os.path.join(preset, "task.json"))
    notes = [] if task else [f"{preset} has no task.json: a backbone preset, without a "
                             "classifier"]
    if task and not os.path.exists(os.path.join(preset, "task.weights.h5")):
        # keras-hub would build the classifier with a random head and call it the preset's.
        task = False
        notes = [f"{preset} has task.json but no task.weights.h5: the classifier's weights are "
                 "not there, so the backbone alone is imported (the classifier starts fresh)"]
    try:
        loaded = (keras_hub.models.ImageClassifier if task else
                  keras_hub.models.ResNetBackbone).from_preset(preset)
    except Exception as e:  # keras-hub and Keras raise many types for a damaged preset
        raise DataError(f"keras-hub cannot load {preset} ({one_line(str(e))[:200]})") from None
    backbone = loaded.backbone if task else loaded
    out, used = {}, set()

    def layer(name):
        try:
            found = backbone.get_layer(name)
        except ValueError:
            raise DataError(f"{preset}: the backbone has no layer {name}") from None
        used.add(name)
        return [np.asarray(w, np.float32) for w in found.get_weights()]

    def conv_bn(ours, theirs):
        (out[(f"{ours}_conv", "kernel")],) = layer(f"{theirs}_conv")
        for w, value in zip(BN, layer(f"{theirs}_bn")):
            out[(f"{ours}_bn", w)] = value
        if backbone.get_layer(f"{theirs}_bn").epsilon != 1e-5:
            raise DataError(f"{preset}: {theirs}_bn's epsilon is "
                            f"{backbone.get_layer(f'{theirs}_bn').epsilon}, not 1e-5")

    conv_bn("stem", "conv1")
    for ours, theirs in _keras_blocks(arch, lambda s, b: f"stack{s - 1}_block{b - 1}"):
        conv_bn(ours, theirs)
    extra = [w.path for w in backbone.weights if w.path.split("/")[0] not in used]
    if extra:
        raise DataError(f"{preset}: {len(extra)} weights this ResNet-50 does not have (first: "
                        f"{extra[0]})")
    classes = 0
    if task:
        head = loaded.get_layer("predictions")
        if getattr(loaded, "pooling", "avg") != "avg" or head.activation.__name__ not in (
                "linear", "softmax"):
            raise DataError(f"{preset}: a classifier with {loaded.pooling} pooling and "
                            f"{head.activation.__name__} is not this network's head (average "
                            "pooling, a dense layer)")
        kernel, bias = (np.asarray(w, np.float32) for w in head.get_weights())
        out[("logits", "kernel")], out[("logits", "bias")] = kernel, bias
        classes = bias.shape[0]
    return Imported(out, classes, "symmetric", notes)


# --- the checkpoint -------------------------------------------------------------------------
def read(source: str, path: str, arch: str) -> Imported:
    if source in ("torchvision", "timm"):
        return from_torch(read_state_dict(path), arch, path)
    if source == "nvidia":
        return from_nvidia(path, arch)
    if source == "keras":
        return from_keras(path, arch)
    if source == "keras_hub":
        return from_keras_hub(path, arch)
    raise UsageError(f"--from must be one of {', '.join(SOURCES)}")


def build(imported: Imported, arch: str, num_classes: int | None, image_size: int,
          recipe: str = recipes.NVIDIA):
    """Our model with the imported weights (``num_classes``: the source's when None); returns
    (model, its settings, notes)."""
    from rn50.model import build_resnet
    notes = list(imported.notes)
    classes = num_classes or imported.classes or 1000
    weights = dict(imported.weights)
    if imported.classes != classes:
        weights = {k: v for k, v in weights.items() if k[0] != "logits"}
        notes.append(f"the classifier starts fresh: the source has "
                     f"{imported.classes or 'no'} classes, the model {classes}; the trunk is "
                     "imported")
    bad = [(k, int(np.size(v) - np.isfinite(v).sum())) for k, v in weights.items()
           if not np.isfinite(v).all()]
    if bad:
        raise DataError(f"the source holds non-finite values (NaN or infinity): {bad[0][1]} in "
                        f"{'/'.join(bad[0][0])}" + (f" and {len(bad) - 1} other tensor(s)"
                                                    if len(bad) > 1 else "")
                        + ": a damaged file, or weights of a run that diverged")
    model = build_resnet(arch, classes, image_size, padding=imported.padding)
    targets = {(layer.name, w.path.split("/")[-1]): w for layer in model.layers
               for w in layer.weights}
    unset = sorted(set(targets) - set(weights)
                   - ({k for k in targets if k[0] == "logits"} if imported.classes != classes
                      else set()))
    if unset:
        raise DataError(f"the source sets no value for {len(unset)} of the model's weights "
                        f"(first: {'/'.join(unset[0])})")
    for key, value in weights.items():
        if key not in targets:
            raise DataError(f"the model has no weight {'/'.join(key)} (--arch {arch}?)")
        if tuple(targets[key].shape) != tuple(value.shape):
            blame = "the source's classifier" if key[0] == "logits" else f"--arch {arch}"
            raise DataError(f"{'/'.join(key)}: the source's is {tuple(value.shape)}, the "
                            f"model's {tuple(targets[key].shape)} ({blame}?)")
        targets[key].assign(value)
    settings = {"arch": arch, "num_classes": classes, "image_size": image_size,
                "padding": imported.padding, "eval_preprocessing": recipe}
    return model, settings, notes


# Every weight of each architecture with ImageNet's 1000 classes, batch-norm statistics
# included: what its weights-only checkpoint holds, 4 bytes each.
ALL_WEIGHTS = {"resnet50": 25_610_152, "resnet_tiny": 387_808}


def check_output(out_dir: str, arch: str = "resnet50") -> None:
    """Before the import: ``out_dir`` can take the checkpoint (a directory, writable, with room
    for the architecture's weights, no checkpoint in it)."""
    from common import files
    from common.checkpoint import store
    need = int(1.1 * 4 * ALL_WEIGHTS[arch]) + (1 << 20)
    files.check_output_dir(out_dir, "out_dir", need, "the checkpoint needs")
    if store.on_disk(out_dir):
        raise DataError(f"{out_dir} already holds checkpoints: import into an empty directory")


def read_labels(labels: str) -> list[str]:
    """The class names of ``--labels``, one a line."""
    try:
        with open(labels, encoding="utf-8") as f:
            names = [line.strip() for line in f if line.strip()]
    except OSError as e:
        raise DataError(f"--labels {labels}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise DataError(f"--labels {labels} is not text: give a file of class names, one a "
                        "line") from None
    if not names:
        raise DataError(f"--labels {labels} names no class")
    return names


def write(model, settings: dict, out_dir: str, names: list[str] | None, log=print,
          source: dict | None = None) -> str:
    """The weights-only checkpoint, settings.json and labels.txt (``names``), moved into
    ``out_dir`` once complete; a labels.txt an earlier import left there goes when this one has
    none. Returns the checkpoint's prefix."""
    import tensorflow as tf

    from common.checkpoint import store
    check_output(out_dir)
    if names and len(names) != settings["num_classes"]:
        raise DataError(f"--labels lists {len(names)} classes; the model has "
                        f"{settings['num_classes']}")
    stage = tempfile.mkdtemp(prefix=".import-", dir=out_dir)
    try:
        prefix = store.write_weights(stage, model, step=0)
        checkpoint_settings.write(stage, "resnet50v1.5", settings, source)
        if names:
            with open(os.path.join(stage, "labels.txt"), "w", encoding="utf-8") as f:
                f.write("".join(n + "\n" for n in names))
        stale = os.path.join(out_dir, "labels.txt")
        if not names and os.path.exists(stale):
            os.remove(stale)
            log(f"note: removed {stale}, an earlier import's: this one has no --labels")
        for name in os.listdir(stage):
            os.replace(os.path.join(stage, name), os.path.join(out_dir, name))
    except OSError as e:
        raise DataError(f"cannot write the checkpoint in {out_dir} ({e.strerror or e})") from None
    except tf.errors.OpError as e:  # a full disk: ResourceExhaustedError
        raise DataError(f"cannot write the checkpoint in {out_dir} "
                        f"({one_line(e.message)[:200]})") from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return os.path.join(out_dir, os.path.basename(prefix))


def main(argv=None) -> int:
    """``import_weights.py SRC OUT --from SOURCE``: one line on stderr for a bad input."""
    import argparse
    p = argparse.ArgumentParser(
        prog="import_weights.py",
        description="Writes a ResNet-50 v1.5 checkpoint of this repository from torchvision, "
                    "timm, NVIDIA (NGC TensorFlow), keras.applications or keras-hub ImageNet "
                    "weights.")
    p.add_argument("src", help="the weights: a .safetensors/.pth state dict (torchvision, timm), "
                   "a TensorFlow checkpoint prefix (nvidia), a .h5 file (keras), a preset "
                   "directory (keras_hub)")
    p.add_argument("out_dir", help="an empty directory: the checkpoint and its settings.json")
    p.add_argument("--from", dest="source", required=True, choices=SOURCES)
    p.add_argument("--arch", default="resnet50", choices=("resnet50", "resnet_tiny"))
    p.add_argument("--num_classes", type=int, help="classes of the model (default: the "
                   "source's); another number keeps the trunk and starts the classifier fresh")
    p.add_argument("--image_size", type=int, default=224, help="recorded as the model's input "
                   "size (default: 224)")
    p.add_argument("--labels", help="a file of class names, one a line, kept beside the "
                   "checkpoint as labels.txt (predict names its classes)")
    p.add_argument("--recipe", help="the evaluation recipe to record: torchvision_v1, "
                   "torchvision_v2, keras, nvidia, or key:value pairs (rn50/recipes.py); "
                   "default: the source's own")
    args = p.parse_args(argv)
    return reported("import_weights.py", lambda: _import(args), {UsageError: 2, DataError: 1})


def _import(args) -> int:
    check_output(args.out_dir, args.arch)  # before the import, not after it
    names = read_labels(args.labels) if args.labels else None
    recipe, recipe_notes = source_recipe(args.source, args.src, args.recipe)
    imported = read(args.source, args.src, args.arch)
    model, settings, notes = build(imported, args.arch, args.num_classes, args.image_size, recipe)
    notes += recipe_notes
    import datetime
    source = {"from": f"{args.source} weights imported by import_weights.py",
              "file": os.path.abspath(args.src), "terms": TERMS[args.source],
              "imported": datetime.date.today().isoformat()}
    prefix = write(model, settings, args.out_dir, names, source=source)
    for note in notes:
        print(f"note: {note}")
    print(f"imported {len(imported.weights)} tensors of {args.source}'s ResNet-50 into {prefix} "
          f"({settings['num_classes']} classes, --padding {settings['padding']}; evaluated "
          f"with --eval_preprocessing {recipe}); use it with "
          f"--model_dir {args.out_dir} (evaluate, predict, export), --finetune_checkpoint "
          f"{args.out_dir}, or SSD320's --trunk resnet_v1.5 --backbone_checkpoint {args.out_dir}")
    return 0
