"""The Python API: a checkpoint or an export in one call, as keras-hub's ``from_preset`` and
timm's ``create_model`` give a model::

    from tf_model_scripts import api  # (common.api, after its names are checked)

    model = api.load("/results/checkpoints")  # its settings, recipe and card come with it
    outputs = model.predict(images=["cat.jpg"])  # named numpy arrays
    model.export("/results/export", onnx=True)
    served = api.load("/results/export")  # the SavedModel: the same predict, the same card

``predict`` calls one of the export's signatures (``serving_default`` unless ``signature``
names another: Transformer-XL's ``score``, the image models' ``preprocessed``), whose inputs
and outputs ``client.json`` describes: what a checkpoint answers in Python is what its export
answers in a server. An image is a file's path, its bytes, a PIL image or uint8 pixels, one or
a list; one that cannot be decoded is a ``DataError`` naming it (``mask=True``: the others
answered, it ``valid`` False). Token ids are checked before any cast against the signature's
type, the vocabulary and the served ``max_segment``, as the server checks them: every refusal
is one ``DataError`` line. ``load`` builds a checkpoint's model the way ``main.py --model_dir``
does, from the settings its ``settings.json`` recorded (``**flags`` are main.py's flags over
them: ``amp=True``, ``xla=True``). Transformer-XL's checkpoint keeps its vocabulary (its
``vocab.txt`` beside ``settings.json``), and a model of text answers text: ``score(text)``
(``main.py --mode evaluate``'s perplexity, or with ``protocol="served"`` the text client's),
``generate(prompt)`` and ``sequence()`` (segments one at a time, the memory kept in the
object as the server keeps it)::

    lm = api.load("/results/txl/checkpoints")
    lm.score(open("wiki.test.tokens").read())["perplexity"]
    lm.generate("The game began", words=20)
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import re
import warnings

from common.errors import DataError, one_line


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


def _image_bytes(i: int, item) -> tuple[bytes, str]:
    """One image of ``images`` as the encoded bytes the signature decodes, and how to name it
    in an error: a file's path, encoded bytes, a PIL image, or uint8 pixels (H, W[, C])."""
    import numpy as np
    where = f"images[{i}]"
    if isinstance(item, (bytes, bytearray, memoryview)):
        return bytes(item), where
    if isinstance(item, (str, os.PathLike)):
        path = os.fspath(item)
        try:
            with open(path, "rb") as f:
                return f.read(), path
        except OSError as e:
            raise DataError(f"{where}: cannot read {path} ({e.strerror or e})") from None
    if type(item).__module__.startswith("PIL.") and hasattr(item, "save"):
        return _pil_png(item, where), where
    if isinstance(item, np.ndarray):
        if item.dtype != np.uint8 or item.ndim not in (2, 3) or (
                item.ndim == 3 and item.shape[2] not in (1, 3, 4)) or 0 in item.shape:
            raise DataError(f"{where}: an array of {item.dtype} {tuple(item.shape)}; an image "
                            "is uint8 pixels of shape (height, width), (height, width, 3) "
                            "(RGB) or with 1 or 4 channels")
        import tensorflow as tf
        pixels = item[:, :, None] if item.ndim == 2 else item
        return tf.io.encode_png(pixels).numpy(), where
    raise DataError(f"{where}: a {type(item).__name__}; an image is a file's path, its bytes, "
                    "a PIL image or a uint8 array")


def _pil_png(image, where: str) -> bytes:
    """A PIL image as PNG bytes that the export's decoder reads as it reads the file the image
    came from: PNG's own modes as they are (palette, grey with alpha, RGBA, 1-bit, 16-bit grey,
    which the decoder scales to 8 bits), CMYK as TensorFlow's JPEG decoder turns a CMYK JPEG
    into RGB, 32-bit integers within 16 bits as 16-bit grey. Pixels it cannot represent (float,
    integers beyond 16 bits, other colour spaces) are refused, naming the mode: converting them
    to RGB clipped 16-bit grey at 255 (a white picture) and truncated float to 0."""
    import numpy as np
    from PIL import Image
    if image.mode == "CMYK":  # (255 - C) * (255 - K) / 255, truncated: TensorFlow's formula
        cmyk = np.asarray(image).astype(np.uint32)
        image = Image.fromarray(((255 - cmyk[..., :3]) * (255 - cmyk[..., 3:]) // 255)
                                .astype(np.uint8), "RGB")
    elif image.mode == "I":
        pixels = np.asarray(image)
        if pixels.size and not (pixels.min() >= 0 and pixels.max() <= 65535):
            raise DataError(f"{where}: a PIL image of mode I with values {pixels.min()} to "
                            f"{pixels.max()}; an image's pixels are 8 or 16 bits")
        image = Image.fromarray(pixels.astype(np.uint16))
    encoded = io.BytesIO()
    try:
        image.save(encoded, format="PNG")
    except (OSError, ValueError, KeyError):
        raise DataError(f"{where}: a PIL image of mode {image.mode}, which is not pixels this "
                        "model decodes (8- or 16-bit grey, RGB, RGBA, palette or CMYK): give "
                        "the file, or convert the image") from None
    return encoded.getvalue()


ARRAY_SHAPES = ("images are uint8 pixels: (height, width), (height, width, channels) with 1, 3 "
                "or 4 channels, or a batch of those (n, height, width, channels)")


def _images(value) -> tuple[list[bytes], list[str]]:
    """``images`` as given (one image or a sequence of them, of any of ``_image_bytes``'s
    kinds): the encoded batch, each image's name. An array is one image or a batch by its
    shape alone; one that could be either, or neither (channels first, two channels), is
    refused rather than guessed at."""
    import numpy as np
    if isinstance(value, np.ndarray):
        shape = tuple(value.shape)
        if value.dtype != np.uint8:
            raise DataError(f"images: an array of {value.dtype} {shape}; {ARRAY_SHAPES}")
        if not (value.ndim == 2 or value.ndim in (3, 4) and shape[-1] in (1, 3, 4)):
            raise DataError(f"images: a uint8 array of shape {shape}; {ARRAY_SHAPES} (a "
                            "channels-first or a two-channel array is not guessed at; give a "
                            "list for several grey images)")
    one = isinstance(value, (bytes, bytearray, memoryview, str, os.PathLike)) or (
        isinstance(value, np.ndarray) and value.ndim in (2, 3)) or (
        type(value).__module__.startswith("PIL."))
    items = [value] if one else list(value) if isinstance(
        value, (list, tuple, np.ndarray)) else None
    if items is None:
        raise DataError(f"images: a {type(value).__name__}; give an image (a path, its bytes, a "
                        "PIL image, uint8 pixels) or a list of them")
    if not items:
        raise DataError("images: an empty list; give at least one image")
    encoded = [_image_bytes(i, item) for i, item in enumerate(items)]
    return [e for e, _ in encoded], [n for _, n in encoded]


def _integers(name: str, value, dtype, limits: dict):
    """An integer input (token ids) checked before any cast: a cast would wrap 2**32 + 5 to 5
    and cut 5.9 to 5, and the model would answer for ids nobody gave. One ``DataError`` line
    for a value outside the signature's dtype, a non-integral number, an id outside
    ``[0, vocab_size)`` or a segment over ``max_segment`` (the served model's limits)."""
    import numpy as np
    try:
        array = np.asarray(value)
    except ValueError as e:  # ragged lists
        raise DataError(f"{name}: not a rectangular array of ids ({e})") from None
    if array.dtype == object or array.dtype.kind not in "iuf":
        raise DataError(f"{name}: {array.dtype} values; give integer ids")
    if array.dtype.kind == "f":
        bad = ~np.isfinite(array) | (array != np.round(array))
        if bad.any():
            raise DataError(f"{name}: {array[bad].flat[0].item()!r} is not an integer id")
    if array.size:
        low, high = np.min(array), np.max(array)
        top, why = _bound(name, dtype, limits)
        for v in (low, high):
            if not 0 <= v <= top:
                what = "a length of" if name == "memory_length" else "id"
                raise DataError(f"{name}: {what} {int(v) if v == int(v) else v} is outside "
                                f"[0, {top}] ({why})")
    longest = limits.get("max_segment")
    if longest and array.ndim == 2 and array.shape[1] > int(longest):
        raise DataError(f"{name}: a segment of {array.shape[1]} positions; this model takes at "
                        f"most {longest} a call (max_segment, as its server): give a longer "
                        "text in segments, each with the new_mems of the one before")
    return array.astype(dtype.as_numpy_dtype)


def _bound(name: str, dtype, limits: dict) -> tuple[int, str]:
    """The largest value an integer input may take, and why: a token id the vocabulary's last,
    a memory's length the served memory's (``mem_len``: a longer one would let queries see more
    than ``same_length`` allows), anything else its dtype's largest."""
    if name == "memory_length" and limits.get("mem_len") is not None:
        return int(limits["mem_len"]), f"mem_len {limits['mem_len']}"
    if name != "memory_length" and limits.get("vocab_size"):
        return int(limits["vocab_size"]) - 1, f"vocab_size {limits['vocab_size']}"
    import numpy as np
    return int(np.iinfo(dtype.as_numpy_dtype).max), dtype.name


def _shape_checked(name: str, array, spec):
    """An input's rank and fixed sizes against the signature's, and no empty batch."""
    want = spec.shape
    if want.rank is not None and (array.ndim != want.rank or any(
            w is not None and w != g for w, g in zip(want.as_list(), array.shape))):
        shape = ", ".join("any" if w is None else str(w) for w in want.as_list())
        raise DataError(f"{name}: shape {tuple(array.shape)}; the signature takes ({shape})")
    if array.ndim and array.shape[0] == 0:
        raise DataError(f"{name}: an empty batch")
    return array


def _first_line(error) -> str:
    """What a signature's ``InvalidArgumentError`` says, in one line: an assertion's own
    message without its data (the ids it printed), else TensorFlow's cause (``one_line``)."""
    text = str(getattr(error, "message", error))
    found = re.search(r"assertion failed: \[([^\]]*)\]", text)
    return found.group(1) if found else one_line(text)


def _call(signatures, name: str, inputs: dict, limits: dict, mask: bool = False) -> dict:
    import numpy as np
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
    names, tensors = None, {}
    for k, v in inputs.items():
        spec = specs[k]
        if spec.dtype == tf.string:
            encoded, names = _images(v) if k == "images" else (v, None)
            tensors[k] = tf.constant(encoded, tf.string)
            continue
        if spec.dtype.is_integer:
            array = _integers(k, v, spec.dtype, limits)
        else:
            try:
                array = np.asarray(v, spec.dtype.as_numpy_dtype)
            except (TypeError, ValueError) as e:
                raise DataError(f"{k}: not an array of {spec.dtype.name} ({e})") from None
        tensors[k] = tf.constant(_shape_checked(k, array, spec))
    if "targets" in tensors and "tokens" in tensors and (
            tensors["targets"].shape != tensors["tokens"].shape):
        raise DataError(f"targets: shape {tuple(tensors['targets'].shape)}, tokens "
                        f"{tuple(tensors['tokens'].shape)}: a target for each token")
    _rows_agree(tensors, limits)
    try:
        out = _arrays(fn(**tensors))
    except tf.errors.InvalidArgumentError as e:
        raise DataError(f"{name}: {_first_line(e)}") from None
    if "valid" in out and names and not mask and not out["valid"].all():
        bad = [names[i] for i in np.flatnonzero(~out["valid"])]
        raise DataError(f"{', '.join(bad[:3])}{f' and {len(bad) - 3} more' if len(bad) > 3 else ''}"
                        f": not an image this model decodes (predict(..., mask=True) answers "
                        "the others, these with valid False)")
    return out


def _rows_agree(tensors: dict, limits: dict) -> None:
    """A segment of tokens (none empty: the server refuses one too) and, row for row, the
    memory and its length that go with it: rows that differ reached TensorFlow's concat and
    reshape errors."""
    tokens = tensors.get("tokens")
    if tokens is None or tokens.shape.rank != 2:
        return
    if tokens.shape[1] == 0:
        raise DataError("tokens: an empty segment; a segment holds at least one token")
    state = limits.get("state") or {}
    axes = {state.get("input"): state.get("batch_axis"), "memory": 0, "memory_length": 0}
    for name, axis in axes.items():
        held = tensors.get(name)
        if held is not None and axis is not None and held.shape[axis] != tokens.shape[0]:
            raise DataError(f"{name}: {held.shape[axis]} row(s) (axis {axis} of shape "
                            f"{tuple(held.shape)}), tokens {tokens.shape[0]}: one for each row "
                            "of tokens")


class Sequence:
    """One text's sequence, as the served sequence model keeps it: each ``send`` runs one
    segment from the memory the previous ones left (none at first: the server's start), and
    keeps the new one. What ``serving.text_client`` gets from the server, in Python."""

    def __init__(self, model, start=None):
        self._model = model
        self.state = model._start_state(start)

    def send(self, tokens, targets=None, end=False) -> dict:
        """The segment's outputs for its one row (``nll`` with ``targets``: the ``score``
        signature; else the next word's ``log_probs``). ``end`` changes nothing: the memory
        goes with this object (the server's sequences take the flag)."""
        state_in, state_out = self._model._state_names()
        tokens = _ids_list("tokens", tokens)
        if not tokens:
            raise DataError("tokens: an empty segment; a segment holds at least one token (the "
                            "server refuses an empty one too)")
        inputs = {"tokens": [tokens], state_in: self.state}
        if targets is not None:
            inputs["targets"] = [_ids_list("targets", targets)]
        out = self._model.predict("score" if targets is not None else "serving_default",
                                  **inputs)
        self.state = out.pop(state_out)
        return {k: v[0] for k, v in out.items()}


def _ids_list(name: str, ids) -> list:
    """One segment's ids as a list (what ``_integers`` then checks), or one line."""
    if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
        raise DataError(f"{name}: a {type(ids).__name__}; give a segment's ids, a list of ints")
    return list(ids)


def _count(name: str, value, least: int) -> int:
    """An int of at least ``least`` (a bool, 2.5 or "3" is none), or one line."""
    import numbers
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        raise DataError(f"{name}: {value!r}; give a whole number of at least {least}")
    return int(value)


class _Text:
    """What a model of token ids with a vocabulary and a state carried between calls
    (Transformer-XL) answers from text: ``score`` (a text's perplexity), ``generate`` (a
    prompt's continuation) and ``sequence`` (segments sent one at a time, the memory kept here,
    as the server keeps it), by ``serving.text``, the text client's own code. Models without
    them refuse in one line."""

    def _described(self) -> dict:
        """What ``client.json`` says of the model (its signatures, ``state``, limits)."""
        raise NotImplementedError

    def _words(self) -> list[str] | None:
        """The vocabulary, where the model has one."""
        raise NotImplementedError

    def _state_names(self) -> tuple[str, str]:
        state = self._described().get("state") or {}
        return state.get("input"), state.get("output")

    def _vocab(self) -> list[str]:
        vocab = self._words()
        if not vocab or "score" not in self.signatures:
            raise DataError(f"{self!r} is not a model of text: score, generate and sequence "
                            "are Transformer-XL's")
        return vocab

    def _start_state(self, start=None):
        """The state a sequence starts from: none (``start`` None: the server's start), else
        zeros of ``start`` positions (evaluation's: its memory length)."""
        import numpy as np
        if start is not None:
            start = _count("start", start, 0)
        info = self._described()
        self._vocab()  # a model of text, or one line
        state_in, _ = self._state_names()
        axis = info["state"]["batch_axis"]
        shape = list(info["signatures"]["score"]["inputs"][state_in]["shape"])
        free = [a for a, d in enumerate(shape) if d is None or d < 0]
        for a in free:
            shape[a] = 1 if a == axis else (start or 0)
        return np.zeros(shape, np.float32)

    def encode(self, text: str, lines: bool = True) -> list[int]:
        """Token ids of ``text`` as the corpus was prepared (``serving.text.encode``): with
        ``lines``, each line's words then ``<eos>``; a word the vocabulary lacks is ``<unk>``
        (a ``DataError`` where it has none)."""
        from serving import text as texts
        if not isinstance(text, str):
            raise DataError(f"text: a {type(text).__name__}; give a str")
        with _text_errors():
            return texts.encode(text, self._vocab(), lines)

    def sequence(self, start=None) -> Sequence:
        return Sequence(self, start)

    def score(self, text: str, segment: int | None = None, protocol: str = "evaluation"
              ) -> dict:
        """``text``'s perplexity (lines of words, each line ending in ``<eos>``; the first
        token is context only): ``{"tokens", "nll", "perplexity", "perplexity_per_segment",
        "segments"}`` (``serving.text.score``). ``protocol="evaluation"`` is ``main.py --mode
        evaluate``'s on a split of one stream (``--eval_batch_size 1``): segments of
        ``eval_tgt_len``, the memory starting as zeros of the served memory's length;
        ``"served"`` is ``serving.text_client score``'s: segments of 64 tokens, or the
        model's ``max_segment`` where it takes fewer (``segment`` either way), the memory
        starting empty. ``perplexity`` weighs every token alike (evaluation's
        ``ppl_token_weighted``), ``perplexity_per_segment`` every segment alike (evaluation's
        headline figure, NVIDIA's); ``segments`` are each segment's mean NLL."""
        from serving import text as texts
        info = self._described()
        if protocol not in ("evaluation", "served"):
            raise DataError(f"protocol {protocol!r}: give 'evaluation' or 'served'")
        if segment is not None:
            segment = _count("segment", segment, 1)
        ids = self.encode(text)
        evaluation = protocol == "evaluation"
        longest = int(info.get("max_segment") or texts.SEGMENT)
        segment = segment or (info.get("eval_tgt_len") if evaluation else
                              min(texts.SEGMENT, longest)) or texts.SEGMENT
        with _text_errors():
            return texts.score(self.sequence(info.get("mem_len") if evaluation else None),
                               ids, segment)

    def generate(self, prompt: str, words: int = 20, sample: bool = False, seed: int = 0
                 ) -> str:
        """The ``words`` words after ``prompt`` (greedy, or sampled with ``seed``), as
        ``serving.text_client continue`` gets them from the server: the prompt in segments of
        at most ``max_segment`` tokens, then one word at a time."""
        from serving import text as texts
        words = _count("words", words, 0)
        vocab = self._vocab()
        ids = self.encode(prompt, lines=False)
        with _text_errors():
            out = texts.continue_ids(self.sequence(), ids, words, sample, seed,
                                     self._described().get("max_segment"))
        return " ".join(vocab[i] for i in out)


@contextlib.contextmanager
def _text_errors():
    """``serving.text``'s refusals (its package's ``CommandError``) as this API's: a
    ``DataError`` line."""
    from serving.connection import CommandError
    try:
        yield
    except CommandError as e:
        raise DataError(str(e)) from None


class Checkpoint(_Text):
    """A checkpoint's model, restored, with what travels with it: ``settings`` (its
    ``settings.json``), ``recipe`` (the image models' evaluation preprocessing), ``card`` (the
    model card its export would carry), ``task`` and ``model`` (the Keras model), ``messages``
    (what main.py would have printed as it loaded the checkpoint)."""

    def __init__(self, path: str, **flags):
        from common import export, models, runner
        from common.checkpoint import settings as checkpoint_settings
        directory = checkpoint_settings.directory_of(path)
        record = checkpoint_settings.read(path) if os.path.isdir(directory) else None
        # A checkpoint's prefix (DIR/ckpt-N) loads that step; a directory its newest readable.
        prefix = path if not os.path.isdir(path) and os.path.exists(f"{path}.index") else None
        if not record or record.get("model") not in models.MODELS:
            raise DataError(f"{path} holds no checkpoint of this repository (no settings.json "
                            "naming one of its models): give a --model_dir a run wrote, or an "
                            "import_weights.py output")
        if not prefix and not os.path.isdir(path):  # DIR/ckpt-N with no such step
            steps = sorted(f[:-len(".index")] for f in os.listdir(directory)
                           if f.startswith("ckpt-") and f.endswith(".index"))
            raise DataError(f"{path}: no such checkpoint in {directory} (it holds "
                            f"{', '.join(steps) or 'none'})")
        self.settings = record
        # main.py --mode evaluate --model_dir PATH with ``flags`` over the recorded settings,
        # built from values; its lines (what main.py prints as it loads) go to ``messages``.
        said = io.StringIO()
        with runner.process_state_restored():
            settled = runner.settle(models.task_class(record["model"]), {
                "mode": "evaluate", "model_dir": directory if prefix else path, **flags})
            self._trainer = runner.build(settled, messages=said)
            self._trainer.restore(required=True, prefix=prefix)
        self.messages = said.getvalue().splitlines()
        for line in self.messages:  # an older checkpoint than the newest: the caller is told
            if line.startswith("skipped "):
                warnings.warn(f"{path}: {line}", stacklevel=3)
        self.task, self.model = self._trainer.task, self._trainer.model
        self.exports = self._trainer.exports
        # The model as its export holds it (traced once: export() saves these functions).
        self.module = export.build(self.exports, self.model)
        self._signatures = self.module.signatures
        # What evaluation scored at this checkpoint's step: the card's, and its exports'.
        self._scored = checkpoint_settings.scores_at(self.task.flags.model_dir,
                                                     self._trainer.step)
        self.card = export.model_card(self.module, self._scored)
        self.recipe = self.card["evaluation_preprocessing"]
        # What its export's client.json would say (signatures, vocab_size, max_segment...).
        self._limits = self.module.described

    def _described(self) -> dict:
        return self._limits

    def _words(self) -> list[str] | None:
        return getattr(self.task, "vocab", None)

    def __repr__(self) -> str:
        return f"Checkpoint({json.dumps(self.settings.get('model'))}, {self.signatures})"

    @property
    def signatures(self) -> list[str]:
        return list(self._signatures)

    def predict(self, signature: str = "serving_default", mask: bool = False, **inputs) -> dict:
        """The signature's named outputs (numpy) for ``inputs`` by name (``_call``)."""
        return _call(self._signatures, signature, inputs, self._limits, mask)

    def export(self, export_dir: str, onnx: bool = False, triton: str | None = None) -> str:
        """What ``main.py --export_dir`` (``--export_onnx``, ``--export_triton``) writes, for this
        checkpoint; returns ``export_dir``."""
        from common import export
        from common.errors import UsageError
        from common.flags import check_export_places
        try:
            check_export_places(export_dir, triton, self.task.flags.model_dir,
                                ("export_dir", "triton", "directory"))
        except UsageError as e:
            raise DataError(str(e)) from None
        try:
            export.export(self.module, export_dir, export.writes_onnx(self.module.spec, onnx,
                                                                      triton=triton),
                          print, triton_dir=triton, scored=self._scored)
        except OSError as e:  # a path through a file, a read-only parent
            raise DataError(f"{e.filename or export_dir}: cannot write the export there "
                            f"({e.strerror or e})") from None
        return export_dir


class Export(_Text):
    """An export (``--export_dir``): the SavedModel's signatures, ``info`` (its
    ``client.json``), ``card`` (its model card) and ``labels`` (class names, where it has
    them)."""

    def __init__(self, path: str):
        import tensorflow as tf

        from common import export
        try:
            self.info = export.read_client_info(path)
        except (OSError, ValueError) as e:
            raise DataError(f"{path} has no readable assets/client.json ({e}): give what "
                            "--export_dir wrote") from None
        if not isinstance(self.info, dict) or not isinstance(self.info.get("signatures"), dict):
            raise DataError(f"{os.path.join(path, 'assets', 'client.json')} is not an export's "
                            "client.json (no signatures): give what --export_dir wrote")
        self.card = self.info.get("model_card")
        labels = os.path.join(path, "assets", str(self.info.get("labels") or "-"))
        try:
            self.labels = None
            if os.path.isfile(labels):
                with open(labels, encoding="utf-8") as f:
                    self.labels = f.read().splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise DataError(f"{labels} is not the export's class names ({e})") from None
        try:
            self._loaded = tf.saved_model.load(path)
        except Exception as e:  # noqa: BLE001  a damaged file raises TensorFlow's and Python's
            cause = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise DataError(f"{path}: the SavedModel does not load ({type(e).__name__}: "
                            f"{cause}): its files are damaged or incomplete; export it again"
                            ) from None
        self._signatures = dict(self._loaded.signatures)
        self._path = path

    def _described(self) -> dict:
        return self.info

    @functools.cached_property
    def _vocabulary(self) -> list[str] | None:
        """The export's words, checked against what ``client.json`` recorded of them (their
        SHA-256 and count): a vocabulary shuffled or replaced since would score and decode
        through other words without a sign."""
        vocab = os.path.join(self._path, "assets", str(self.info.get("vocab") or "-"))
        if not os.path.isfile(vocab):
            return None
        try:
            with open(vocab, "rb") as f:
                data = f.read()
            words = data.decode("utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise DataError(f"{vocab} is not the export's vocabulary ({e})") from None
        recorded, size = self.info.get("vocab_sha256"), self.info.get("vocab_size")
        if (recorded and hashlib.sha256(data).hexdigest() != recorded) or (
                size and int(size) != len(words)):
            raise DataError(f"{vocab} ({len(words):,} words) is not the vocabulary this export "
                            "was written with (client.json's vocab_sha256 and vocab_size): put "
                            "its own vocab.txt back, or export again")
        return words

    def _words(self) -> list[str] | None:
        return self._vocabulary

    @property
    def signatures(self) -> list[str]:
        return list(self._signatures)

    def predict(self, signature: str = "serving_default", mask: bool = False, **inputs) -> dict:
        """The signature's named outputs (numpy) for ``inputs`` by name (``_call``)."""
        return _call(self._signatures, signature, inputs, self.info, mask)

    def __repr__(self) -> str:
        return f"Export({json.dumps(self.info.get('model'))}, {self.signatures})"
