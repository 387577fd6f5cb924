"""The names a model's figures carry in its logs: NVIDIA's DLLogger keys for that model, so that
the parsers and dashboards built on DeepLearningExamples' logs read ours. Each model declares
its ``LogNames`` in its ``config.py`` (no TensorFlow: the report and the benchmark tools read
them too); every log begins with a METADATA record (DLLogger's ``unit`` and ``format``) for each.

Where NVIDIA's script of a model logged no such figure, the name follows the ResNet-50 script's
pattern. Figures NVIDIA's scripts have no counterpart for keep this repository's names
(``final_loss``, ``skipped_steps``, ``eval_images``, ``timed_steps``...).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping

PERCENTILES = (50, 90, 95, 99)  # the latency percentiles every benchmark records


@dataclasses.dataclass(frozen=True)
class LogNames:
    unit: str  # what the throughputs count per second: "images/s", "tokens/s"
    loss: str  # a training step record's loss
    lr: str  # ... its learning rate
    step_throughput: str  # ... its throughput since the last record
    train_throughput: str  # a training run's (and the training benchmark's) summary
    eval_throughput: str  # an evaluation's
    infer_throughput: str  # the inference benchmark's
    latency_avg: str  # "{phase}": "eval" (the inference benchmark, as NVIDIA's) or "train"
    latency_percentile: str  # "{phase}" and "{p}"
    # The evaluation's own results (the task's metric names) -> (the logged name, its unit)
    metrics: Mapping[str, tuple[str, str | None]] = dataclasses.field(default_factory=dict)
    perplexity: str | None = None  # a training step record's exp(loss), for language models

    @property
    def per_step(self) -> str:
        """The benchmarks' count of items in one step: "images_per_step", "tokens_per_step"."""
        return f"{self.unit.split('/')[0]}_per_step"

    def metric(self, name: str) -> str:
        """The logged name of the evaluation result ``name`` (``eval_<name>`` where NVIDIA's
        script has none)."""
        return self.metrics[name][0] if name in self.metrics else f"eval_{name}"

    def latency(self, phase: str, stat: str | int) -> str:
        """``stat``: "avg", or a percentile (``PERCENTILES``)."""
        if stat == "avg":
            return self.latency_avg.format(phase=phase)
        return self.latency_percentile.format(phase=phase, p=stat)

    def latencies(self, phase: str) -> list[str]:
        return [self.latency(phase, s) for s in ("avg", *PERCENTILES)]

    def units(self) -> Iterator[tuple[str, str | None, str]]:
        """(name, unit, format) of every figure: the METADATA records a log starts with."""
        rate = ":.1f"
        yield self.loss, None, ":.4f"
        yield self.lr, None, ":.6f"
        if self.perplexity:
            yield self.perplexity, None, ":.2f"
        seen = set()
        for name in (self.step_throughput, self.train_throughput, self.eval_throughput,
                     self.infer_throughput):
            if name not in seen:
                seen.add(name)
                yield name, self.unit, rate
        for phase in ("eval", "train"):
            for name in self.latencies(phase):
                yield name, "ms", ":.3f"
        for name, unit in self.metrics.values():
            yield name, unit, ":.4f"


def resnet_pattern(unit: str, metrics: Mapping[str, tuple[str, str | None]]) -> LogNames:
    """NVIDIA's ResNet-50 scripts' names (``main.py``'s METADATA, ``runner.py``'s records,
    ``training_hooks.py``'s step records): the pattern for a model whose script had none."""
    return LogNames(unit=unit, loss="total_loss", lr="learning_rate",
                    step_throughput="imgs_per_sec" if unit == "images/s" else "items_per_sec",
                    train_throughput="train_throughput", eval_throughput="eval_throughput",
                    infer_throughput="eval_throughput", latency_avg="{phase}_latency_avg",
                    latency_percentile="{phase}_latency_p{p}", metrics=metrics)
