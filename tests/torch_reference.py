"""Runs in tests/torch_env.sh's environment (PyTorch, no TensorFlow): torchvision's and timm's
own ``resnet50`` with random weights, and what they compute, as files for
tests/test_import_weights.py to import and compare against.

    python torch_reference.py OUT_DIR [--size 224] [--images 2] [--photos JPEG ...]

Writes, for NAME in torchvision and timm: NAME.safetensors and NAME.pth (the state dict),
NAME_logits.npy (eval mode); and images.npy, the normalised inputs (N, H, W, 3). With
``--photos``, each framework's own evaluation pipeline on those files too: torchvision's
``IMAGENET1K_V1`` and ``V2`` transforms (``photos_torchvision_v1.npy``, ``..._v2.npy``) and timm's
transform of the model's ``pretrained_cfg`` (``photos_timm.npy``), whose cfg is written as the
Hugging Face hub keeps it, ``timm/config.json`` beside ``timm/model.safetensors``. Batch norm
weights are drawn at random and its statistics measured on the images (a fresh model's are 0
and 1, which would hide a swapped mean and variance, and let the activations grow a thousandfold).
"""
import argparse
import os

import numpy as np
import timm
import torch
import torchvision
from safetensors.torch import save_file


def randomise(model: torch.nn.Module, x: torch.Tensor, seed: int) -> None:
    """Random affine weights; statistics measured on ``x`` (one pass in training mode, the
    average of its batch), so that the activations stay of order one through the network."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                n = m.num_features
                m.weight.copy_(0.5 + torch.rand(n, generator=g))
                m.bias.copy_(0.2 * torch.randn(n, generator=g))
                m.reset_running_stats()
                m.momentum = None  # a cumulative average: one pass sets the statistics
            elif isinstance(m, torch.nn.Linear):
                m.bias.copy_(0.1 * torch.randn(m.out_features, generator=g))
        model.train()
        model(x)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out_dir")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--images", type=int, default=2)
    p.add_argument("--photos", nargs="*", default=[])
    args = p.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    torch.manual_seed(0)
    images = np.random.default_rng(0).standard_normal(
        (args.images, args.size, args.size, 3)).astype(np.float32)
    np.save(os.path.join(args.out_dir, "images.npy"), images)
    x = torch.from_numpy(images).permute(0, 3, 1, 2).contiguous()  # NHWC -> NCHW
    models = {"torchvision": torchvision.models.resnet50(weights=None),
              "timm": timm.create_model("resnet50", pretrained=False)}
    for seed, (name, model) in enumerate(models.items()):
        randomise(model, x, seed)
        model.eval()
        with torch.no_grad():
            logits = model(x).numpy()
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        save_file(state, os.path.join(args.out_dir, f"{name}.safetensors"))
        torch.save(state, os.path.join(args.out_dir, f"{name}.pth"))
        np.save(os.path.join(args.out_dir, f"{name}_logits.npy"), logits)
        if args.photos:
            photos(model, name, args.photos, args.out_dir, state)
        print(f"{name} {torchvision.__version__ if name == 'torchvision' else timm.__version__}: "
              f"logits {logits.shape}, |max| {np.abs(logits).max():.3f}")


def photos(model, name, paths, out_dir, state):
    """The framework's own evaluation pipeline on the photographs, its logits saved."""
    import json

    from PIL import Image
    if name == "torchvision":
        weights = torchvision.models.ResNet50_Weights
        transforms = {"torchvision_v1": weights.IMAGENET1K_V1.transforms(),
                      "torchvision_v2": weights.IMAGENET1K_V2.transforms()}
    else:
        cfg = timm.data.resolve_data_config({}, model=model)
        transforms = {"timm": timm.data.create_transform(**cfg)}
        os.makedirs(os.path.join(out_dir, "timm"), exist_ok=True)
        save_file(state, os.path.join(out_dir, "timm", "model.safetensors"))
        pretrained = {k: v for k, v in model.pretrained_cfg.items()
                      if isinstance(v, (str, int, float, list, tuple, type(None)))}
        with open(os.path.join(out_dir, "timm", "config.json"), "w") as f:
            json.dump({"architecture": "resnet50", "pretrained_cfg": pretrained}, f)
    for key, transform in transforms.items():
        x = torch.stack([transform(Image.open(p).convert("RGB")) for p in paths])
        with torch.no_grad():
            np.save(os.path.join(out_dir, f"photos_{key}.npy"), model(x).numpy())
        print(f"{key}: {transform}".replace("\n", " "))


if __name__ == "__main__":
    main()
