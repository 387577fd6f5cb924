"""common/precision.py: policy, loss scaling, the NGC environment variables, TF32 and XLA."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from common import precision
from common.errors import UsageError

pytestmark = pytest.mark.both_stacks  # the stack check: the NGC suite runs this file


def resolve(environ=None, has_gpu=False, **flags):
    args = dict(amp=None, amp_dtype="auto", static_loss_scale=None, tf32=None, xla=False)
    args.update(flags)
    return precision.resolve(has_gpu=has_gpu, environ=environ or {}, **args)


def test_default_is_float32_with_tf32():
    p = resolve()
    assert (p.policy, p.loss_scale, p.tf32, p.xla) == ("float32", None, True, False)
    assert p.sources["amp"] == "default"


def test_amp_is_bfloat16_without_loss_scale_on_cpu_and_float16_dynamic_on_gpu():
    assert (resolve(amp=True).policy, resolve(amp=True).loss_scale) == ("mixed_bfloat16", None)
    gpu = resolve(amp=True, has_gpu=True)
    assert (gpu.policy, gpu.loss_scale) == ("mixed_float16", "dynamic")
    forced = resolve(amp=True, amp_dtype="bfloat16", has_gpu=True)
    assert (forced.policy, forced.loss_scale) == ("mixed_bfloat16", None)
    assert resolve(amp=True, amp_dtype="float16", static_loss_scale=128).loss_scale == 128.0


def test_ngc_amp_environment_variable_turns_amp_on_like_the_flag():
    env = {"TF_ENABLE_AUTO_MIXED_PRECISION": "1"}
    from_env, from_flag = resolve(env), resolve(amp=True)
    assert from_env.policy == from_flag.policy == "mixed_bfloat16"
    assert from_env.sources["amp"] == "env TF_ENABLE_AUTO_MIXED_PRECISION=1"
    assert resolve(env, amp=False).policy == "float32"  # a flag wins over the environment
    assert resolve({"TF_ENABLE_AUTO_MIXED_PRECISION": "0"}).policy == "float32"
    with pytest.raises(UsageError, match="TF_ENABLE_AUTO_MIXED_PRECISION"):
        resolve({"TF_ENABLE_AUTO_MIXED_PRECISION": "maybe"})


def test_tf32_flags_and_override_variable():
    assert resolve(tf32=False).tf32 is False
    off = resolve({"NVIDIA_TF32_OVERRIDE": "0"})
    assert off.tf32 is False and off.sources["tf32"] == "env NVIDIA_TF32_OVERRIDE=0"
    with pytest.raises(UsageError, match="NVIDIA_TF32_OVERRIDE"):
        resolve({"NVIDIA_TF32_OVERRIDE": "0"}, tf32=True)


@pytest.mark.parametrize("flags, message", [
    (dict(amp_dtype="float16"), "--amp_dtype needs --amp"),
    (dict(static_loss_scale=8.0), "--static_loss_scale needs --amp"),
    (dict(amp=True, static_loss_scale=8.0), "float16 only"),
    (dict(amp=True, amp_dtype="float16", static_loss_scale=-1.0), "must be positive"),
])
def test_invalid_combinations_are_refused(flags, message):
    with pytest.raises(UsageError, match=message):
        resolve(**flags)


def test_apply_sets_policy_tf32_and_turns_off_grappler_amp():
    try:
        precision.apply(resolve(amp=True, tf32=False))
        assert keras.mixed_precision.dtype_policy().name == "mixed_bfloat16"
        assert not tf.config.experimental.tensor_float_32_execution_enabled()
        assert tf.config.optimizer.get_experimental_options()["auto_mixed_precision"] is False
    finally:
        precision.apply(resolve())
    assert keras.mixed_precision.dtype_policy().name == "float32"
    assert tf.config.experimental.tensor_float_32_execution_enabled()


def _step(opt, var, grad):
    opt.apply([tf.constant(grad)], [var])


def test_dynamic_loss_scale_skips_and_halves_on_overflow():
    opt = precision.wrap_optimizer(keras.optimizers.SGD(1.0), resolve(amp=True, has_gpu=True))
    assert isinstance(opt, keras.optimizers.LossScaleOptimizer)
    var = keras.Variable([1.0])
    opt.build([var])
    scale = float(opt.dynamic_scale.numpy())
    _step(opt, var, [np.inf])
    assert var.numpy()[0] == 1.0 and float(opt.dynamic_scale.numpy()) == scale / 2
    _step(opt, var, [scale / 2])  # a scaled gradient of 1.0
    np.testing.assert_allclose(var.numpy(), [0.0])


def test_static_loss_scale_is_fixed_and_skips_overflow():
    p = resolve(amp=True, amp_dtype="float16", static_loss_scale=128.0)
    opt = precision.wrap_optimizer(keras.optimizers.SGD(1.0), p)
    assert isinstance(opt, precision.FixedLossScaleOptimizer)
    var = keras.Variable([1.0])
    opt.build([var])
    _step(opt, var, [np.inf])
    assert var.numpy()[0] == 1.0 and float(opt.dynamic_scale.numpy()) == 128.0
    for _ in range(3):
        _step(opt, var, [64.0])  # 0.5 once unscaled
    np.testing.assert_allclose(var.numpy(), [-0.5])
    assert float(opt.dynamic_scale.numpy()) == 128.0
    assert float(opt.scale_loss(tf.constant(2.0))) == 256.0


def test_bfloat16_and_float32_keep_the_plain_optimizer():
    sgd = keras.optimizers.SGD(1.0)
    assert precision.wrap_optimizer(sgd, resolve(amp=True)) is sgd
    assert precision.wrap_optimizer(sgd, resolve()) is sgd


def test_cudnn_persistent_batch_norm_is_float16_on_a_gpu_and_the_users_value_wins():
    env = precision.CUDNN_BN_ENV
    assert resolve(amp=True, has_gpu=True).cudnn_bn_persistent  # float16: set
    assert not resolve(amp=True).cudnn_bn_persistent  # a CPU: bfloat16, nothing set
    assert not resolve(amp=True, amp_dtype="bfloat16", has_gpu=True).cudnn_bn_persistent
    assert not resolve(has_gpu=True).cudnn_bn_persistent  # FP32
    off = resolve({env: "0"}, amp=True, has_gpu=True)
    assert not off.cudnn_bn_persistent and off.sources["cudnn_bn_persistent"] == f"env {env}=0"
    environ = {}
    precision.apply(resolve(amp=True, has_gpu=True), environ)
    assert environ == {env: "1"}
    environ = {env: "0"}
    precision.apply(resolve(environ, amp=True, has_gpu=True), environ)
    assert environ == {env: "0"}
