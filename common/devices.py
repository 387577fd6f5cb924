"""The device this process computes on, decided once at start-up and handed to whoever places
work: TensorFlow's visible GPU, DALI's ``device_id``, the input pipelines' device.

One GPU per process. Under a launcher that is the local rank's GPU modulo the GPUs this process
sees: all of a node's GPUs (``mpirun``, ``srun --gpus-per-node``), or only its own (``srun
--gpus-per-task=1``, Kubernetes: then index 0 on every rank). A single process takes GPU 0,
so that it does not open a CUDA context on every GPU of a shared machine. DALI counts GPUs as
CUDA does, among the ones ``CUDA_VISIBLE_DEVICES`` leaves, in the order TensorFlow lists them:
both are given the same index.
"""
from __future__ import annotations

import contextlib
import dataclasses

import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class Devices:
    gpu_index: int | None  # the CUDA device this process uses, among those it sees; None: CPU
    gpu_name: str = ""
    visible_gpus: int = 0  # GPUs this process sees (before pinning)

    @property
    def gpu(self) -> bool:
        return self.gpu_index is not None

    @property
    def tf_device(self) -> str:
        """TensorFlow's name for the device: after pinning, the one GPU TensorFlow sees."""
        return "/gpu:0" if self.gpu else "/cpu:0"

    @property
    def dali_device_id(self) -> int | None:
        """DALI's ``device_id``: the same CUDA device, or None for DALI's CPU-only mode."""
        return self.gpu_index


CPU_ONLY = Devices(None)
_current: Devices | None = None  # what pin() decided for this process


def current() -> Devices:
    """This process's devices, as ``pin`` decided them; before ``pin`` (layers built by a test
    or a tool), the first GPU when there is one. Layers that choose a kernel by device (the
    bfloat16-on-a-CPU workarounds of ``common/bias.py`` and ``common/conv2d.py``) read this
    instead of probing."""
    global _current
    if _current is None:
        gpus = physical_gpus()
        _current = Devices(0, "GPU", len(gpus)) if gpus else CPU_ONLY
    return _current


@contextlib.contextmanager
def standing_in(devices: Devices):
    """``current()`` is ``devices`` inside the block: for tests that build a GPU's graph on a
    CPU (what a layer or pipeline puts in it, not what it computes)."""
    global _current
    before = _current
    _current = devices
    try:
        yield devices
    finally:
        _current = before


def physical_gpus() -> list:
    """The GPUs TensorFlow sees in this process (all of them, before ``pin`` hides the rest)."""
    return tf.config.list_physical_devices("GPU")


def pin(local_rank: int) -> Devices:
    """Makes one GPU (local rank modulo the GPUs seen) the only one TensorFlow uses, with memory
    growth (DALI allocates beside TensorFlow); a machine without a GPU gets ``CPU_ONLY``. Must
    run before TensorFlow creates its devices (before any op)."""
    global _current
    gpus = physical_gpus()
    if not gpus:
        _current = CPU_ONLY
        return _current
    index = local_rank % len(gpus)
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    tf.config.set_visible_devices(gpus[index], "GPU")
    name = tf.config.experimental.get_device_details(gpus[index]).get("device_name", "GPU")
    _current = Devices(index, name, len(gpus))
    return _current
