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
"""
from __future__ import annotations

import keras
from keras import ops


class NvidiaLamb(keras.optimizers.Optimizer):
    def __init__(self, learning_rate=0.01, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-6, decay: float = 0.01, trust_clip: float = 10.0,
                 name: str = "nvidia_lamb", **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
        self.decay, self.trust_clip = decay, trust_clip  # "decay": Keras owns "weight_decay"

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._m, self._v = self.add_optimizer_variables(var_list, ["m", "v"])

    def update_step(self, gradient, variable, learning_rate):
        w = ops.cast(variable, "float32")
        g = ops.cast(gradient, "float32")
        i = self._get_variable_index(variable)
        m, v = self._m[i], self._v[i]
        self.assign(m, self.beta_1 * m + (1.0 - self.beta_1) * g)
        self.assign(v, self.beta_2 * v + (1.0 - self.beta_2) * ops.square(g))
        step = m / (ops.sqrt(v) + self.epsilon) + self.decay * w
        w_norm = ops.minimum(ops.sqrt(ops.sum(ops.square(w))), self.trust_clip)
        s_norm = ops.sqrt(ops.sum(ops.square(step)))
        ratio = ops.where((w_norm > 0) & (s_norm > 0), w_norm / ops.maximum(s_norm, 1e-30), 1.0)
        lr = ops.cast(learning_rate, "float32")
        self.assign(variable, ops.cast(w - lr * ratio * step, variable.dtype))

    def get_config(self):
        return {**super().get_config(), "beta_1": self.beta_1, "beta_2": self.beta_2,
                "epsilon": self.epsilon, "decay": self.decay, "trust_clip": self.trust_clip}
