"""The Python API: a checkpoint or an export in one call, as keras-hub's ``from_preset`` and
timm's ``create_model`` give a model::

    from common import api

    model = api.load("/results/checkpoints")  # its settings, recipe and card come with it
    outputs = model.predict(images=[open("cat.jpg", "rb").read()])  # named numpy arrays
    model.export("/results/export", onnx=True)
    served = api.load("/results/export")  # the SavedModel: the same predict, the same card

``predict`` calls one of the export's signatures (``serving_default`` unless ``signature``
names another: Transformer-XL's ``score``, the image models' ``preprocessed``), whose inputs
and outputs ``client.json`` describes: what a checkpoint answers in Python is what its export
answers in a server. ``load`` builds a checkpoint's model the way ``main.py --model_dir``
does, from the settings its ``settings.json`` recorded (``**flags`` are main.py's flags over
them: ``amp=True``, ``xla=True``; Transformer-XL reads its vocabulary where main.py does,
``data_dir=``).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
import weakref

from common.errors import DataError


def load(path: str, **flags):
    """A ``Checkpoint`` for a checkpoint directory (or prefix) this repository wrote or imported,
    an ``Export`` for a directory ``--export_dir`` wrote; one line (``DataError``) otherwise."""
    if os.path.isfile(os.path.join(path, "saved_model.pb")):
        if flags:
            raise DataError(f"{path} is an export: its flags were fixed when it was written "
                            f"({', '.join(sorted(flags))} given)")
        return Export(path)
    return Checkpoint(path, **flags)


def _arrays(outputs) -> dict:
    return {k: v.numpy() for k, v in outputs.items()}


def _call(signatures, name: str, inputs: dict):
    import tensorflow as tf
    if name not in signatures:
        raise DataError(f"no signature {name!r}: this model has {', '.join(signatures)}")
    fn = signatures[name]
    specs = {s.name: s for s in fn.structured_input_signature[1].values()} if hasattr(
        fn, "structured_input_signature") else {s.name: s for s in fn.input_signature}
    missing = sorted(set(specs) - set(inputs))
    unknown = sorted(set(inputs) - set(specs))
    if missing or unknown:
        raise DataError(f"{name} takes {', '.join(sorted(specs))}"
                        + (f"; missing {', '.join(missing)}" if missing else "")
                        + (f"; no input {', '.join(unknown)}" if unknown else ""))
    return _arrays(fn(**{k: tf.convert_to_tensor(v, specs[k].dtype)
                         for k, v in inputs.items()}))


class Checkpoint:
    """A checkpoint's model, restored, with what travels with it: ``settings`` (its
    ``settings.json``), ``recipe`` (the image models' evaluation preprocessing), ``card`` (the
    model card its export would carry), ``task`` and ``model`` (the Keras model), ``messages``
    (what main.py would have printed as it loaded the checkpoint)."""

    def __init__(self, path: str, **flags):
        from common import models, runner
        from common.checkpoint import settings as checkpoint_settings
        from common.export import serving as serving_lib
        directory = checkpoint_settings.directory_of(path)
        record = checkpoint_settings.read(path) if os.path.isdir(directory) else None
        if not record or record.get("model") not in models.MODELS:
            raise DataError(f"{path} holds no checkpoint of this repository (no settings.json "
                            "naming one of its models): give a --model_dir a run wrote, or an "
                            "import_weights.py output")
        self.settings = record
        self._logs = tempfile.mkdtemp(prefix="tf-model-scripts-api-")
        weakref.finalize(self, shutil.rmtree, self._logs, True)
        argv = ["main.py", "--mode", "evaluate", "--model_dir", path,
                "--results_dir", self._logs]
        for k, v in flags.items():
            argv += [f"--{k}"] if v is True else [f"--no{k}"] if v is False else [f"--{k}", str(v)]
        said = io.StringIO()  # what main.py would print as it starts: kept, not printed
        with runner.process_state_restored(), contextlib.redirect_stdout(said):
            self._trainer = runner.setup(models.task_class(record["model"]), argv, loading=True)
            self._trainer.restore(required=True)
        self.messages = said.getvalue().splitlines()
        self.task, self.model = self._trainer.task, self._trainer.model
        self.serving = self._trainer.serving
        self._signatures = serving_lib.traced(self.serving, self.model)[0]  # export reuses them
        from common.checkpoint import scores
        # What evaluation scored at this checkpoint's step: the card's, and its exports'.
        self._scored = scores.at(self.task.flags.model_dir, self._trainer.step)
        self.card = serving_lib.model_card(self.serving, self.model, self._scored)
        self.recipe = self.card["evaluation_preprocessing"]

    @property
    def signatures(self) -> list[str]:
        return list(self._signatures)

    def predict(self, signature: str = "serving_default", **inputs) -> dict:
        """The signature's named outputs (numpy) for ``inputs`` (lists or arrays by name)."""
        return _call(self._signatures, signature, inputs)

    def export(self, export_dir: str, onnx: bool = False, triton: str | None = None) -> str:
        """What ``main.py --export_dir`` (``--export_onnx``, ``--export_triton``) writes, for this
        checkpoint; returns ``export_dir``."""
        import types

        from common import export
        asked = types.SimpleNamespace(export_onnx=onnx, export_onnx_int8=False,
                                      export_triton=triton)
        export.export(self.serving, self.model, export_dir,
                      export.writes_onnx(self.serving, asked), self._trainer.log,
                      triton_dir=triton, scored=self._scored)
        return export_dir


class Export:
    """An export (``--export_dir``): the SavedModel's signatures, ``info`` (its
    ``client.json``), ``card`` (its model card) and ``labels`` (class names, where it has
    them)."""

    def __init__(self, path: str):
        import tensorflow as tf

        from common.export import serving as serving_lib
        try:
            self.info = serving_lib.read_client_info(path)
        except (OSError, ValueError) as e:
            raise DataError(f"{path} has no readable assets/client.json ({e}): give what "
                            "--export_dir wrote") from None
        self.card = self.info.get("model_card")
        labels = os.path.join(path, "assets", self.info.get("labels") or "-")
        self.labels = (open(labels, encoding="utf-8").read().splitlines()
                       if os.path.isfile(labels) else None)
        self._loaded = tf.saved_model.load(path)
        self._signatures = dict(self._loaded.signatures)

    @property
    def signatures(self) -> list[str]:
        return list(self._signatures)

    def predict(self, signature: str = "serving_default", **inputs) -> dict:
        """The signature's named outputs (numpy) for ``inputs`` (lists or arrays by name)."""
        return _call(self._signatures, signature, inputs)

    def __repr__(self) -> str:
        return f"Export({json.dumps(self.info.get('model'))}, {self.signatures})"
