"""One code path for a single process and for Horovod under ``horovodrun`` or ``mpirun``.

Keras 3 variables are not ``tf.Variable``s, so Horovod's ``DistributedGradientTape`` and
``broadcast_variables(model.variables)`` do not work on them. Gradients from a plain
``tf.GradientTape`` are averaged with ``grouped_allreduce`` instead, and broadcasts go to the
``tf.Variable`` underneath each Keras variable.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TypeVar

import tensorflow as tf

from common.errors import DataError, TrainingError, UsageError

T = TypeVar("T")

# Set by horovodrun (Gloo or MPI), Open MPI's mpirun, and MPICH/Slurm PMI launchers.
_WORLD_SIZE_ENV = ("HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE")


def launched_world_size(environ=os.environ) -> int:
    for name in _WORLD_SIZE_ENV:
        if name in environ:
            return int(environ[name])
    return 0  # not started by a launcher


def _tf_variable(v):
    """The ``tf.Variable`` behind a Keras 3 variable (``.value`` outside an autocast scope)."""
    if isinstance(v, tf.Variable):
        return v
    value = v.value
    if not isinstance(value, tf.Variable):
        raise TypeError(f"cannot find the tf.Variable behind {v!r}")
    return value


class Distributed:
    """Rank facts plus the few collectives the loops need; a no-op in a single process."""

    def __init__(self, hvd=None):
        self.hvd = hvd
        self.rank = hvd.rank() if hvd else 0
        self.size = hvd.size() if hvd else 1
        self.local_rank = hvd.local_rank() if hvd else 0

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.size > 1

    def allreduce_gradients(self, grads: Sequence[tf.Tensor], fp16_compression: bool = False):
        """Averages gradients over ranks in one fused group (inside a ``tf.function``)."""
        if not self.enabled:
            return list(grads)
        compression = self.hvd.Compression.fp16 if fp16_compression else self.hvd.Compression.none
        return self.hvd.grouped_allreduce(list(grads), op=self.hvd.Average, compression=compression)

    def sum(self, tensors: Sequence[tf.Tensor]):
        if not self.enabled:
            return list(tensors)
        return self.hvd.grouped_allreduce(list(tensors), op=self.hvd.Sum)

    def any(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on at least one."""
        if not self.enabled:
            return bool(flag)
        return bool(self.hvd.allreduce(tf.constant(int(flag)), op=self.hvd.Max).numpy())

    def on_chief(self, fn: Callable[[], T], what: str) -> T | None:
        """Runs ``fn`` on rank 0 only and returns its result there (None elsewhere). When it
        raises one of the one-line errors, every rank stops: rank 0 with its own message, the
        others with a line saying so, instead of waiting forever in the next collective."""
        result, error = None, None
        if self.is_chief:
            try:
                result = fn()
            except (DataError, TrainingError, UsageError) as e:
                error = e
        if self.any(error is not None):
            if error is not None:
                raise error
            raise DataError(f"{what} failed on rank 0 (see its message)")
        return result

    def allgather(self, arrays: dict) -> dict:
        """Each array concatenated over ranks along its first axis (sizes may differ)."""
        if not self.enabled:
            return dict(arrays)
        return {k: self.hvd.allgather(tf.convert_to_tensor(v)).numpy()
                for k, v in sorted(arrays.items())}

    def broadcast_object(self, obj):
        """Rank 0's picklable ``obj`` on every rank."""
        if not self.enabled:
            return obj
        return self.hvd.broadcast_object(obj, root_rank=0)

    def broadcast(self, variables) -> None:
        """Copies rank 0's values into ``variables`` (Keras or TF) on every rank."""
        if self.enabled and variables:
            self.hvd.broadcast_variables([_tf_variable(v) for v in variables], root_rank=0)


def init() -> Distributed:
    """Starts Horovod when a launcher started this process, and pins one GPU per local rank."""
    world = launched_world_size()
    hvd = None
    if world:
        try:
            import horovod.tensorflow as hvd
        except ImportError as e:
            raise UsageError(
                f"started by a launcher as {world} processes but Horovod does not import ({e}): "
                "run scripts/install_deps.sh"
            ) from e
        hvd.init()
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus and hvd is not None:
        tf.config.set_visible_devices(gpus[hvd.local_rank() % len(gpus)], "GPU")
    return Distributed(hvd)
