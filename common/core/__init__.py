"""The step and loop core every mode runs: the compiled training step, the step loop and its
steppers, when the host waits for the device, non-finite steps, the learning-rate schedules,
evaluation, the benchmark modes and inference (predict, the inference benchmark's data, and its
TF-TRT conversion, ``tftrt``)."""
