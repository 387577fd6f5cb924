"""What one step of the loop is (``common/loop.py``): a training step and an inference step.
Each holds only what its step needs, handed to it by the Trainer: the compiled function, the
data, the per-micro-batch states, and the checks of what the device found."""
from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from common.loop import Stepper


class TrainStep(Stepper):
    """One optimizer step: ``--batch_chunk`` micro-batches through the compiled train step
    (``common/train_step.py``), each micro-batch's state carried to the next step's and reset
    at an epoch's first step. ``check`` reads the device's counters at a sync point: bad inputs
    (``check_inputs``) and non-finite steps (``guard``: the number of skipped steps is kept)."""

    def __init__(self, step_fn, data, next_batches: Callable, initial_states: Callable,
                 global_items: Callable, check_inputs: Callable, guard_check: Callable,
                 steps_per_epoch: int | None):
        self.step_fn, self.data = step_fn, data
        self.next_batches, self.initial_states = next_batches, initial_states
        self.global_items, self.check_inputs, self.guard_check = (global_items, check_inputs,
                                                                  guard_check)
        self.steps_per_epoch = steps_per_epoch
        self.states, self.skipped = None, 0

    def dispatch(self, step: int):
        if self.states is None or (self.steps_per_epoch and (step - 1) % self.steps_per_epoch
                                   == 0):
            self.states = self.initial_states()  # a run's or an epoch's first step
        micro = self.next_batches(self.data)
        states_in = self.states
        loss, self.states = self.step_fn(micro, states_in)  # no wait for the device here
        self.items = self.global_items(micro)
        self.profiled = (self.step_fn, (micro, states_in))
        return loss

    def wait(self, loss) -> float:
        return float(loss)

    def check(self, step: int, loss: float, last: bool) -> None:
        self.check_inputs("train")
        self.skipped = self.guard_check(step, loss, last)


class InferStep(Stepper):
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
