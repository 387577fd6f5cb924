"""Transformer-XL's LAMB against a numpy version of NVIDIA's formula."""

import keras
import numpy as np
import pytest

from txl.lamb import NvidiaLamb

pytestmark = pytest.mark.both_stacks  # the stack check: the NGC suite runs this file


def _reference(ws, grads, lr, steps, b1=0.9, b2=0.999, eps=1e-6, wd=0.01, clip=10.0,
               clipnorm=None):
    ws = [w.astype(np.float64) for w in ws]
    ms, vs = [np.zeros_like(w) for w in ws], [np.zeros_like(w) for w in ws]
    for t in range(steps):
        norm = np.sqrt(sum(np.sum(g ** 2) for g in grads[t]))
        scale = min(1.0, clipnorm / norm) if clipnorm else 1.0
        for i, w in enumerate(ws):
            g = grads[t][i] * scale
            ms[i] = b1 * ms[i] + (1 - b1) * g
            vs[i] = b2 * vs[i] + (1 - b2) * g * g
            step = ms[i] / (np.sqrt(vs[i]) + eps) + wd * w
            wn, sn = min(np.linalg.norm(w), clip), np.linalg.norm(step)
            ratio = wn / sn if wn > 0 and sn > 0 else 1.0
            ws[i] = w - lr * ratio * step
    return ws


@pytest.mark.parametrize("fused", [False, True], ids=["per-variable", "fused"])
@pytest.mark.parametrize("clipnorm", [None, 0.25, 1e6])
def test_lamb_matches_nvidias_formula_including_the_clip_and_zero_norms(clipnorm, fused):
    """Also with global-norm clipping (NVIDIA's 0.25; 1e6: a norm below the clip), whose scale
    the fused update applies. LAMB's step is nearly blind to the gradients' scale; epsilon 0.01
    makes it see it. Per variable (a CPU's update) and all variables in one XLA computation
    (a GPU's), alike."""
    rng = np.random.default_rng(0)
    init = [rng.normal(0, 1, (5, 7)), rng.normal(0, 30, (40,)),  # |w| > 10: the clip applies
            np.zeros((3,))]  # |w| = 0: ratio 1
    grads = [[rng.normal(0, 1, w.shape) for w in init] for _ in range(4)]
    variables = [keras.Variable(w.astype("float32")) for w in init]
    opt = NvidiaLamb(learning_rate=0.05, epsilon=0.01, global_clipnorm=clipnorm, fused=fused)
    for g in grads:
        opt.apply([x.astype("float32") for x in g], variables)
    for got, want in zip(variables, _reference(init, grads, 0.05, 4, eps=0.01,
                                               clipnorm=clipnorm)):
        np.testing.assert_allclose(got.numpy(), want, rtol=2e-5, atol=1e-6)


def test_clipping_a_non_finite_gradient_gives_nan_as_keras_does():
    w = keras.Variable(np.ones(3, np.float32))
    NvidiaLamb(0.1, global_clipnorm=0.25).apply([np.array([1, np.inf, 0], np.float32)], [w])
    assert np.isnan(w.numpy()).all()


def test_differs_from_keras_lamb_which_has_bias_correction_and_no_clip():
    w = np.full((4,), 20.0, np.float32)
    a, b = keras.Variable(w), keras.Variable(w)
    NvidiaLamb(0.1).apply([np.ones(4, np.float32)], [a])
    keras.optimizers.Lamb(0.1, epsilon=1e-6).apply([np.ones(4, np.float32)], [b])
    assert not np.allclose(a.numpy(), b.numpy())


def test_fused_lamb_is_one_xla_computation_for_every_variable():
    """What a GPU saves: one compiled call per step, not four kernels per variable."""
    import tensorflow as tf
    variables = [keras.Variable(np.ones((3, 4), np.float32)),
                 keras.Variable(np.ones(5, np.float32))]
    opt = NvidiaLamb(0.1, fused=True)
    opt.build(variables)

    @tf.function
    def step(grads):
        opt.apply(grads, variables)
    graph = step.get_concrete_function([tf.TensorSpec(v.shape) for v in variables]).graph
    calls = [op for op in graph.get_operations() if op.type in ("PartitionedCall",
                                                                 "StatefulPartitionedCall")]
    names = [op.get_attr("f").name for op in calls]
    assert sum("_fused_update" in n for n in names) == 1
    assert not [op for op in graph.get_operations() if op.type == "L2Loss"]
