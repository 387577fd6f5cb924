"""keras.applications' ResNet50 weight files (``.h5``: ResNet-50 v1 on this v1.5 network, an
initialisation for fine-tuning) and keras-hub's ResNet-50 presets (v1.5 with symmetric padding,
the same function), each with its evaluation recipe: keras.applications' own, keras-hub's image
converter."""
from __future__ import annotations

import os

import numpy as np

from common.data.imagenet_stats import STD, UNIT_MEAN, UNIT_STD
from common.errors import DataError, UsageError, one_line
from rn50 import eval_preprocessing
from rn50.imported import BN, Imported, keras_blocks

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
    for ours, theirs in keras_blocks(arch, lambda s, b: f"conv{s + 1}_block{b}"):
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
    "crop_to_aspect_ratio": True, "scale": [1 / 255 / s for s in UNIT_STD],
    "offset": [-m / s for m, s in zip(UNIT_MEAN, UNIT_STD)]}
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
        return eval_preprocessing.keras_hub(KERAS_HUB_DEFAULT_CONVERTER).spec(), [
            f"no image converter in {preset} (preprocessor.json, image_converter.json): recorded "
            "resnet_50_imagenet's (224, bicubic, the central square; another is given with "
            "--recipe)"]
    try:
        return eval_preprocessing.keras_hub(converter).spec(), []
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
    for ours, theirs in keras_blocks(arch, lambda s, b: f"stack{s - 1}_block{b - 1}"):
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


def keras_recipe(path: str) -> tuple[str, list[str]]:
    """keras.applications' recipe (the same for every file)."""
    return eval_preprocessing.keras_applications().spec(), []
