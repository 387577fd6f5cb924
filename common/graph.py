"""How this repository traces TensorFlow code: without AutoGraph. AutoGraph rewrote every
function the training step, the evaluation, the input pipelines and the exports trace (87 over
the three models) in every process, about 4 s of CPU in a tiny run (docs/performance/
startup.md); the code is written with ``tf.cond`` and Python values instead. ``function`` is
``tf.function`` and ``dataset_map`` is ``Dataset.map`` with that settled, and the code uses
them by habit: ``tests/test_layout.py`` finds no bare ``tf.function`` and no bare ``.map`` of a
dataset outside this module."""
from __future__ import annotations

import tensorflow as tf
from tensorflow.autograph.experimental import do_not_convert


def function(fn=None, **kwargs):
    """``tf.function(fn, **kwargs)`` traced without AutoGraph; as a decorator too
    (``@graph.function(input_signature=...)``)."""
    return tf.function(fn, autograph=False, **kwargs)


def dataset_map(dataset: tf.data.Dataset, fn, **kwargs) -> tf.data.Dataset:
    """``dataset.map(fn, **kwargs)``, ``fn`` traced without AutoGraph."""
    return dataset.map(do_not_convert(fn), **kwargs)
