"""One pass over every rank's evaluation data, in the task's form of evaluation.

Metrics that are sums (accuracy, perplexity): each rank updates its own over its shard
(carrying a stateful model's state from batch to batch), then the metrics' variables are added
up over ranks, which gives the global metrics. Metrics that need every prediction at once (COCO
AP): each rank's per-example outputs are gathered from every rank, in order, and rank 0
summarises the whole split once (``Task.gathers_eval_outputs``).

One evaluation input pipeline serves every evaluation of a run (a DALI pipeline is not rebuilt
each time: ``common/data/dali.py``'s ``EvalPass``).
"""
from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from common import task as task_lib
from common.data.input_errors import read_batches
from common.errors import DataError


class Evaluator:
    def __init__(self, task, ctx, model: Callable, check_inputs: Callable[[str], None]):
        """``model()`` gives the model to evaluate (the inference copy, made on first use);
        ``ctx.capabilities.on_device`` places the input pipeline; ``check_inputs``
        reads the task's device-side input checks."""
        self.task, self.dist, self.log = task, ctx.dist, ctx.logger
        self.xla = ctx.precision.xla
        self.ctx, self.model, self.check_inputs = ctx, model, check_inputs
        self.metrics = list(task.eval_metrics())
        self._step = None
        self._data = None

    def evaluate(self, step: int, epoch: int | None = None) -> dict:
        """The results of one pass, logged at ``step``."""
        if self.task.gathers_eval_outputs:
            results, items, seconds = self._gathered()
        else:
            results, items, seconds = self._summed()
        results[self.task.config.LOG_NAMES.eval_throughput] = items / seconds
        self.log.log((epoch or 0, step), results, tb_step=step, tb_prefix="eval")
        return results

    def batches(self):
        if self._data is None:
            self._data = self.ctx.capabilities.on_device(self.task.eval_dataset())
        return read_batches(self._data, lambda: task_lib.locate_bad_record(self.task, "eval"))

    def _summed(self) -> tuple[dict, int, float]:
        task, model, metrics = self.task, self.model(), self.metrics
        if self._step is None:
            self._step = tf.function(
                lambda batch, state: task.eval_update(model, batch, metrics, state),
                jit_compile=self.xla, autograph=False)
        for m in metrics:
            m.reset_state()
        start, items, state = time.perf_counter(), 0, task.initial_state(model, "eval")
        for batch in self.batches():
            state = self._step(batch, state)
            items += task.items_in(batch)
        self.check_inputs("eval")
        seconds = time.perf_counter() - start
        total = self._total_items(items)
        for m in metrics:
            for var, value in zip(m.variables, self.dist.sum([v.value for v in m.variables])):
                var.assign(value)
        results = {task.config.LOG_NAMES.metric(m.name): float(m.result()) for m in metrics}
        return {**results, f"eval_{task.item_unit}": total}, items, seconds

    def _gathered(self) -> tuple[dict, int, float]:
        task, model = self.task, self.model()
        if self._step is None:
            # Only the forward pass goes to XLA: post-processing such as NMS has no XLA kernel.
            forward = tf.function(lambda x: model(x, training=False), jit_compile=self.xla,
                                  autograph=False)
            self._step = tf.function(
                lambda batch: task.eval_outputs(lambda x, training=False: forward(x), batch),
                autograph=False)
        start, items, outputs = time.perf_counter(), 0, []
        for batch in self.batches():
            outputs.append({k: v.numpy() for k, v in self._step(batch).items()})
            items += task.items_in(batch)
        seconds = time.perf_counter() - start
        total = self._total_items(items)
        if self.dist.any(not outputs):  # every rank must take part in the gather
            raise DataError("a process got no evaluation examples: there are fewer "
                            "evaluation examples than processes")
        gathered = self.dist.allgather(
            {k: np.concatenate([o[k] for o in outputs]) for k in outputs[0]})
        results = self.dist.broadcast_object(
            {task.config.LOG_NAMES.metric(k): v for k, v in task.summarize(gathered).items()}
            if self.dist.is_chief else None)
        return {**results, f"eval_{task.item_unit}": total}, items, seconds

    def check_before_training(self) -> None:
        """Before the first step of ``train_and_evaluate``: one batch from every rank's shard,
        through the real pipeline, then the task's own checks of what the evaluation reads
        besides its batches (``Task.check_eval_inputs``). A missing, empty or unreadable split
        stops the run now instead of an epoch later."""
        first = next(self.batches(), None)
        self.task.check_eval_inputs(first)
        items = 0 if first is None else self.task.items_in(first)
        del first
        total = int(self.dist.sum([tf.constant(items, tf.int64)])[0])
        if total == 0:
            raise DataError(f"the evaluation data is empty ({self.task.empty_eval_hint})")
        if self.task.gathers_eval_outputs and self.dist.any(items == 0):
            raise DataError("a process got no evaluation examples: there are fewer evaluation "
                            "examples than processes")

    def _total_items(self, items: int) -> int:
        """Items evaluated over every rank; an empty evaluation stops the run."""
        total = int(self.dist.sum([tf.constant(items, tf.int64)])[0])
        if total == 0:
            raise DataError("the evaluation data is empty")
        return total
