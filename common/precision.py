"""Numerical precision: the one place that decides AMP, loss scaling, TF32 and XLA.

Flags win over the environment; the environment variables that NGC users already set are
honoured here and nowhere else:

* ``TF_ENABLE_AUTO_MIXED_PRECISION=1`` turns AMP on exactly as ``--amp`` does (Keras mixed
  precision policy, plus loss scaling for float16). Grappler's own AMP graph rewrite is switched
  off so the graph is never converted twice.
* ``NVIDIA_TF32_OVERRIDE=0`` disables TF32 in the CUDA libraries themselves, so ``--tf32`` cannot
  override it and is refused.
* ``TF_XLA_FLAGS`` is left to TensorFlow (auto-clustering, dumps); ``--xla`` additionally compiles
  the train and eval steps with ``jit_compile=True``.
* ``TF_USE_CUDNN_BATCHNORM_SPATIAL_PERSISTENT=1`` is set for float16 on a GPU, as NVIDIA's
  TensorFlow ResNet-50 runner sets it: without it TensorFlow's fused batch norm transposes every
  float16 NHWC activation to NCHW and back (cuDNN computes NHWC float16 in place only in its
  persistent mode), and Grappler does not fuse batch norm with the ReLU (and the residual
  addition) after it. A value the user set wins (``0`` turns it off); nothing is set on a CPU.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Mapping

import keras
import tensorflow as tf

from common.errors import UsageError

AMP_ENV = "TF_ENABLE_AUTO_MIXED_PRECISION"
TF32_ENV = "NVIDIA_TF32_OVERRIDE"
XLA_ENV = "TF_XLA_FLAGS"
CUDNN_BN_ENV = "TF_USE_CUDNN_BATCHNORM_SPATIAL_PERSISTENT"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@dataclasses.dataclass(frozen=True)
class Precision:
    amp: bool
    compute_dtype: str  # float32 | float16 | bfloat16
    loss_scale: float | str | None  # "dynamic", a fixed number, or None (no loss scaling)
    tf32: bool
    xla: bool
    xla_env_flags: str
    sources: Mapping[str, str]  # setting -> where its value came from
    cudnn_bn_persistent: bool = False  # CUDNN_BN_ENV is 1 for this run (set here or by the user)

    @property
    def policy(self) -> str:
        return f"mixed_{self.compute_dtype}" if self.amp else "float32"

    def describe(self) -> dict:
        return {
            "amp": self.amp,
            "dtype_policy": self.policy,
            "loss_scale": self.loss_scale if self.loss_scale is not None else "none",
            "tf32": self.tf32,
            "xla": self.xla,
            XLA_ENV: self.xla_env_flags or "<unset>",
            CUDNN_BN_ENV: int(self.cudnn_bn_persistent),
            **{f"{k}_source": v for k, v in self.sources.items()},
        }


def _env_bool(environ: Mapping[str, str], name: str) -> bool | None:
    if name not in environ:
        return None
    value = environ[name].strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise UsageError(f"{name}={environ[name]!r} is not understood: use 1 or 0")


def resolve(
    *,
    amp: bool | None,
    amp_dtype: str,
    static_loss_scale: float | None,
    tf32: bool | None,
    xla: bool,
    has_gpu: bool,
    environ: Mapping[str, str] = os.environ,
) -> Precision:
    """Combines flags (``None`` = not given) and environment into one ``Precision``."""
    sources = {}
    env_amp = _env_bool(environ, AMP_ENV)
    if amp is not None:
        sources["amp"] = "flag --amp" if amp else "flag --noamp"
    elif env_amp is not None:
        amp = env_amp
        sources["amp"] = f"env {AMP_ENV}={environ[AMP_ENV]}"
    else:
        amp = False
        sources["amp"] = "default"

    if amp_dtype not in ("auto", "float16", "bfloat16"):
        raise UsageError(f"--amp_dtype must be auto, float16 or bfloat16, not {amp_dtype!r}")
    if not amp:
        if amp_dtype != "auto":
            raise UsageError("--amp_dtype needs --amp (or TF_ENABLE_AUTO_MIXED_PRECISION=1)")
        if static_loss_scale is not None:
            raise UsageError("--static_loss_scale needs --amp with float16")
        compute_dtype, loss_scale = "float32", None
    else:
        if amp_dtype == "auto":
            # Tensor cores want float16; a CPU has no float16 units, and bfloat16 needs no loss
            # scale.
            compute_dtype = "float16" if has_gpu else "bfloat16"
            sources["amp_dtype"] = f"auto ({'GPU' if has_gpu else 'no GPU'})"
        else:
            compute_dtype = amp_dtype
            sources["amp_dtype"] = "flag --amp_dtype"
        if compute_dtype == "bfloat16":
            if static_loss_scale is not None:
                raise UsageError("--static_loss_scale applies to float16 only; bfloat16 needs none")
            loss_scale = None
        elif static_loss_scale is not None:
            if not static_loss_scale > 0:
                raise UsageError(f"--static_loss_scale must be positive, not {static_loss_scale}")
            loss_scale = float(static_loss_scale)
        else:
            loss_scale = "dynamic"

    env_tf32 = _env_bool(environ, TF32_ENV)
    if tf32 is not None:
        if tf32 and env_tf32 is False:
            raise UsageError(f"--tf32 conflicts with {TF32_ENV}=0, which the CUDA libraries obey")
        sources["tf32"] = "flag --tf32" if tf32 else "flag --no_tf32"
    elif env_tf32 is False:
        tf32 = False
        sources["tf32"] = f"env {TF32_ENV}=0"
    else:
        tf32 = True
        sources["tf32"] = "default"

    sources["xla"] = "flag --xla" if xla else "default"
    env_bn = _env_bool(environ, CUDNN_BN_ENV)
    if env_bn is not None:
        bn_persistent = env_bn
        sources["cudnn_bn_persistent"] = f"env {CUDNN_BN_ENV}={environ[CUDNN_BN_ENV]}"
    else:
        bn_persistent = has_gpu and compute_dtype == "float16"
        sources["cudnn_bn_persistent"] = ("set: float16 on a GPU" if bn_persistent else
                                          "default (float16 on a GPU only)")
    return Precision(amp, compute_dtype, loss_scale, tf32, xla, environ.get(XLA_ENV, ""), sources,
                     bn_persistent)


def apply(precision: Precision, environ=os.environ) -> None:
    """Sets the process-wide state. Call once, before any model is built (TensorFlow reads
    ``CUDNN_BN_ENV`` when it first runs or optimises a batch norm)."""
    if precision.cudnn_bn_persistent and CUDNN_BN_ENV not in environ:
        environ[CUDNN_BN_ENV] = "1"
    keras.mixed_precision.set_dtype_policy(precision.policy)
    tf.config.experimental.enable_tensor_float_32_execution(precision.tf32)
    # AMP is done by the Keras policy; Grappler's rewrite would convert the graph a second time.
    tf.config.optimizer.set_experimental_options({"auto_mixed_precision": False})


class LossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
    """Keras' dynamic loss scaling, deciding whether gradients are finite by the trainer's one
    decision for the step (``finite``, set around ``apply``) instead of a second check of every
    gradient: on a GPU outside XLA, each such check is two kernels per variable."""

    finite = None  # a bool tensor while the trainer applies a step; None: Keras' own check

    def check_finite(self, grads):
        return super().check_finite(grads) if self.finite is None else self.finite


class FixedLossScaleOptimizer(LossScaleOptimizer):
    """Loss scaling with a scale that never changes (``--static_loss_scale``).

    A step whose gradients are not finite is skipped, as with dynamic scaling, but the scale is
    not halved; a finite step never grows it.
    """

    def _stateful_handle_finite_grads(self, grads, trainable_variables):
        tvs = trainable_variables or self._trainable_variables
        unscaled = [
            g if g is None or self._overwrite_variable_with_gradient(v) else g / self.dynamic_scale
            for g, v in zip(grads, tvs)
        ]
        self.inner_optimizer.apply(unscaled, trainable_variables=trainable_variables)

    def _stateful_handle_non_finite_grads(self):
        pass


def wrap_optimizer(optimizer: keras.optimizers.Optimizer, precision: Precision):
    """Adds loss scaling for float16; bfloat16 and float32 keep the optimizer as is."""
    if precision.loss_scale is None:
        return optimizer
    if precision.loss_scale == "dynamic":
        return LossScaleOptimizer(optimizer)
    return FixedLossScaleOptimizer(optimizer, initial_scale=precision.loss_scale)


def compute_dtype_copy(build_model: Callable[[], keras.Model], model: keras.Model,
                       compute_dtype: str) -> keras.Model:
    """A second ``model``, built by ``build_model`` under the policy ``compute_dtype`` instead of
    ``mixed_<compute_dtype>``, holding ``model``'s weights rounded to that type: its 16-bit
    layers store their weights in 16 bits, the layers that declare float32 (layer norms, say)
    keep float32. For a model whose 16-bit layers read every weight rounded to the compute type
    (Keras' autocasting, or a cast of their own) the outputs are the same, without casting the
    weights at every step. Not for Keras' batch normalisation, whose moving statistics are
    read in float32."""
    with dtype_policy(compute_dtype):
        copy = build_model()
    pairs = list(zip(model.weights, copy.weights))
    if len(model.weights) != len(copy.weights) or any(
            a.path != b.path or tuple(a.shape) != tuple(b.shape) for a, b in pairs):
        raise RuntimeError("build_model built another model under the policy "
                           f"{compute_dtype}: its weights differ in name or shape")
    for source, target in pairs:
        target.assign(tf.cast(source, target.dtype))
    return copy


def float32_model(build_model: Callable[[], keras.Model], model: keras.Model) -> keras.Model:
    """``model`` itself when it computes in float32; else (AMP) the same model built under the
    float32 policy with its weights (AMP keeps float32 weights): a graph without casts, for
    exporters that choose their own precision (TensorRT through ONNX or TF-TRT)."""
    if model.dtype_policy.name == "float32":
        return model
    with dtype_policy("float32"):
        copy = build_model()
    copy.set_weights(model.get_weights())
    return copy


@contextlib.contextmanager
def dtype_policy(name: str):
    """Keras' global dtype policy set to ``name`` inside the block, the one before it after."""
    before = keras.mixed_precision.dtype_policy()
    keras.mixed_precision.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.mixed_precision.set_dtype_policy(before)
