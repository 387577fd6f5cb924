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
import os

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


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What the device and the compute dtype decide, once, at start-up: every kernel a layer
    routes around and every size it pads is read here (``current()``, or a task's
    ``ctx.capabilities``), never probed from TensorFlow at call time."""
    devices: Devices
    compute_dtype: str = "float32"  # the precision policy's (common/precision.py)

    @property
    def gpu(self) -> bool:
        return self.devices.gpu

    def on_device(self, data):
        """tf.data batches, made on the host, copied to the GPU ahead of the step that reads
        them (``prefetch_to_device``) rather than inside it. DALI's (``dali.Served``) and
        synthetic batches (``task.Repeated``) are there already; on a CPU nothing moves."""
        if isinstance(data, tf.data.Dataset) and self.gpu:
            return data.apply(tf.data.experimental.prefetch_to_device(self.devices.tf_device,
                                                                      buffer_size=2))
        return data

    @property
    def tensor_core_padding(self) -> int:
        """Sizes padded to a multiple of this for tensor cores: 8 in 16-bit on a GPU."""
        return 8 if self.gpu and self.compute_dtype != "float32" else 1

    @property
    def bias_gradient_by_sum(self) -> bool:
        """16-bit bias gradients summed by ``Sum`` (float32 accumulation), around a CPU's
        ``BiasAddGrad``, which sums in 16 bits (common/layers/bias.py). A GPU's accumulates in
        float32, and its plain BiasAdd fuses into the matmul before it."""
        return not self.gpu

    @property
    def pointwise_gradient_as_matmul(self) -> bool:
        """bfloat16 1x1 weight gradients (a layer computing in bfloat16) as one matmul, around
        oneDNN's slow AMX weight-gradient kernel (common/layers/conv2d.py); a GPU keeps cuDNN's."""
        return not self.gpu

    @property
    def update_compiled(self) -> bool:
        """The optimizer update and its non-finite skip compiled by XLA in every run
        (common/core/train_step.py): on a GPU, a TensorFlow cond would wait on the host."""
        return self.gpu

    @property
    def fused_optimizer(self) -> bool:
        """Optimizers that update every variable in one XLA computation (Transformer-XL's LAMB):
        a GPU saves hundreds of launches; a CPU's XLA materialises squares, slower there."""
        return self.gpu

    @property
    def float32_fpn(self) -> bool:
        """SSD320's feature pyramid computes in float32 under bfloat16 (its trunk, towers and
        heads stay bfloat16). With the whole network in bfloat16, one learning-check seed in
        eight failed (AP50 0.575 against FP32's 0.773; one in three before) and the spread
        over seeds doubled; with the FPN in float32 none of eight failed and the mean matched
        FP32's (ssd320/README.md, "Learning"). Its top-down path has no normalisation (lateral
        1x1 convolutions, their sums, P5 taken as it is), which bfloat16's 8 significant bits
        round at every level. float16 keeps 11: a GPU keeps it in float16, on tensor cores."""
        return self.compute_dtype == "bfloat16"

    @property
    def bfloat16_softmax_in_float32(self) -> bool:
        """TensorFlow's own bfloat16 softmax computes in float32 inside: oneDNN's on a CPU with
        bfloat16 instructions (AVX512-BF16, AMX), and a GPU's. On a CPU without them (AVX2)
        Eigen's computes in bfloat16, small probabilities a fifth off: there Transformer-XL's
        attention softmax runs in float32 and is cast (txl/attention.py)."""
        return self.gpu or bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})

    @property
    def input_float16(self) -> bool:
        """Images leave DALI in float16 (float16 AMP on a GPU)."""
        return self.gpu and self.compute_dtype == "float16"


_current: Capabilities | None = None  # what pin() and decide() set for this process
_cpu_flags: frozenset | None = None


def cpu_flags() -> frozenset:
    """The CPU's feature flags (/proc/cpuinfo; empty elsewhere), read once."""
    global _cpu_flags
    if _cpu_flags is None:
        flags = set()
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    key, _, value = line.partition(":")
                    if key.strip() == "flags":
                        flags = set(value.split())
                        break
        except OSError:
            pass
        _cpu_flags = frozenset(flags)
    return _cpu_flags


# --- what a run ran on, in one line for its log: the accelerators, else the CPU ----------
def cpu_name() -> str:
    """The CPU's model name and its bfloat16 support, from /proc/cpuinfo where there is one."""
    name = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    name = value.strip()
                    break
    except OSError:
        pass
    bf16 = " with bfloat16 instructions" if cpu_flags() & {"avx512_bf16", "amx_bf16"} else ""
    return f"{os.cpu_count()} x {name or 'CPU'}{bf16}"


def describe(devices: Devices) -> str:
    """"NVIDIA A100-SXM4-80GB (GPU 3 of 8)" on a GPU machine, "2 x AMD EPYC 9R14 with bfloat16
    instructions, no GPU" on a CPU one: the GPU this process computes on, not the node's."""
    if not devices.gpu:
        return f"{cpu_name()}, no GPU"
    return f"{devices.gpu_name} (GPU {devices.gpu_index} of {devices.visible_gpus})"


def current() -> Capabilities:
    """This process's capabilities, as ``pin`` and ``decide`` set them at start-up; before
    that (layers built by a test or a tool), those of the first GPU when there is one, in
    float32."""
    global _current
    if _current is None:
        gpus = physical_gpus()
        _current = Capabilities(Devices(0, "GPU", len(gpus)) if gpus else CPU_ONLY)
    return _current


def decide(devices: Devices, compute_dtype: str) -> Capabilities:
    """The process's capabilities once the precision is known (``common/runner.py``)."""
    global _current
    _current = Capabilities(devices, compute_dtype)
    return _current


@contextlib.contextmanager
def standing_in(stand_in: Devices | Capabilities):
    """``current()`` is ``stand_in`` inside the block: for tests that build a GPU's graph on a
    CPU (what a layer or pipeline puts in it, not what it computes)."""
    global _current
    before = _current
    _current = (stand_in if isinstance(stand_in, Capabilities)
                else Capabilities(stand_in, before.compute_dtype if before else "float32"))
    try:
        yield _current
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
        _current = Capabilities(CPU_ONLY)
        return CPU_ONLY
    index = local_rank % len(gpus)
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    tf.config.set_visible_devices(gpus[index], "GPU")
    name = tf.config.experimental.get_device_details(gpus[index]).get("device_name", "GPU")
    pinned = Devices(index, name, len(gpus))
    _current = Capabilities(pinned)
    return pinned
