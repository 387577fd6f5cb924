"""The tables every launcher and tool reads instead of keeping its own copy: the precision
presets (what ``amp``, ``tf32`` and ``fp32`` mean as ``main.py`` flags) and the models of this
repository. No TensorFlow import: ``scripts/launch.sh`` asks it for flags
(``python -m common.presets --flags amp``) on the machine that starts a job.

Adding a model: ``docs/adding_a_model.md`` lists every place, this table first.
"""
from __future__ import annotations

import dataclasses
import sys

# Precision preset -> main.py flags. fp32 turns TF32 off (on Ampere and later it is on by
# default); on a CPU, amp means bfloat16 (common/precision.py decides the dtype).
PRECISION_FLAGS = {"fp32": ("--no_tf32",), "tf32": ("--tf32",), "amp": ("--amp",)}


def precision_flags(name: str) -> list[str]:
    if name not in PRECISION_FLAGS:
        raise ValueError(f"precision must be {', '.join(PRECISION_FLAGS)}, not {name}")
    return list(PRECISION_FLAGS[name])


def compute_dtype(name: str, gpu: bool) -> str:
    """The type the matmuls of a preset run in: what a benchmark's ceiling is measured in."""
    if name == "amp":
        return "float16" if gpu else "bfloat16"
    return "float32"


@dataclasses.dataclass(frozen=True)
class Model:
    directory: str  # beside main.py, as NVIDIA names it
    package: str  # the model's code, importable (pyproject.toml maps it)
    task: str  # module:class of its Task
    item_unit: str  # what its throughput counts

    @property
    def benchmarks(self) -> str:
        """The module of what the benchmark tools ask of the model (its peer, its FLOP count,
        the INT8 table's data and metric): ``<package>.benchmarks``."""
        return f"{self.package}.benchmarks"


MODELS = {
    "resnet50v1.5": Model("resnet50v1.5", "rn50", "rn50.task:ResNetTask", "images"),
    "ssd320": Model("ssd320", "ssd", "ssd.task:SSDTask", "images"),
    "transformerxl": Model("transformerxl", "txl", "txl.task:TransformerXLTask", "tokens"),
}


def benchmarks(model: str):
    """The model's module for the benchmark tools (``Model.benchmarks``; imports it)."""
    import importlib
    return importlib.import_module(MODELS[model].benchmarks)


def log_names(model: str):
    """The model's names in its logs (``<package>.config.LOG_NAMES``, ``common/log_names.py``;
    no TensorFlow), or those of the ResNet-50 pattern for a run of no model of this table."""
    import importlib
    if model not in MODELS:
        from common.log_names import resnet_pattern
        return resnet_pattern("items/s", {})
    return importlib.import_module(f"{MODELS[model].package}.config").LOG_NAMES


def task_class(model: str):
    """The Task class of a model of ``MODELS`` (imports TensorFlow)."""
    import importlib
    module, name = MODELS[model].task.split(":")
    return getattr(importlib.import_module(module), name)


def _main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[1] == "--flags" and argv[2] in PRECISION_FLAGS:
        print(" ".join(PRECISION_FLAGS[argv[2]]))
        return 0
    if len(argv) == 2 and argv[1] == "--models":
        print(" ".join(MODELS))
        return 0
    print(f"usage: python -m common.presets --flags {{{','.join(PRECISION_FLAGS)}}} | --models",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
