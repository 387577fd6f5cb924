"""The one compiled training step of every model.

In this order: each micro-batch made ready where it is (``Task.prepare_train_batch``, in the
forward pass's function unless ``Task.prepare_compiles`` is False) -> forward -> loss (float32)
-> loss scale (float16 only) -> gradients, averaged over the step's ``--batch_chunk``
micro-batches -> allreduce across ranks -> the update: one finiteness decision, unscale, skip if
not finite, clip, apply (the Keras ``LossScaleOptimizer`` and the optimizer's own clipping),
count a skipped step, step += 1. A stateful task's state (Transformer-XL's memory) goes into
each micro-batch's forward pass and its next value comes out of the step.

With ``--xla`` the forward and backward pass and the update are compiled apart with
``jit_compile``: Horovod's allreduce sits between them (its ops have no XLA kernels on a CPU
build). On a GPU the update, with its skip, is compiled by XLA in every run: a TensorFlow
``tf.cond`` on a predicate computed on the GPU makes the host wait for it, so that no step
could be queued behind the current one.
"""
from __future__ import annotations

import keras
import tensorflow as tf

from common import graph
from common import precision as precision_lib


def build(task, model: keras.Model, optimizer, guard, global_step: tf.Variable, dist,
          xla: bool, fp16_allreduce: bool, update_compiled: bool):
    """``step(micro_batches, states) -> (loss, states)``, a ``tf.function``; its attributes
    ``xla_parts`` (the compiled parts under ``--xla``) and ``update`` are for tests and HLO
    dumps."""
    loss_scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    dynamic_scale = loss_scaled and not isinstance(optimizer,
                                                   precision_lib.FixedLossScaleOptimizer)
    variables = model.trainable_variables

    def gradients(micro_batches, states):
        """Mean loss and mean gradients over the step's micro-batches (--batch_chunk), and
        each micro-batch's next state."""
        total, acc, new_states = 0.0, None, []
        for batch, state in zip(micro_batches, states):  # unrolled: k is fixed for the run
            if task.prepare_compiles:
                batch = task.prepare_train_batch(batch)
            with tf.GradientTape() as tape:
                loss, state = task.train_loss(model, batch, state)
                regularization = task.regularization(model)
                if regularization is not None:
                    loss += regularization
                scaled = optimizer.scale_loss(loss) if loss_scaled else loss
            grads = tape.gradient(scaled, variables)
            acc = grads if acc is None else [
                a if g is None else g if a is None else a + g for a, g in zip(acc, grads)]
            total += loss
            new_states.append(state)
        # Sparse gradients (an embedding lookup's) become dense, as Horovod's sparse_as_dense:
        # one fused allreduce of dense tensors, and clipping and the optimizer see one form.
        acc = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in acc]
        k = len(micro_batches)
        if k > 1:
            acc = [None if g is None else g / k for g in acc]
        return total / k, acc, tuple(new_states)

    def update(grads, loss):
        """The step's one finiteness decision (``guard.finite``), taken where the update is
        compiled: the update applied when the gradients are finite (the loss-scale optimizer
        lowers its scale instead), the decision counted (``guard.record``), the step counted.
        On a GPU all of it is one XLA computation: a per-variable reduction outside it would be
        a kernel per variable, and a TensorFlow op deciding on the host a wait for the GPU."""
        finite, first = guard.finite(grads)
        if loss_scaled:
            optimizer.finite = finite
            try:
                optimizer.apply(grads, variables)
            finally:
                optimizer.finite = None
        else:
            def apply():
                optimizer.apply(grads, variables)
                return tf.constant(True)
            tf.cond(finite, apply, lambda: tf.constant(False))
        counted = None
        if dynamic_scale:  # an overflow counts once the scale is spent, or the loss is not finite
            counted = tf.logical_or(tf.logical_not(tf.math.is_finite(loss)),
                                    optimizer.dynamic_scale < 1.0)
        guard.record(finite, first, global_step + 1, counted)
        global_step.assign_add(1)
        return finite

    update_xla = xla or update_compiled  # Capabilities.update_compiled: on a GPU
    if not (update_xla or dist.enabled):  # one graph
        gradients_c, update_c = gradients, update
    else:
        # Compiled apart: Horovod's allreduce has no XLA kernel, and XLA compiles an update
        # inside the skip's tf.cond about twice as slowly as the update alone.
        gradients_c = graph.function(gradients, jit_compile=xla)
        update_c = graph.function(update, jit_compile=update_xla)

    # autograph=False, here and in every tf.function and tf.data map of this repository: the
    # code traced branches on Python values and through tf.cond only, and AutoGraph's rewriting
    # of it cost every process seconds of CPU at its first trace (docs/performance/startup.md).
    @graph.function()
    def step(micro_batches, states):
        if not task.prepare_compiles:
            micro_batches = tuple(task.prepare_train_batch(b) for b in micro_batches)
        loss, grads, states = gradients_c(micro_batches, states)
        grads = dist.allreduce_gradients(grads, fp16_compression=fp16_allreduce)
        # Every rank decides alike: these are the allreduced gradients.
        update_c(grads, loss)
        return loss, states
    step.xla_parts = (gradients_c, update_c) if xla else ()
    step.update = update_c
    return step
