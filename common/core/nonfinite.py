"""Non-finite steps: decided on the device, never applied, counted, and stopped on the host.

Every precision gets the rule float16's dynamic loss scaling already had: a step whose
gradients (after the allreduce, so every rank decides alike) hold an inf or a NaN is not applied
to the weights. The decision and the counting happen inside the compiled step, so the host does
not wait for the device every step; it reads the counters at the loop's sync points (display,
evaluation, save, stop) and stops the run once ``--max_bad_steps`` consecutive steps were
non-finite, or when the last step of the run is, naming the step the streak began at and the
first variable whose gradient was not finite. An isolated non-finite step (one bad batch, or
float16's loss scale finding its level) is skipped and counted, and training goes on.

Weights are also checked before every save and after every restore (the trainer): a checkpoint
with non-finite weights is never written, and one from elsewhere is refused.
"""
from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from common.errors import TrainingError


def _finite_each(tensors) -> tf.Tensor:
    """(n,) bool: whether each tensor (None counts as finite) holds only finite values."""
    return tf.stack([tf.constant(True) if t is None else tf.reduce_all(tf.math.is_finite(t))
                     for t in tensors])


def _first_false(flags: tf.Tensor) -> tf.Tensor:
    """Index of the first False in ``flags`` (int64), or -1 when there is none (static shapes
    only: XLA compiles it quickly). ``argmin`` over float32: a GPU has no int32 ``ArgMin``
    kernel, and TensorFlow would run it on the host (common/tools/gpu_placement.py)."""
    first = tf.argmin(tf.cast(flags, tf.float32), output_type=tf.int64)
    return tf.where(tf.reduce_all(flags), tf.constant(-1, tf.int64), first)


def first_non_finite(variables: Sequence) -> str | None:
    """The name of the first variable holding an inf or a NaN, or None (float variables)."""
    values = [tf.convert_to_tensor(v) for v in variables]
    first = int(_first_false(_finite_each([x if x.dtype.is_floating else None for x in values])))
    return None if first < 0 else _name(variables[first])


def _name(variable) -> str:
    return getattr(variable, "path", None) or variable.name


class NonFiniteGuard:
    """Device-side counters of non-finite steps for ``variables`` (the trainable ones)."""

    def __init__(self, variables: Sequence, max_streak: int):
        self.names = [_name(v) for v in variables]
        self.max_streak = max_streak
        counter = lambda name, value=0: tf.Variable(value, dtype=tf.int64, trainable=False,  # noqa: E731
                                                    name=name)
        self.streak = counter("nonfinite_streak")  # consecutive non-finite steps, up to now
        self.skipped = counter("nonfinite_steps")  # all non-finite steps of this run
        self.streak_start = counter("nonfinite_streak_start")  # the step the streak began at
        self.first_variable = counter("nonfinite_first_variable", -1)  # ... and its variable

    def finite(self, grads) -> tuple[tf.Tensor, tf.Tensor]:
        """(all gradients finite: bool scalar, index of the first that is not or -1): the
        step's one decision, taken inside the update that XLA compiles on a GPU
        (``common/core/train_step.py``), which the loss-scale optimizer takes too
        (``precision.LossScaleOptimizer``). A sum per gradient, then one finiteness test of
        the sums: an inf or a NaN anywhere makes its gradient's sum one (so would finite
        values summing past float32's 3.4e38, a step as diverged as any), in one pass over
        each gradient where ``isfinite`` then ``all`` take two and a temporary."""
        sums = tf.stack([tf.constant(0.0) if g is None else
                         tf.reduce_sum(tf.cast(g, tf.float32)) for g in grads])
        flags = tf.math.is_finite(sums)
        return tf.reduce_all(flags), _first_false(flags)

    def record(self, finite: tf.Tensor, first: tf.Tensor, step: tf.Tensor,
               counted: tf.Tensor | None = None) -> None:
        """Counts ``step`` (inside the compiled step, after the decision): a non-finite step is
        skipped; it adds to the streak that stops the run when ``counted`` (default: always).
        Under dynamic loss scaling the trainer counts only steps that scaling cannot explain:
        float16 overflows while the scale is still finding its level are skipped, not bad."""
        bad = tf.logical_not(finite)
        counted = bad if counted is None else tf.logical_and(bad, counted)
        starts = tf.logical_and(counted, tf.equal(self.streak, 0))
        self.streak_start.assign(tf.where(starts, tf.cast(step, tf.int64), self.streak_start))
        self.first_variable.assign(tf.where(starts, first, self.first_variable))
        self.streak.assign((self.streak + 1) * tf.cast(counted, tf.int64))
        self.skipped.assign_add(tf.cast(bad, tf.int64))

    def check(self, step: int, loss: float, latest_checkpoint: str | None,
              loss_scale: float | None = None, last: bool = False) -> int:
        """At a host sync point: stops the run when the streak reached the limit, or when the
        run's ``last`` step ends one (a model that never recovered is not saved as the result);
        else returns the number of non-finite (skipped) steps so far."""
        streak = int(self.streak.numpy())
        if streak >= self.max_streak or (last and streak):
            name = self.names[int(self.first_variable.numpy())]
            scale = f", loss scale {loss_scale:g}" if loss_scale is not None else ""
            raise TrainingError(
                f"loss is {loss:g} at step {step}: the gradients were not finite for {streak} "
                f"consecutive steps since step {int(self.streak_start.numpy())} (first: {name}"
                f"{scale}), and none of them was applied; stopped without saving (last "
                f"checkpoint: {latest_checkpoint})")
        return int(self.skipped.numpy())
