"""The models of this repository, the one table every launcher and tool reads instead of keeping
its own list: where each lives, its Task, its commands and what its throughput counts. No
TensorFlow import, nothing of the rest of the repository: ``scripts/gpu_smoke.sh`` asks it for
the models (``python -m common.models``) on the machine that starts a job, and ``setup.py``
reads it by path to build the wheel's package list and console scripts; each package's
``__main__`` asks it for its commands (``common.entry.commands``).

Adding a model: ``docs/adding_a_model.md`` lists every place, this table first
(``tests/test_layout.py`` checks the list against each model of the table).
"""
from __future__ import annotations

import dataclasses
import importlib
import sys


@dataclasses.dataclass(frozen=True)
class Model:
    directory: str  # beside main.py, as NVIDIA names it
    package: str  # the model's code, importable (setup.py maps it to its folder)
    task: str  # module:class of its Task
    item_unit: str  # what its throughput counts
    # Its model card's task and data, as the Hugging Face hub names them (``pipeline_tag``,
    # the dataset's hub id).
    pipeline_tag: str
    dataset: str
    # Its console scripts: ``command`` (main.py) and ``command-prepare`` (prepare_dataset.py),
    # and more as (suffix, ``module:function``) pairs.
    command: str
    more_commands: tuple[tuple[str, str], ...] = ()

    @property
    def folder(self) -> str:
        """The package's folder in the checkout: beside main.py."""
        return f"{self.directory}/{self.package}"

    @property
    def scripts(self) -> dict[str, str]:
        """Console script -> ``module:function`` (the wheel's, ``setup.py``)."""
        return {self.command: f"{self.package}.__main__:main",
                f"{self.command}-prepare": f"{self.package}.__main__:prepare",
                **{self.command + suffix: target for suffix, target in self.more_commands}}

    @property
    def benchmarks(self) -> str:
        """The module of what the benchmark tools ask of the model (its peer, its FLOP count,
        the INT8 table's data and metric): ``<package>.benchmarks``."""
        return f"{self.package}.benchmarks"


MODELS = {
    "resnet50v1.5": Model("resnet50v1.5", "rn50", "rn50.task:ResNetTask", "images",
                          "image-classification", "ILSVRC/imagenet-1k", "tf-resnet50",
                          (("-import-weights", "rn50.__main__:import_weights"),)),
    "ssd320": Model("ssd320", "ssd", "ssd.task:SSDTask", "images", "object-detection",
                    "detection-datasets/coco", "tf-ssd320"),
    "transformerxl": Model("transformerxl", "txl", "txl.task:TransformerXLTask", "tokens",
                           "text-generation", "Salesforce/wikitext", "tf-transformerxl"),
}
# The distribution's other top-level packages: name -> folder (setup.py adds each model's).
SHARED_PACKAGES = {"common": "common", "benchtools": "benchtools", "serving": "serving",
                   "tf_model_scripts": "tf_model_scripts"}


def of_package(package: str) -> Model:
    """The model whose code is ``package``."""
    return next(m for m in MODELS.values() if m.package == package)


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
