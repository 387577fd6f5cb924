"""Input-pipeline failures as one line that says why and names the file.

TensorFlow and DALI report a bad record without saying which file it came from, and DALI's
reason sits several lines into a message that starts with ``DALI_ERROR_INVALID_OPERATION:``.
``reason`` pulls the cause out of either. When a pipeline fails, ``locate_bad_record`` re-reads
the split's records in order with the task's own check (parse, label range, full decode) and
names the first file and record that fails it: a slow path taken only after a failure.
``read_batches`` is how the loops that read data (training and inference in ``trainer.py``,
evaluation in ``evaluation.py``) iterate, so that every such failure ends as that one line.
"""
from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Sequence

import tensorflow as tf

from common import graph
from common.errors import DataError, one_line

_DALI_OP = re.compile(r"Error in (?:CPU|GPU|MIXED|Mixed) operator `(?:nvidia\.dali\.)?([^`]+)`")
_DALI_CAUSE = re.compile(r"encountered:\s*\n\s*(.+)")

def reason(message: str) -> str:
    """The cause in one line, from a TensorFlow or DALI error message."""
    op, cause = _DALI_OP.search(message), _DALI_CAUSE.search(message)
    if op and cause:
        return f"DALI {op.group(1)}: {cause.group(1).strip()}"
    return one_line("\n".join(ln for ln in message.splitlines()
                               if not ln.lstrip().startswith("Error DALI_ERROR")))


def checked_range(values, low: int, high: int, what: str):
    """``values`` as they are, once a check has passed that fails the pipeline on the first one
    outside low..high with "<what> <value> is outside <low>..<high>" (what ``reason`` reports)."""
    values = tf.convert_to_tensor(values)
    flat = tf.concat([tf.reshape(values, [-1]), tf.fill([1], tf.cast(low, values.dtype))], 0)
    bad = (flat < low) | (flat > high)  # the appended in-range value keeps argmax defined
    first = tf.gather(flat, tf.argmax(tf.cast(bad, tf.int32)))
    ok = tf.debugging.Assert(tf.logical_not(tf.reduce_any(bad)), [
        tf.strings.format(f"{what} {{}} is outside {low}..{high}", first)])
    with tf.control_dependencies([ok]):
        return tf.identity(values)


def locate_bad_record(files: Sequence[str], check: Callable[[tf.Tensor], tf.Tensor],
                      budget_seconds: float = 300.0) -> str | None:
    """"<file>, record <n>: <why>" for the first record ``check`` fails on, None if none does.

    ``check`` maps a serialized record to any tensor and raises (through tf.debugging asserts or
    the decode ops themselves) on a bad one. Gives up, saying so, after ``budget_seconds``."""
    start = time.monotonic()
    for done, path in enumerate(files):
        if time.monotonic() - start > budget_seconds:
            return (f"(not found in the first {done} of {len(files)} files within "
                    f"{budget_seconds:.0f} s)")
        n = 0
        try:
            for _ in graph.dataset_map(tf.data.TFRecordDataset(path), check):  # n: the record
                n += 1
        except tf.errors.OpError as e:
            return f"{path}, record {n}: {reason(e.message)}"
    return None


def read_batches(dataset, locate: Callable[[], str | None] | None = None) -> Iterator:
    """The batches of ``dataset`` (a loop's data), an input-pipeline failure (a corrupt record
    or image, a label out of range, a DALI read error) turned into one ``DataError`` line
    naming the file where it can."""
    iterator = iter(dataset)
    while True:
        try:
            batch = next(iterator)
        except StopIteration:
            return
        except tf.errors.OpError as e:
            why = reason(e.message)
            where = locate() if locate else None
            del iterator  # stops the pipeline's threads before the error is printed
            if where and not where.startswith("("):
                raise DataError(f"cannot read the input data: {where}") from None
            raise DataError(f"cannot read the input data: {why}{f' {where}' if where else ''}"
                            ) from None
        yield batch


class DeviceRangeCheck:
    """A range check of integer inputs made where the batch is (on the GPU, for data that DALI
    leaves there) inside the compiled step, without stopping the step: it counts the values
    outside low..high and keeps the largest of them, and the host reads the count at its sync
    points (``raise_if_bad``), as it reads the non-finite counters. ``shift`` is added to a
    value before it is checked and reported (labels held 0-based, named 1-based as the records
    hold them). ``checked_range`` is the tf.data pipelines' form, which fails the pipeline
    itself."""

    def __init__(self, what: str, low: int, high: int, shift: int = 0):
        self.what, self.low, self.high, self.shift = what, low, high, shift
        self.count = tf.Variable(0, dtype=tf.int64, trainable=False, name=f"bad_{what}_count")
        self.worst = tf.Variable(tf.int64.min, dtype=tf.int64, trainable=False,
                                 name=f"bad_{what}_value")

    def __call__(self, values, valid=None):
        """Counts the values (where ``valid``, a bool tensor of their shape) outside the range;
        returns ``values`` as int64 (call inside a ``tf.function``). A dozen small ops, no
        copy: compared in int64, whose GPU kernels read device memory, where int32's
        comparisons and reductions are host kernels (common/tools/gpu_placement.py)."""
        values = tf.cast(values, tf.int64)
        bad = (values < self.low - self.shift) | (values > self.high - self.shift)
        if valid is not None:
            bad &= valid
        self.count.assign_add(tf.reduce_sum(tf.cast(bad, tf.int64)))
        largest = tf.reduce_max(tf.where(bad, values, tf.int64.min))
        self.worst.assign(tf.maximum(self.worst, largest))
        return values

    def raise_if_bad(self, locate: Callable[[], str | None] | None = None) -> None:
        """At a host sync point: one ``DataError`` line when a value was out of range, naming
        the file and record where ``locate`` finds them."""
        if not int(self.count.numpy()):
            return
        why = (f"{self.what} {int(self.worst.numpy()) + self.shift} is outside "
               f"{self.low}..{self.high}")
        where = locate() if locate else None
        if where and not where.startswith("("):
            raise DataError(f"cannot read the input data: {where}")
        raise DataError(f"cannot read the input data: {why}{f' {where}' if where else ''}")
