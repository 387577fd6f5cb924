"""What a ``main.py`` (and ``python -m`` of a model, a console script, ``prepare_dataset.py``)
does to the process as it starts, besides filtering TensorFlow's start-up lines
(``quiet_start``): the whole policy in one place (``common.entry`` applies it).

* **Keras' optional packages look absent while TensorFlow and Keras import**
  (``without_optional_imports``): Keras imports scikit-learn, matplotlib and IPython at its own
  import when they are installed, for what no script here uses, and TensorFlow's import took
  half as long again with them. The consequence, for the rest of the process: Keras recorded
  them as missing, so ``keras.wrappers``' ``SKLearnClassifier``, ``SKLearnRegressor`` and
  ``SKLearnTransformer`` and ``keras.visualization``'s plots raise Keras' ImportError ("requires
  `scikit-learn`", "requires the `matplotlib` package") although the packages are installed;
  importing scikit-learn or matplotlib yourself still works (the digits dataset and the
  detections' drawings do). ``TF_MODEL_SCRIPTS_FULL_KERAS=1`` turns this off: Keras finds them
  (``tests/test_versions.py`` shows both).
* **The start-up's objects are frozen out of the garbage collector's walks**
  (``settle_imports``): TensorFlow's and Keras' modules are some 400,000 objects that live as
  long as the process; each full collection, and the ones at exit, stop walking them. Nothing
  frozen is garbage (the modules hold it); no consequence but time.
"""
from __future__ import annotations

import contextlib
import os
import sys

# Packages Keras imports at its own import when they are installed (module docstring).
OPTIONAL_IMPORTS = ("sklearn", "matplotlib", "IPython")
# Set to 1: Keras imports them as it would (its scikit-learn wrappers and plots work).
FULL_KERAS = "TF_MODEL_SCRIPTS_FULL_KERAS"


@contextlib.contextmanager
def without_optional_imports():
    """TensorFlow and Keras imported inside the block find ``OPTIONAL_IMPORTS`` not installed
    (``sys.modules[name] = None``, which ``import`` takes for a missing module, and which Keras
    handles: they are optional for it); after it, importing them works again. One already
    imported is left as it is; with ``TF_MODEL_SCRIPTS_FULL_KERAS=1``, nothing is done."""
    blocked = [] if os.environ.get(FULL_KERAS) == "1" else [
        m for m in OPTIONAL_IMPORTS if m not in sys.modules]
    for m in blocked:
        sys.modules[m] = None
    try:
        yield
    finally:
        for m in blocked:
            if sys.modules.get(m, ...) is None:
                del sys.modules[m]


def settle_imports() -> None:
    """What the start-up imported, frozen (``gc.freeze``: the collector's permanent
    generation): a short run (a Horovod rank's check, an export, a tiny test) spent seconds in
    the collections' walks of TensorFlow's and Keras' objects."""
    import gc
    gc.freeze()
