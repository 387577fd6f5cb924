"""torchvision's and timm's ResNet-50 weights: a ``resnet50`` state dict (``.safetensors``, or
``.pth`` / ``.pt`` / ``.bin`` where PyTorch is installed), by its names (``conv1.weight``,
``layer1.0.downsample.0.weight``, ``fc.weight`` ...; timm's ResNet-50 has torchvision's), and each
one's evaluation recipe: torchvision's ``IMAGENET1K_V1`` or ``V2`` by the file name torchvision
downloads, timm's ``pretrained_cfg`` from the hub's ``config.json`` beside the weights."""
from __future__ import annotations

import json
import os

from common.errors import DataError, one_line
from rn50 import eval_preprocessing
from rn50.imported import BN, Imported, blocks, conv_kernel, leftovers, take

# torchvision's download names of ResNet-50's ImageNet weights, by recipe.
TORCHVISION_FILES = {"resnet50-0676ba61": "V1", "resnet50-11ad3fa6": "V2"}
# timm's resnet50 default tag, resnet50.a1_in1k: its pretrained_cfg's evaluation fields.
TIMM_DEFAULT_CFG = {"input_size": (3, 224, 224), "crop_pct": 0.95, "interpolation": "bicubic",
                    "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}


def torchvision_recipe(path: str) -> tuple[str, list[str]]:
    """(torchvision's recipe for the weights at ``path``, notes)."""
    found = next((v for k, v in TORCHVISION_FILES.items() if k in os.path.basename(path)),
                 None)
    if found:
        return eval_preprocessing.torchvision(found).spec(), []
    return eval_preprocessing.torchvision("V2").spec(), [
        "recorded torchvision's IMAGENET1K_V2 evaluation recipe (resize 232, torchvision's "
        "default weights); for IMAGENET1K_V1's (resize 256) import with --recipe "
        "torchvision_v1"]


def timm_recipe(path: str) -> tuple[str, list[str]]:
    """(timm's recipe from the ``pretrained_cfg`` beside ``path``, notes)."""
    config = os.path.join(os.path.dirname(os.path.abspath(path)), "config.json")
    try:
        with open(config, encoding="utf-8") as f:
            cfg = json.load(f).get("pretrained_cfg")
    except (OSError, ValueError, AttributeError):
        cfg = None
    if isinstance(cfg, dict):
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
