"""The models of this repository, the one table every launcher and tool reads instead of keeping
its own list: where each lives, its Task and what its throughput counts. No TensorFlow import:
``scripts/gpu_smoke.sh`` asks it for the models (``python -m common.models``) on the machine
that starts a job.

Adding a model: ``docs/adding_a_model.md`` lists every place, this table first.
"""
from __future__ import annotations

import dataclasses
import importlib
import sys


@dataclasses.dataclass(frozen=True)
class Model:
    directory: str  # beside main.py, as NVIDIA names it
    package: str  # the model's code, importable (pyproject.toml maps it)
    task: str  # module:class of its Task
    item_unit: str  # what its throughput counts
    # Its model card's task and data, as the Hugging Face hub names them (``pipeline_tag``,
    # the dataset's hub id).
    pipeline_tag: str
    dataset: str

    @property
    def benchmarks(self) -> str:
        """The module of what the benchmark tools ask of the model (its peer, its FLOP count,
        the INT8 table's data and metric): ``<package>.benchmarks``."""
        return f"{self.package}.benchmarks"


MODELS = {
    "resnet50v1.5": Model("resnet50v1.5", "rn50", "rn50.task:ResNetTask", "images",
                          "image-classification", "ILSVRC/imagenet-1k"),
    "ssd320": Model("ssd320", "ssd", "ssd.task:SSDTask", "images", "object-detection",
                    "detection-datasets/coco"),
    "transformerxl": Model("transformerxl", "txl", "txl.task:TransformerXLTask", "tokens",
                           "text-generation", "Salesforce/wikitext"),
}


def benchmarks(model: str):
    """The model's module for the benchmark tools (``Model.benchmarks``; imports it)."""
    return importlib.import_module(MODELS[model].benchmarks)


def log_names(model: str):
    """The model's names in its logs (``<package>.config.LOG_NAMES``,
    ``common/runtime/log_names.py``; no TensorFlow), or those of the ResNet-50 pattern for a run of
    no model of this table."""
    if model not in MODELS:
        from common.runtime.log_names import resnet_pattern
        return resnet_pattern("items/s", {})
    return importlib.import_module(f"{MODELS[model].package}.config").LOG_NAMES


def task_class(model: str):
    """The Task class of a model of ``MODELS`` (imports TensorFlow)."""
    module, name = MODELS[model].task.split(":")
    return getattr(importlib.import_module(module), name)


if __name__ == "__main__":  # python -m common.models: their names, for the shell scripts
    if sys.argv[1:]:
        print("usage: python -m common.models", file=sys.stderr)
        sys.exit(2)
    print(" ".join(MODELS))
