"""One pass over every rank's evaluation data, in the task's form of evaluation.

Metrics that are sums (accuracy, perplexity): each rank updates its own over its shard
(carrying a stateful model's state from batch to batch), then the metrics' variables are added
up over ranks, which gives the global metrics. Metrics that need every prediction at once (COCO
AP): each rank's per-example outputs are gathered from every rank, in order, and rank 0
summarises the whole split once (``Task.gathers_eval_outputs``).

One evaluation input pipeline serves every evaluation of a run (a DALI pipeline is not rebuilt
each time: ``common/data/dali.py``'s ``EvalPass``).

Every batch reaches the step in one shape (``Task.eval_padding``: rows, or a language model's
time steps), the last one padded, with ``valid`` marking its real entries: the step is traced,
and under ``--xla`` compiled and autotuned, once per run, where a smaller last batch was a
second program. Metrics weigh the padding zero; gathered outputs drop it on the host.
"""
from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from common import graph
from common.data import dali
from common.data.input_errors import read_batches
from common.errors import DataError


def pad_batch(batch, axis: int, size: int):
    """(``batch`` with every tensor padded by zeros to ``size`` along ``axis``, valid: (size,)
    bool, True for the entries it had): a tf.data map function."""
    n = tf.shape(tf.nest.flatten(batch)[0], out_type=tf.int64)[axis]

    def pad(t):
        paddings = [[0, 0]] * len(t.shape)
        paddings[axis] = [0, size - n]
        return tf.ensure_shape(tf.pad(t, paddings), [size if i == axis else d
                                                    for i, d in enumerate(t.shape)])
    return tf.nest.map_structure(pad, batch), tf.range(size, dtype=tf.int64) < n


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
        """(batch, valid) of this rank's pass: each batch padded to the task's one shape
        (``Task.eval_padding``), ``valid`` (bool, along the padded axis) its real entries."""
        if self._data is None:
            data = self.task.eval_dataset()
            if isinstance(data, dali.EvalPass):  # DALI pads the last batch itself
                self._data = data
            else:  # on the host, before the batch goes to the device
                axis, flag = self.task.eval_padding
                size = getattr(self.task.flags, flag)
                self._data = self.ctx.capabilities.on_device(graph.dataset_map(
                    data, lambda *b: pad_batch(b[0] if len(b) == 1 else b, axis, size)))
        data = self._data.padded() if isinstance(self._data, dali.EvalPass) else self._data
        records = self.task.records  # the first bad record named, where the data are records
        return read_batches(data, records and (lambda: records.locate_bad_record("eval")))

    def step_function(self):
        """The evaluation step, traced once for the run: ``(batch, valid, state) -> state``,
        updating the metrics, or ``(batch) -> outputs`` for gathered outputs, whose forward
        pass alone XLA compiles (post-processing such as NMS has no XLA kernel)."""
        if self._step is None:
            task, model, metrics = self.task, self.model(), self.metrics
            if task.gathers_eval_outputs:
                forward = graph.function(lambda x: model(x, training=False), jit_compile=self.xla)
                self._step = graph.function(
                    lambda batch: task.eval_outputs(lambda x, training=False: forward(x), batch))
            else:
                self._step = graph.function(
                    lambda batch, valid, state: task.eval_update(model, batch, metrics, state,
                                                                 valid),
                    jit_compile=self.xla)
        return self._step

    def _items(self, batch, valid) -> int:
        """Real items in a padded batch: the batch's share of its real entries."""
        valid = np.asarray(valid)
        return self.task.items_in(batch) * int(valid.sum()) // valid.size

    def _summed(self) -> tuple[dict, int, float]:
        task, metrics, step = self.task, self.metrics, self.step_function()
        for m in metrics:
            m.reset_state()
        start, items, state = time.perf_counter(), 0, task.initial_state(self.model(), "eval")
        for batch, valid in self.batches():
            state = step(batch, valid, state)
            items += self._items(batch, valid)
        self.check_inputs("eval")
        seconds = time.perf_counter() - start
        total = self._total_items(items)
        for m in metrics:
            for var, value in zip(m.variables, self.dist.sum([v.value for v in m.variables])):
                var.assign(value)
        results = {task.config.LOG_NAMES.metric(m.name): float(m.result()) for m in metrics}
        return {**results, f"eval_{task.item_unit}": total}, items, seconds

    def _gathered(self) -> tuple[dict, int, float]:
        task, step = self.task, self.step_function()
        start, items, outputs = time.perf_counter(), 0, []
        for batch, valid in self.batches():
            real = np.asarray(valid)  # gathered outputs are per row: the padding rows dropped
            outputs.append({k: v.numpy()[real] for k, v in step(batch).items()})
            items += self._items(batch, valid)
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
        if first is None:
            self.task.check_eval_inputs(None)
            items = 0
        else:
            batch, valid = first
            axis, _ = self.task.eval_padding
            real = np.asarray(valid)  # the batch as the data holds it, without its padding
            self.task.check_eval_inputs(tf.nest.map_structure(
                lambda t: tf.boolean_mask(t, real, axis=axis), batch))
            items = self._items(batch, valid)
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
