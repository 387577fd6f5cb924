"""What one step of the loop is (``common/core/loop.py``): a training step and an inference step.
Each holds only what its step needs, handed to it by the Trainer: the compiled function, the
data, the per-micro-batch states, and the checks of what the device found."""
from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from common.core.loop import Stepper
from common.errors import DataError


class TrainStepper(Stepper):
    """One optimizer step: ``batch_chunk`` consecutive micro-batches through the compiled train
    step (``common/core/train_step.py``), each micro-batch's state carried to the next step's and
    reset at an epoch's first step. ``check`` reads the device's counters at a sync point: bad
    inputs (``check_inputs``) and non-finite steps (``guard_check``: the skipped steps are
    kept). ``items``: what the step processed over all ``world`` ranks (``items_in`` each)."""

    def __init__(self, step_fn, data, batch_chunk: int, batch_size: int, world: int,
                 items_in: Callable, initial_states: Callable, check_inputs: Callable,
                 guard_check: Callable, steps_per_epoch: int | None):
        self.step_fn, self.data = step_fn, data
        self.batch_chunk, self.batch_size, self.world = batch_chunk, batch_size, world
        self.items_in, self.initial_states = items_in, initial_states
        self.check_inputs, self.guard_check = check_inputs, guard_check
        self.steps_per_epoch = steps_per_epoch
        self.states, self.skipped = None, 0

    def micro_batches(self) -> tuple:
        """The micro-batches of one optimizer step; one line when the data run dry."""
        try:
            return tuple(next(self.data) for _ in range(self.batch_chunk))
        except (StopIteration, RuntimeError) as e:  # a generator's StopIteration: RuntimeError
            if isinstance(e, RuntimeError) and not isinstance(e.__cause__, StopIteration):
                raise
            raise DataError("the training data gave no batch: the training split is empty or "
                            f"smaller than one batch (--batch_size {self.batch_size})") from None

    def dispatch(self, step: int):
        if self.states is None or (self.steps_per_epoch and (step - 1) % self.steps_per_epoch
                                   == 0):
            self.states = self.initial_states()  # a run's or an epoch's first step
        micro = self.micro_batches()
        states_in = self.states
        loss, self.states = self.step_fn(micro, states_in)  # no wait for the device here
        self.items = sum(self.items_in(b) for b in micro) * self.world
        self.profiled = (self.step_fn, (micro, states_in))
        return loss

    def wait(self, loss) -> float:
        return float(loss)

    def check(self, step: int, loss: float, last: bool) -> None:
        self.check_inputs("train")
        self.skipped = self.guard_check(step, loss, last)


class InferStepper(Stepper):
    """One inference batch through the serving computation, its state carried to the next."""

    def __init__(self, infer, data, inputs_of: Callable, items_of: Callable, state):
        self.infer, self.data, self.inputs_of, self.items_of = infer, data, inputs_of, items_of
        self.state, self.inputs = state, None

    def dispatch(self, step: int):
        batch = next(self.data)
        inputs, state_in = self.inputs_of(batch), self.state
        outputs, self.state = self.infer(inputs, state_in)
        self.items, self.inputs = self.items_of(batch), inputs
        self.profiled = (self.infer, (inputs, state_in))
        return outputs

    def wait(self, outputs):
        return tf.nest.map_structure(lambda t: t.numpy(), outputs)
