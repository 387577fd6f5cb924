"""LAMB exactly as NVIDIA's Transformer-XL (TF1) uses it, as a Keras 3 optimizer.

Per variable, with defaults wd 0.01, beta_1 0.9, beta_2 0.999, epsilon 1e-6::

    m = b1 m + (1 - b1) g          v = b2 v + (1 - b2) g^2
    step = m / (sqrt(v) + eps) + wd w
    ratio = min(|w|, 10) / |step|   (1 when either norm is 0)
    w -= lr ratio step

Unlike ``keras.optimizers.Lamb``: no bias correction (NVIDIA's code creates the beta powers and
never uses them), the weight norm is clipped at 10 in the trust ratio, the weight decay sits
inside the step (so the trust ratio scales it too) and applies to every variable, embeddings,
biases and layer norms included (NVIDIA passes dense gradients, ``sparse_as_dense``). Moments
are kept in float32 whatever the variables' dtype.

``global_clipnorm`` (NVIDIA clips at 0.25) is Keras' formula, the gradients times
``clip / max(global norm, clip)`` (NaN when the norm is not finite), but the product is taken
inside each variable's fused moment update instead of in a pass of its own over all 192 M
gradients.

On a CPU, per variable the update is two XLA computations (moments and step; the weights'
change) and two L2Loss kernels (the norms between them): most of its time is memory traffic,
about 48 bytes per parameter, and none of the four allocates more than the step; one XLA
computation with the norms inside was slower there (XLA on a CPU materialises each square
before summing it; figures in docs/performance/). On a GPU (``fused``) the whole update of every
variable is one XLA computation (``_fused_update``): XLA's GPU reductions fuse the squares, and
the four launches per variable (about 850 for Transformer-XL's 212 variables, each with XLA's
host-side launch cost) become one.
"""
from __future__ import annotations

import keras
import tensorflow as tf
from keras import ops

from common import graph


class NvidiaLamb(keras.optimizers.Optimizer):
    def __init__(self, learning_rate=0.01, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-6, decay: float = 0.01, trust_clip: float = 10.0,
                 fused: bool = False, name: str = "nvidia_lamb", **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
        self.decay, self.trust_clip = decay, trust_clip  # "decay": Keras owns "weight_decay"
        self.fused = fused  # every variable in one XLA computation (a GPU's choice)
        self._grad_scale = 1.0  # set by _clip_gradients, which apply() calls before the updates

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._m, self._v = self.add_optimizer_variables(var_list, ["m", "v"])

    def _clip_gradients(self, grads):
        """Global-norm clipping's scale, kept for ``update_step``; the gradients unchanged."""
        self._grad_scale = 1.0
        if not (self.global_clipnorm and self.global_clipnorm > 0):
            return super()._clip_gradients(grads)
        norm = tf.linalg.global_norm([g for g in grads if g is not None])
        clip = self.global_clipnorm
        # As keras.optimizers' clip_by_global_norm: a non-finite norm gives NaN.
        self._grad_scale = clip * tf.minimum(1.0 / norm, 1.0 / clip) + (norm - norm)
        return grads

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        """Keras' TensorFlow backend updates the variables one by one (``update_step``); fused,
        they are updated together."""
        if not self.fused:
            return super()._backend_update_step(grads, trainable_variables, learning_rate)
        index = [self._get_variable_index(v) for v in trainable_variables]
        _fused_update([_tf_variable(self._m[i]) for i in index],
                      [_tf_variable(self._v[i]) for i in index], list(grads),
                      [_tf_variable(v) for v in trainable_variables],
                      ops.cast(self._grad_scale, "float32"), ops.cast(learning_rate, "float32"),
                      self.beta_1, self.beta_2, self.epsilon, self.decay, self.trust_clip)

    def update_step(self, gradient, variable, learning_rate):
        i = self._get_variable_index(variable)
        var = _tf_variable(variable)
        step = _moments(_tf_variable(self._m[i]), _tf_variable(self._v[i]), gradient,
                        ops.cast(self._grad_scale, "float32"), var, self.beta_1, self.beta_2,
                        self.epsilon, self.decay)
        # Both norms from TensorFlow's L2Loss kernel, one pass each without a temporary: in XLA
        # on a CPU a sum of squares becomes a materialised square (two 548 MB temporaries for
        # the embedding) and a reduction over it.
        w_norm = tf.minimum(tf.sqrt(2.0 * tf.nn.l2_loss(tf.cast(var, tf.float32))),
                            self.trust_clip)
        s_norm = tf.sqrt(2.0 * tf.nn.l2_loss(step))
        ratio = tf.where((w_norm > 0) & (s_norm > 0), w_norm / tf.maximum(s_norm, 1e-30), 1.0)
        _apply(var, step, ops.cast(learning_rate, "float32") * ratio)

    def get_config(self):
        return {**super().get_config(), "beta_1": self.beta_1, "beta_2": self.beta_2,
                "epsilon": self.epsilon, "decay": self.decay, "trust_clip": self.trust_clip,
                "fused": self.fused}


def _tf_variable(variable):
    """The TensorFlow variable behind a Keras one (the optimizer hands either)."""
    return variable.value if isinstance(variable, keras.Variable) else variable


@graph.function(jit_compile=True)
def _moments(m, v, gradient, grad_scale, var, beta_1, beta_2, epsilon, decay):
    """The moments' update (m and v assigned) and the step, in one fused XLA loop over the
    variable's elements, where the same math as separate TensorFlow ops makes about ten."""
    g = tf.cast(gradient, tf.float32) * grad_scale
    m_new = beta_1 * m + (1.0 - beta_1) * g
    v_new = beta_2 * v + (1.0 - beta_2) * tf.square(g)
    m.assign(m_new)
    v.assign(v_new)
    return m_new / (tf.sqrt(v_new) + epsilon) + decay * tf.cast(var, tf.float32)


@graph.function(jit_compile=True)
def _apply(var, step, rate):
    var.assign(tf.cast(tf.cast(var, tf.float32) - rate * step, var.dtype))


@graph.function(jit_compile=True)
def _fused_update(ms, vs, grads, vars_, grad_scale, rate, beta_1, beta_2, epsilon, decay,
                  trust_clip):
    """``update_step``'s math for every variable at once, in one XLA computation."""
    for m, v, g, var in zip(ms, vs, grads, vars_):
        g = tf.cast(g, tf.float32) * grad_scale
        m_new = beta_1 * m + (1.0 - beta_1) * g
        v_new = beta_2 * v + (1.0 - beta_2) * tf.square(g)
        m.assign(m_new)
        v.assign(v_new)
        w = tf.cast(var, tf.float32)
        step = m_new / (tf.sqrt(v_new) + epsilon) + decay * w
        w_norm = tf.minimum(tf.sqrt(tf.reduce_sum(tf.square(w))), trust_clip)
        s_norm = tf.sqrt(tf.reduce_sum(tf.square(step)))
        ratio = tf.where((w_norm > 0) & (s_norm > 0), w_norm / tf.maximum(s_norm, 1e-30), 1.0)
        var.assign(tf.cast(w - rate * ratio * step, var.dtype))
