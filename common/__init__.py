"""The runtime shared by the model scripts: flags, precision, Horovod, loops, logs, checkpoints.

Importing it sets TensorFlow's C++ log level to its warnings (``TF_CPP_MIN_LOG_LEVEL=1``, no
INFO lines) unless the environment sets one: the one place that does, before any script of the
repository imports TensorFlow (its start-up lines: ``common/runtime/quiet_start.py``)."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
