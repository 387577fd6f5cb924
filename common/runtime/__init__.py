"""The runtime around a run: the device it computes on, one code path for one process and for
Horovod, stop signals and a hung rank, TensorFlow's quiet start, what it ran on, Slurm's job
time, and its logs (DLLogger, TensorBoard, NVIDIA's key names)."""
