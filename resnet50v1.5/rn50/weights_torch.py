"""torchvision's and timm's ResNet-50 weights: a ``resnet50`` state dict (``.safetensors``, or
``.pth`` / ``.pt`` / ``.bin`` where PyTorch is installed), by its names (``conv1.weight``,
``layer1.0.downsample.0.weight``, ``fc.weight`` ...; timm's ResNet-50 has torchvision's), and each
one's evaluation recipe: torchvision's ``IMAGENET1K_V1`` or ``V2`` by the file name torchvision
downloads, timm's ``pretrained_cfg`` from the hub's ``config.json`` beside the weights."""
from __future__ import annotations

import json
import os
import re

from common.data.imagenet_stats import UNIT_MEAN, UNIT_STD
from common.errors import DataError, one_line
from rn50 import eval_preprocessing
from rn50.imported import BN, Imported, blocks, conv_kernel, leftovers, take

# torchvision's download names of ResNet-50's ImageNet weights: the file name's hash (the start
# of the file's SHA-256, which torchvision's download checks) -> the weights' name.
TORCHVISION_FILES = {"0676ba61": "IMAGENET1K_V1", "11ad3fa6": "IMAGENET1K_V2"}
# What torchvision publishes of them (``ResNet50_Weights.<name>.meta["_metrics"]``, ImageNet-1k).
TORCHVISION_PUBLISHED = {"IMAGENET1K_V1": {"top1_accuracy": 0.7613, "top5_accuracy": 0.92862},
                         "IMAGENET1K_V2": {"top1_accuracy": 0.80858, "top5_accuracy": 0.95434}}
# timm's resnet50 default tag, resnet50.a1_in1k: its pretrained_cfg's evaluation fields.
TIMM_DEFAULT_CFG = {"input_size": (3, 224, 224), "crop_pct": 0.95, "interpolation": "bicubic",
                    "mean": UNIT_MEAN, "std": UNIT_STD}
# The hub's licence ids (lower case) as SPDX spells them.
SPDX = {"apache-2.0": "Apache-2.0", "mit": "MIT", "bsd-3-clause": "BSD-3-Clause",
        "cc-by-4.0": "CC-BY-4.0", "cc-by-nc-4.0": "CC-BY-NC-4.0", "cc0-1.0": "CC0-1.0"}


def torchvision_identity(path: str, sha256: str) -> tuple[dict, list[str]]:
    """(the weights' name and what torchvision publishes of them, notes): the name from
    torchvision's download name, ``resnet50-<hash>.pth``, when the file's SHA-256 begins with
    that hash (torchvision's own check); a renamed file is named with --weights_name."""
    match = re.search(r"resnet50-([0-9a-f]{8})", os.path.basename(path))
    name = TORCHVISION_FILES.get(match.group(1)) if match else None
    if name and not sha256.startswith(match.group(1)):
        return {}, [f"{os.path.basename(path)} is named as torchvision's {name} but its "
                    f"SHA-256 begins {sha256[:8]}: not recorded as {name}"]
    return torchvision_named(name), []


def torchvision_named(name: str | None) -> dict:
    out = {"name": name, "license": "BSD-3-Clause"}
    if name in TORCHVISION_PUBLISHED:
        out["published"] = {**TORCHVISION_PUBLISHED[name], "dataset": "imagenet-1k",
                            "reference": f"torchvision.models.ResNet50_Weights.{name}"}
    return out


def torchvision_recipe(path: str, name: str | None = None) -> tuple[str, list[str]]:
    """(torchvision's recipe for the weights named ``name`` (IMAGENET1K_V1 or V2), notes)."""
    if name in TORCHVISION_PUBLISHED:
        return eval_preprocessing.torchvision(name[-2:]).spec(), []
    return eval_preprocessing.torchvision("V2").spec(), [
        "recorded torchvision's IMAGENET1K_V2 evaluation recipe (resize 232, torchvision's "
        "default weights); for IMAGENET1K_V1's (resize 256) import with --weights_name "
        "IMAGENET1K_V1 or --recipe torchvision_v1"]


def _timm_cfg(path: str) -> tuple[str, dict | None]:
    config = os.path.join(os.path.dirname(os.path.abspath(path)), "config.json")
    try:
        with open(config, encoding="utf-8") as f:
            cfg = json.load(f).get("pretrained_cfg")
    except (OSError, ValueError, AttributeError):
        cfg = None
    return config, cfg if isinstance(cfg, dict) else None


def timm_identity(path: str, sha256: str) -> tuple[dict, list[str]]:
    """(the weights' hub id, name and licence from the ``pretrained_cfg`` beside them, notes)."""
    _, cfg = _timm_cfg(path)
    if not cfg:
        return {}, []
    hub_id = cfg.get("hf_hub_id")
    name = (hub_id.split("/")[-1] if isinstance(hub_id, str) else
            ".".join(str(cfg[k]) for k in ("architecture", "tag") if cfg.get(k)) or None)
    licence = cfg.get("license")
    out = {"name": name, "hub_id": hub_id if isinstance(hub_id, str) else None}
    if isinstance(licence, str):
        out["license"] = SPDX.get(licence.lower(), licence)
    return out, []


def timm_recipe(path: str, name: str | None = None) -> tuple[str, list[str]]:
    """(timm's recipe from the ``pretrained_cfg`` beside ``path``, notes)."""
    config, cfg = _timm_cfg(path)
    if cfg:
        try:
            return eval_preprocessing.timm(cfg).spec(), []
        except ValueError as e:
            raise DataError(f"{config}: {e}") from None
    return eval_preprocessing.timm(TIMM_DEFAULT_CFG).spec(), [
        f"no pretrained_cfg beside the weights ({config}): recorded resnet50.a1_in1k's "
        "evaluation recipe (timm's default: crop_pct 0.95, bicubic); another tag's is "
        "given with --recipe"]


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
        out[(f"{ours}_conv", "kernel")] = conv_kernel(take(sd, f"{conv}.weight", used, where))
        for w, t in zip(BN, ("weight", "bias", "running_mean", "running_var")):
            out[(f"{ours}_bn", w)] = take(sd, f"{bn}.{t}", used, where)
        used.add(f"{bn}.num_batches_tracked")  # a counter, not a weight

    conv_bn("stem", "conv1", "bn1")
    for s, b in blocks(arch):
        torch_block = f"layer{s}.{b - 1}"
        for k in (1, 2, 3):
            conv_bn(f"stage{s}_block{b}_{k}", f"{torch_block}.conv{k}", f"{torch_block}.bn{k}")
        if b == 1:
            conv_bn(f"stage{s}_block{b}_proj", f"{torch_block}.downsample.0",
                    f"{torch_block}.downsample.1")
    classes = 0
    if "fc.weight" in sd:
        out[("logits", "kernel")] = take(sd, "fc.weight", used, where).T
        out[("logits", "bias")] = take(sd, "fc.bias", used, where)
        classes = out[("logits", "bias")].shape[0]
        rows = out[("logits", "kernel")].shape
        if out[("logits", "bias")].ndim != 1 or len(rows) != 2 or rows[1] != classes:
            raise DataError(f"{where}: fc.bias {tuple(out[('logits', 'bias')].shape)} does not "
                            f"fit fc.weight {tuple(rows[::-1])}: the source's classifier is "
                            "damaged")
    leftovers(sd, used, where, ignore=lambda k: k.endswith("num_batches_tracked"))
    return Imported(out, classes, "symmetric", [])


# --- NVIDIA's TensorFlow checkpoints (DeepLearningExamples' names) --------------------------


def read(path: str, arch: str) -> Imported:
    return from_torch(read_state_dict(path), arch, path)
