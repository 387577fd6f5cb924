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

Each source's evaluation recipe (``rn50/eval_preprocessing.py``) is recorded in the checkpoint's
settings (``eval_preprocessing``), so that evaluation, predict, the exports and fine-tuning prepare
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
from collections.abc import Callable

import numpy as np

from common.checkpoint import settings as checkpoint_settings
from common.errors import DataError, UsageError, one_line, reported
from rn50 import eval_preprocessing, weights_keras, weights_nvidia, weights_torch
from rn50.imported import Imported


def _named_by_file(path: str, sha256: str) -> tuple[dict, list[str]]:
    """No name the source's files carry: --weights_name gives one."""
    return {}, []


def _keras_hub_identity(path: str, sha256: str) -> tuple[dict, list[str]]:
    """A keras-hub preset is named by its directory, as Kaggle and ``from_preset`` name it."""
    return {"name": os.path.basename(os.path.normpath(path))}, []


@dataclasses.dataclass(frozen=True)
class Source:
    """One source of ImageNet weights, all that the importer knows of it: how its files are
    read into this network (``read(path, arch)``: its names mapped to ours), the evaluation
    recipe its weights are measured with (``recipe(path, name)``: the spec and notes), what
    names the weights (``identify(path, sha256)``: their name, hub id, SPDX licence and the
    accuracy the source publishes, where its files say), and where it states the terms of its
    weights (recorded beside the checkpoint and in its exports' model card: the source's own
    statement, not a summary of it)."""
    read: Callable[[str, str], Imported]
    recipe: Callable[[str, str | None], tuple[str, list[str]]]
    terms: str
    identify: Callable[[str, str], tuple[dict, list[str]]] = _named_by_file


SOURCES = {
    "torchvision": Source(
        weights_torch.read, weights_torch.torchvision_recipe,
        "torchvision's BSD-3-Clause licence (github.com/pytorch/vision/blob/main/LICENSE); its "
        "models' documentation says pre-trained weights may carry terms of the data they were "
        "trained on (ImageNet)", weights_torch.torchvision_identity),
    "timm": Source(weights_torch.read, weights_torch.timm_recipe,
                   "the model's card on the Hugging Face hub (huggingface.co/{hub_id})",
                   weights_torch.timm_identity),
    "nvidia": Source(weights_nvidia.from_nvidia, lambda path, name: (eval_preprocessing.NVIDIA, []),
                     "the checkpoint's page in NVIDIA's NGC catalog (catalog.ngc.nvidia.com)"),
    "keras": Source(weights_keras.from_keras, lambda path, name: weights_keras.keras_recipe(path),
                    "Keras' applications documentation (keras.io/api/applications)"),
    "keras_hub": Source(weights_keras.from_keras_hub,
                        lambda path, name: weights_keras.keras_hub_recipe(path),
                        "the preset's model card on Kaggle (kaggle.com/models/keras/resnetv1)",
                        _keras_hub_identity),
}


def identity(source: str, path: str, name: str | None) -> tuple[dict, list[str]]:
    """(what the checkpoint records of the weights' source, notes): the source, the weights'
    name (``name``, --weights_name, over what the files say), the file's name and SHA-256 (no
    path of this machine), the licence and terms, the published accuracy, the day."""
    import datetime

    from common.export.card import file_sha256
    if source not in SOURCES:
        raise UsageError(f"--from must be one of {', '.join(SOURCES)}")
    src = SOURCES[source]
    try:
        sha256 = file_sha256(path)
    except OSError:  # read() names what is missing or unreadable
        sha256 = None
    found, notes = src.identify(path, sha256) if sha256 else ({}, [])
    if name and source == "torchvision" and sha256 and any(
            sha256.startswith(h) and n == name for h, n in weights_torch.TORCHVISION_FILES.items()):
        found = weights_torch.torchvision_named(name)  # the hash confirms: torchvision's figures
    elif name and name != found.get("name"):
        # The user's word (--weights_name), which no hash here confirms: recorded as a claim,
        # without the published figures of the weights it names (a random-weight file named
        # IMAGENET1K_V2 was carded with torchvision's 0.80858).
        named = weights_torch.torchvision_named(name) if source == "torchvision" else found
        found = {**{k: v for k, v in named.items() if k not in ("name", "published")},
                 "name": name, "name_claimed": True}
        notes = [*notes, f"--weights_name {name}: recorded as your claim (no published figures): "
                 f"the file's SHA-256 ({(sha256 or '?')[:8]}...) is not one this repository knows "
                 f"as {name}"]
    hub_id = found.get("hub_id") or "timm/" + (found.get("name") or "")
    return {"source": source, "from": f"{source} weights imported by import_weights.py",
            "name": found.get("name"),
            "file_name": os.path.basename(os.path.normpath(path)), "sha256": sha256,
            **{k: found[k] for k in ("hub_id", "license", "published", "name_claimed")
               if found.get(k)},
            "terms": src.terms.format(hub_id=hub_id),
            "imported": datetime.date.today().isoformat()}, notes


def source_recipe(source: str, path: str, asked: str | None, name: str | None = None
                  ) -> tuple[str, list[str]]:
    """(the recipe to record, notes): ``asked`` (``--recipe``), else the source's own for the
    weights named ``name``."""
    if asked:
        named = {"torchvision_v1": eval_preprocessing.torchvision("V1"),
                 "torchvision_v2": eval_preprocessing.torchvision("V2"),
                 "keras": eval_preprocessing.keras_applications()}
        try:
            return (named[asked] if asked in named else
                    eval_preprocessing.parse(asked)).spec(), []  # at the weights' 224
        except ValueError as e:
            raise UsageError(f"--recipe {asked}: {e}") from None
    return SOURCES[source].recipe(path, name)


def read(source: str, path: str, arch: str) -> Imported:
    if source not in SOURCES:
        raise UsageError(f"--from must be one of {', '.join(SOURCES)}")
    return SOURCES[source].read(path, arch)


def build(imported: Imported, arch: str, num_classes: int | None, image_size: int,
          recipe: str = eval_preprocessing.NVIDIA):
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
    import sys
    # Its name as the user typed it: import_weights.py, or the wheel's console script.
    typed = os.path.basename(sys.argv[0]) if argv is None and sys.argv else ""
    prog = typed if typed and typed not in ("__main__.py", "-c", "-m") else "import_weights.py"
    p = argparse.ArgumentParser(
        prog=prog,
        description="Writes a ResNet-50 v1.5 checkpoint of this repository from torchvision, "
                    "timm, NVIDIA (NGC TensorFlow), keras.applications or keras-hub ImageNet "
                    "weights.")
    p.add_argument("src", help="the weights: a .safetensors/.pth state dict (torchvision, timm), "
                   "a TensorFlow checkpoint prefix (nvidia), a .h5 file (keras), a preset "
                   "directory (keras_hub)")
    p.add_argument("out_dir", help="an empty directory: the checkpoint and its settings.json")
    p.add_argument("--from", dest="source", required=True, choices=list(SOURCES))
    p.add_argument("--arch", default="resnet50", choices=("resnet50", "resnet_tiny"))
    p.add_argument("--num_classes", type=int, help="classes of the model (default: the "
                   "source's); another number keeps the trunk and starts the classifier fresh")
    p.add_argument("--image_size", type=int, default=224, help="recorded as the model's input "
                   "size (default: 224)")
    p.add_argument("--labels", help="a file of class names, one a line, kept beside the "
                   "checkpoint as labels.txt (predict names its classes)")
    p.add_argument("--weights_name", help="the weights' name at their source, recorded in the "
                   "checkpoint and every export's model card (torchvision: IMAGENET1K_V1 or "
                   "IMAGENET1K_V2, which also chooses the recipe; default: what the files say, "
                   "torchvision's download name or timm's pretrained_cfg)")
    p.add_argument("--recipe", help="the evaluation recipe to record: torchvision_v1, "
                   "torchvision_v2, keras, nvidia, or key:value pairs "
                   "(rn50/eval_preprocessing.py); default: the source's own")
    args = p.parse_args(argv)
    return reported(prog, lambda: _import(args), {UsageError: 2, DataError: 1})


def _import(args) -> int:
    # A file or preset that is not there, before the source's reader (torchvision's said that
    # PyTorch is needed to read it).
    if args.source != "nvidia" and not os.path.exists(args.src):
        kind = "directory" if args.source == "keras_hub" else "file"
        raise DataError(f"{args.src}: no such {kind} (the {args.source} weights to import)")
    check_output(args.out_dir, args.arch)  # before the import, not after it
    names = read_labels(args.labels) if args.labels else None
    source, id_notes = identity(args.source, args.src, args.weights_name)
    recipe, recipe_notes = source_recipe(args.source, args.src, args.recipe, source["name"])
    imported = read(args.source, args.src, args.arch)
    model, settings, notes = build(imported, args.arch, args.num_classes, args.image_size, recipe)
    notes += id_notes + recipe_notes
    prefix = write(model, settings, args.out_dir, names, source=source)
    for note in notes:
        print(f"note: {note}")
    print(f"imported {len(imported.weights)} tensors of {args.source}'s ResNet-50 into {prefix} "
          f"({settings['num_classes']} classes, --padding {settings['padding']}; evaluated "
          f"with --eval_preprocessing {recipe}); use it with "
          f"--model_dir {args.out_dir} (evaluate, predict, export), --finetune_checkpoint "
          f"{args.out_dir}, or SSD320's --trunk resnet_v1.5 --backbone_checkpoint {args.out_dir}")
    return 0
