"""How evaluation prepares an image (``--eval_preprocessing``): NVIDIA's recipe, or the one the
imported weights were measured with, which ``import_weights.py`` records in the checkpoint's
settings so that evaluation, predict and every export use it (a fine-tuning run keeps it;
``--eval_preprocessing nvidia`` goes back to NVIDIA's).

A recipe is ``nvidia`` or ``key:value`` pairs joined by commas:

* ``resize``: the shorter side before the central crop, for a crop of ``crop`` pixels (scaled
  with ``--image_size``), or ``squash``: both sides to the input size, no crop
  (keras.applications' ``load_img(target_size=...)``), or keras-hub's image converter, which
  resizes with ``keras.layers.Resizing`` in floating point: ``aspect``, the largest central
  region of the input's aspect (``crop_to_aspect_ratio``, keras-hub's default) to the input
  size, or ``stretch``, the whole image to it;
* ``interpolation``: ``bilinear``, ``bicubic`` or ``nearest``; ``antialias``: 1 or 0 (PIL and
  torchvision's resizes on images are antialiased);
* ``mean`` and ``std``: per RGB channel on the 0..255 scale, ``a/b/c``.

The recipes of the sources (``SOURCES``): torchvision's ``IMAGENET1K_V1`` (resize 256,
bilinear) and ``IMAGENET1K_V2`` (232, bilinear), timm's from the model's ``pretrained_cfg``
(``crop_pct``, ``interpolation``, ``mean``, ``std``: ``resnet50.a1_in1k`` is 235, bicubic),
keras.applications' (squash to the size, nearest, caffe's BGR mean subtraction, which the
importer folds into the first convolution: in RGB, the mean and NVIDIA's standard deviation),
and keras-hub's from the preset's image converter (``resnet_50_imagenet``: aspect, bicubic
without antialiasing, timm's mean and std). Other than NVIDIA's and keras-hub's, a recipe
resizes and crops as torchvision does (the long side truncated, the crop's offset rounded half
to even), so that the logits are the source's own pipeline's.

No TensorFlow here: the flag is checked before the model is built.
"""
from __future__ import annotations

import dataclasses
import enum
import math

from common.data.imagenet_stats import MEAN, STD, TORCH_MEAN, UNIT_MEAN, UNIT_STD

NVIDIA = "nvidia"
NVIDIA_CROP_FRACTION = 0.875  # 224 of 256
NVIDIA_MEAN, NVIDIA_STD = MEAN, STD  # NVIDIA's recipe's: ImageNet's, defined once
TORCH_STD = STD  # torchvision's, x 255: the same three numbers
INTERPOLATIONS = ("bilinear", "bicubic", "nearest")
LIMIT = 1e6  # the largest mean or std (and 1 / the smallest std) a recipe takes


# How an image becomes the network's input, one mode per recipe:
#   nvidia:  NVIDIA's own resize and central crop (the long side rounded, the offset rounded half
#            up, as DALI's crop_pos 0.5), on TensorFlow's decode: the recipe the models train with;
#   crop:    the shorter side to ``resize``, then the central ``crop``, as torchvision applies it to
#            a PIL image (torchvision's, timm's);
#   squash:  both sides to the input size, no crop (keras.applications' ``load_img``);
#   aspect:  keras.layers.Resizing in float with ``crop_to_aspect_ratio`` (keras-hub's default);
#   stretch: keras.layers.Resizing in float, the whole image.
class Mode(enum.StrEnum):
    NVIDIA = "nvidia"
    CROP = "crop"
    SQUASH = "squash"
    ASPECT = "aspect"
    STRETCH = "stretch"


# keras.layers.Resizing with crop_to_aspect_ratio or without
KERAS_MODES = (Mode.ASPECT, Mode.STRETCH)


@dataclasses.dataclass(frozen=True)
class EvalPreprocessing:
    """How evaluation prepares an image: what ``--eval_preprocessing`` names, parsed once (the
    task's ``eval_prep``) and handed as this object to evaluation, predict, DALI and the
    exports; each pipeline dispatches on its ``mode`` once. Not the training recipe
    (``--preset``, a model's flag defaults)."""
    mode: Mode  # a Mode's name is taken too (its value: "crop")
    crop: int
    resize: int | None = None  # the shorter side for a ``crop`` crop (modes nvidia and crop)
    interpolation: str = "bilinear"
    antialias: bool = True
    mean: tuple = NVIDIA_MEAN
    std: tuple = NVIDIA_STD

    def __post_init__(self):
        try:
            object.__setattr__(self, "mode", Mode(self.mode))
        except ValueError:
            raise ValueError(f"mode {self.mode}: one of {', '.join(Mode)}") from None

    def resize_for(self, size: int) -> int | None:
        """The shorter side for a central crop of ``size`` (None: the whole image to the size)."""
        if self.mode == "nvidia":
            return int(round(size / NVIDIA_CROP_FRACTION))
        if self.mode == "crop":
            return self.resize if size == self.crop else int(round(self.resize * size / self.crop))
        return size if self.mode == "aspect" else None  # aspect: the central square, resized

    def spec(self) -> str:
        if self.mode == "nvidia":
            return NVIDIA
        resize = self.resize if self.mode == "crop" else self.mode
        return ",".join([f"resize:{resize}",
                         f"crop:{self.crop}", f"interpolation:{self.interpolation}",
                         f"antialias:{int(self.antialias)}",
                         "mean:" + "/".join(_num(v) for v in self.mean),
                         "std:" + "/".join(_num(v) for v in self.std)])

    def describe(self) -> dict:
        """What ``client.json`` says of it."""
        return {"recipe": self.spec(), "mode": self.mode.value,
                "resize_shorter_side": self.resize_for(self.crop),
                "interpolation": self.interpolation, "antialias": self.antialias,
                "crop": {"aspect": "central, of the image's aspect before the resize",
                         "stretch": "none (stretched)", "squash": "none (squashed)"}.get(
                             self.mode, "central"),
                "mean": list(self.mean), "std": list(self.std)}


def _num(v: float) -> str:
    return f"{v:.6g}"


def nvidia(size: int = 224) -> EvalPreprocessing:
    """NVIDIA's: the shorter side to size / 0.875, the central crop, ImageNet's mean and std."""
    return EvalPreprocessing("nvidia", size, int(round(size / NVIDIA_CROP_FRACTION)))


def parse(text: str | None, size: int | None = 224) -> EvalPreprocessing:
    """The evaluation preprocessing of a flag value (None: NVIDIA's) for ``size`` pixels;
    ``ValueError`` naming what is wrong. ``size`` None checks the text alone: the flag's
    check, before the run knows its image size (the command line's, else the checkpoint's);
    a crop left out is that size, so whether it fits the resize is the run's check (the
    task's ``eval_prep``)."""
    if text in (None, "", NVIDIA):
        return nvidia(size or 224)
    fields = {}
    for part in text.split(","):
        key, sep, value = part.partition(":")
        if not sep or not value:
            raise ValueError(f"'{part}' is not key:value (keys: resize, crop, interpolation, "
                             "antialias, mean, std)")
        fields[key.strip()] = value.strip()
    unknown = set(fields) - {"resize", "crop", "interpolation", "antialias", "mean", "std"}
    if unknown:
        raise ValueError(f"unknown key {sorted(unknown)[0]} (keys: resize, crop, "
                         "interpolation, antialias, mean, std)")
    try:
        mode = fields.get("resize", "squash")
        mode = Mode(mode) if mode in (Mode.SQUASH, *KERAS_MODES) else Mode.CROP
        resize = int(fields["resize"]) if mode == "crop" else None
        crop = int(fields["crop"]) if "crop" in fields else size
        mean = tuple(float(v) for v in fields.get("mean", "/".join(map(str, NVIDIA_MEAN)))
                     .split("/"))
        std = tuple(float(v) for v in fields.get("std", "/".join(map(str, NVIDIA_STD)))
                    .split("/"))
    except ValueError as e:
        raise ValueError(f"a number is wrong ({e})") from None
    interpolation = fields.get("interpolation", "bilinear")
    if interpolation not in INTERPOLATIONS:
        raise ValueError(f"interpolation {interpolation}: one of {', '.join(INTERPOLATIONS)}")
    if fields.get("antialias", "1") not in ("0", "1"):
        raise ValueError(f"antialias {fields['antialias']}: 1 or 0")
    if len(mean) != 3 or len(std) != 3 or min(std) <= 0:
        raise ValueError("mean and std take three values, a/b/c, the std above 0")
    if not all(math.isfinite(v) and abs(v) <= LIMIT for v in mean + std) or min(std) < 1 / LIMIT:
        raise ValueError(f"mean {'/'.join(map(_num, mean))} and std {'/'.join(map(_num, std))}: "
                         f"finite numbers within +-{LIMIT:g}, the std at least {1 / LIMIT:g} "
                         "(on the 0..255 scale; anything else makes every input NaN or the "
                         "same)")
    if crop is not None and (crop < 1 or (resize is not None and resize < crop)):
        raise ValueError(f"resize {resize} and crop {crop}: the crop must fit the resize")
    return EvalPreprocessing(mode, crop, resize, interpolation,
                             fields.get("antialias", "1") == "1", mean, std)


def torchvision(version: str) -> EvalPreprocessing:
    """torchvision's ``ResNet50_Weights.IMAGENET1K_<version>.transforms()``."""
    return EvalPreprocessing("crop", 224, {"V1": 256, "V2": 232}[version], "bilinear", True,
                             TORCH_MEAN, TORCH_STD)


def timm(cfg: dict) -> EvalPreprocessing:
    """timm's evaluation transform of a ``pretrained_cfg`` (``resolve_data_config`` and
    ``create_transform``: the shorter side to floor(size / crop_pct), then the central crop;
    timm's ``crop_mode`` center only)."""
    size = int(cfg.get("input_size", (3, 224, 224))[-1])
    crop_pct = float(cfg.get("crop_pct", 0.875))
    mode = cfg.get("crop_mode", "center")
    if mode != "center":
        raise ValueError(f"timm's crop_mode {mode}: only 'center' is reproduced")
    interpolation = cfg.get("interpolation", "bilinear")
    if interpolation not in INTERPOLATIONS:
        raise ValueError(f"timm's interpolation {interpolation}: one of "
                         f"{', '.join(INTERPOLATIONS)}")
    return EvalPreprocessing("crop", size, math.floor(size / crop_pct), interpolation, True,
                  tuple(255 * float(v) for v in cfg.get("mean", UNIT_MEAN)),
                  tuple(255 * float(v) for v in cfg.get("std", UNIT_STD)))


def keras_applications(size: int = 224) -> EvalPreprocessing:
    """keras.applications.ResNet50's: ``load_img(target_size=...)`` (nearest, squashed) and
    caffe's BGR mean subtraction, folded by the importer into the first convolution (with
    NVIDIA's standard deviation): in RGB."""
    return EvalPreprocessing("squash", size, None, "nearest", False, (123.68, 116.779, 103.939),
                             NVIDIA_STD)


def keras_hub(converter: dict) -> EvalPreprocessing:
    """keras-hub's image converter (``ImageConverter.get_config()``, as a preset's
    ``preprocessor.json`` or ``image_converter.json`` holds it): ``keras.layers.Resizing`` to
    ``image_size`` (``crop_to_aspect_ratio``: aspect, else stretch), then ``x * scale + offset``,
    which is ``(x - mean) / std`` with ``std = 1 / scale`` and ``mean = -offset / scale``."""
    size = converter.get("image_size")
    if not (isinstance(size, (list, tuple)) and len(size) == 2 and size[0] == size[1]
            and isinstance(size[0], int) and size[0] > 0):
        raise ValueError(f"image_size {size}: a square size is reproduced, not this one")
    if converter.get("pad_to_aspect_ratio"):
        raise ValueError("pad_to_aspect_ratio: padding to the aspect is not reproduced")
    interpolation = converter.get("interpolation", "bilinear")
    if interpolation not in INTERPOLATIONS:
        raise ValueError(f"interpolation {interpolation}: one of {', '.join(INTERPOLATIONS)} "
                         "is reproduced")

    def per_channel(value, default):
        value = default if value is None else value
        values = [float(v) for v in value] if isinstance(value, (list, tuple)) else [
            float(value)] * 3
        if len(values) != 3:
            raise ValueError(f"{value}: one value or three (RGB)")
        return values

    try:
        scale, offset = per_channel(converter.get("scale"), 1.0), per_channel(
            converter.get("offset"), 0.0)
    except (TypeError, ValueError) as e:
        raise ValueError(f"scale and offset: {e}") from None
    if min(scale) <= 0:
        raise ValueError(f"scale {scale}: above 0 is reproduced")
    return EvalPreprocessing("aspect" if converter.get("crop_to_aspect_ratio", True) else "stretch",
                             size[0], None, interpolation, bool(converter.get("antialias", False)),
                             tuple(0.0 - o / s for o, s in zip(offset, scale)),
                             tuple(1 / s for s in scale))
