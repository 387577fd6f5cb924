"""One code path for a single process and for Horovod under ``horovodrun``, ``mpirun`` or
Slurm's ``srun``.

Keras 3 variables are not ``tf.Variable``s, so Horovod's ``DistributedGradientTape`` and
``broadcast_variables(model.variables)`` do not work on them. Gradients from a plain
``tf.GradientTape`` are averaged with ``grouped_allreduce`` instead, and broadcasts go to the
``tf.Variable`` underneath each Keras variable.
"""
from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import tensorflow as tf

from common.errors import DataError, TrainingError, UsageError
from common.runtime import devices
from common.runtime.devices import CPU_ONLY, Devices

T = TypeVar("T")

# Set by horovodrun (Gloo or MPI), Open MPI's mpirun, and MPICH's and Slurm's PMI-2 launchers.
_WORLD_SIZE_ENV = ("HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE")
# Slurm's srun sets the size of its job step in every task, whatever --mpi plugin it uses; its
# PMIx plugin sets PMIX_RANK and PMIX_NAMESPACE but no size. SLURM_NTASKS alone is not enough:
# a batch script (sbatch) has it too, and a python started there directly is one process.
_SLURM_STEP_SIZE = "SLURM_STEP_NUM_TASKS"
# Each launcher's name for this process's rank, for messages (the first one set wins).
RANK_ENV = ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")


def rank_seed(seed: int | None, rank: int) -> int | None:
    """Each rank's data-order and augmentation seed (DALI's and tf.data's alike): other draws
    on every rank, reproducible with ``--seed``."""
    return None if seed is None else seed + rank


def launched_world_size(environ=os.environ) -> int:
    """How many processes the launcher that started this one started (0: none did)."""
    for name in _WORLD_SIZE_ENV:
        if name in environ:
            return int(environ[name])
    step = environ.get("SLURM_STEP_ID")
    if step not in (None, "batch", "extern") and _SLURM_STEP_SIZE in environ:
        return int(environ[_SLURM_STEP_SIZE])  # a task of an srun job step
    return 0  # not started by a launcher


def launched_by(environ=os.environ) -> str:
    """Which launcher started this process, for messages."""
    if "HOROVOD_SIZE" in environ:
        return "horovodrun"
    if "OMPI_COMM_WORLD_SIZE" in environ:
        return "mpirun"
    if "SLURM_STEP_ID" in environ:
        return "srun"
    return "a launcher"


def launched_rank(environ=os.environ) -> str | None:
    """This process's rank as its launcher numbers it, before Horovod starts (None: no launcher)."""
    for name in RANK_ENV:
        if environ.get(name, "").isdigit():
            return environ[name]
    return None


def _tf_variable(v):
    """The ``tf.Variable`` behind a Keras 3 variable (``.value`` outside an autocast scope)."""
    if isinstance(v, tf.Variable):
        return v
    value = v.value
    if not isinstance(value, tf.Variable):
        raise TypeError(f"cannot find the tf.Variable behind {v!r}")
    return value


class Distributed:
    """Rank facts, the device this process computes on, and the few collectives the loops need;
    a no-op in a single process."""

    def __init__(self, hvd=None, devices: Devices = CPU_ONLY):
        self.hvd = hvd
        self.rank = hvd.rank() if hvd else 0
        self.size = hvd.size() if hvd else 1
        self.local_rank = hvd.local_rank() if hvd else 0
        self.devices = devices

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
        """True on every rank when ``flag`` is true on at least one. A host tensor: reading a
        GPU one back would wait for every step the device still has queued."""
        if not self.enabled:
            return bool(flag)
        with tf.device("/cpu:0"):
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

    def allgather_object(self, obj) -> list:
        """Every rank's picklable ``obj``, in rank order."""
        if not self.enabled:
            return [obj]
        return self.hvd.allgather_object(obj)

    def broadcast_object(self, obj):
        """Rank 0's picklable ``obj`` on every rank."""
        if not self.enabled:
            return obj
        return self.hvd.broadcast_object(obj, root_rank=0)

    def broadcast(self, variables) -> None:
        """Copies rank 0's values into ``variables`` (Keras or TF) on every rank."""
        if self.enabled and variables:
            self.hvd.broadcast_variables([_tf_variable(v) for v in variables], root_rank=0)


def init(environ=os.environ) -> Distributed:
    """Starts Horovod when a launcher started this process, then pins this process to one GPU
    (``devices.pin``): local rank modulo the GPUs it sees, GPU 0 in a single process."""
    world = launched_world_size(environ)
    hvd = None
    if world and launched_by(environ) == "srun" and not (
            "PMIX_RANK" in environ or "PMI_RANK" in environ):
        # Open MPI would find no process-management interface and abort inside MPI_Init.
        raise UsageError(f"srun started {world} processes without an MPI plugin: run "
                         "srun --mpi=pmix (or the plugin Open MPI was built for: srun --mpi=list)")
    if world:
        try:
            import horovod.tensorflow as hvd
        except ImportError as e:
            raise UsageError(
                f"started by {launched_by(environ)} as {world} processes but Horovod does not "
                f"import ({e}): run scripts/install_deps.sh"
            ) from e
        hvd.init()
        if hvd.size() != world:
            hint = (" (srun needs --mpi=pmix, or the MPI plugin Open MPI was built for: "
                    "srun --mpi=list)" if launched_by(environ) == "srun" else "")
            raise UsageError(f"{launched_by(environ)} started {world} processes but Horovod "
                             f"joined {hvd.size()}{hint}")
    local_rank = hvd.local_rank() if hvd is not None else 0
    return Distributed(hvd, devices.pin(local_rank))


def shut_down(error: BaseException) -> bool:
    """Whether a TensorFlow error is Horovod's shutdown after a rank was lost (Gloo's
    controller shuts down on every rank; each collective after raises this)."""
    return isinstance(error, tf.errors.OpError) and "Horovod has been shut down" in str(error)


def check_shared(dist: Distributed, directory: str, flag: str) -> None:
    """Under Horovod, that every rank sees the file rank 0 writes in ``directory`` (which rank
    0 has made): checkpoints, the log and the heartbeats of ``--hang_timeout`` are read across
    nodes, and a job requeued onto other nodes resumes from them. A directory that is not on a
    file system every node mounts would otherwise train unnoticed until the first hang, or start
    over after a requeue. One line on every rank (rank 0's names the ranks and hosts)."""
    if not dist.enabled:
        return
    name = f".shared-{os.urandom(8).hex()}" if dist.is_chief else None
    if name is not None:
        try:
            open(os.path.join(directory, name), "x").close()
        except OSError:
            name = None  # rank 0's own checks of the directory say what is wrong with it
    name = dist.broadcast_object(name)
    if name is None:
        return
    path = os.path.join(directory, name)
    seen = os.path.exists(path)
    for _ in range(10):  # a network file system may show a new file a moment later
        if seen:
            break
        time.sleep(0.2)
        seen = os.path.exists(path)
    views = dist.allgather_object((seen, socket.gethostname()))
    if dist.is_chief:
        with contextlib.suppress(OSError):
            os.remove(path)
    blind = [f"{r} ({host})" for r, (s, host) in enumerate(views) if not s]
    if blind:
        if not dist.is_chief:
            raise UsageError(f"{flag} {directory} is not shared by every node (see rank 0's line)")
        raise UsageError(
            f"{flag} {directory} is not shared by every node: rank(s) {', '.join(blind)} cannot "
            f"see the file rank 0 ({views[0][1]}) wrote there; checkpoints, the log and the "
            "--hang_timeout heartbeats are read across nodes: give a directory on a file system "
            "every node mounts")


def describe_rank(dist: Distributed, environ=os.environ) -> str:
    """One line of what this process sees: its rank, its launcher's variables, its GPU."""
    visible = environ.get("CUDA_VISIBLE_DEVICES", "<unset>")
    d = dist.devices
    where = (f"computes on GPU {d.gpu_index} of the {d.visible_gpus} it sees ({d.gpu_name}), "
             f"DALI device_id {d.dali_device_id}" if d.gpu else "computes on the CPU (no GPU)")
    slurm = " ".join(f"{k}={environ[k]}" for k in ("SLURM_PROCID", "SLURM_LOCALID", "PMIX_RANK")
                     if k in environ)
    cross = f" cross {dist.hvd.cross_rank()}/{dist.hvd.cross_size()}" if dist.hvd else ""
    return (f"rank {dist.rank}/{dist.size} local {dist.local_rank}{cross} on "
            f"{socket.gethostname()}: "
            f"CUDA_VISIBLE_DEVICES={visible}{' ' + slurm if slurm else ''}; {where}")
