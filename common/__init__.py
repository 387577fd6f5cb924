"""The runtime shared by the model scripts: flags, precision, Horovod, loops, logs, checkpoints."""
