"""Send images to a Triton Inference Server serving an export of this repository
(``--export_triton``) and print what the model found: ResNet-50's top-5 classes, SSD320's
detections.

    python -m serving.image_client --model resnet50 --url localhost:8001 --protocol grpc \
        cat.jpg dog.png

It reads the model's inputs and outputs from the server (its config), so the same client serves
the models that take encoded images, sent as they are (the ensembles ``<name>``, which prepare
them on the server, and ``<name>_savedmodel``), and the networks alone, ``<name>_onnx``,
``<name>_python`` and ``<name>_tensorrt``, which take the prepared float batch. Those images
are prepared by the export's own preprocessing, the function its ``serving_default`` runs
(decode, resize, crop, normalise, with the recipe of the weights: NVIDIA's, torchvision's,
timm's, keras.applications' or keras-hub's), to the last bit: by the server's
``<name>_preprocess`` (the default), or here with ``--client_json`` (the export's
``assets/client.json``; its ``preprocess/`` SavedModel run by TensorFlow). Class names come
from the server where the model has them (Triton's classification extension), else from
``--labels``. Needs ``tritonclient[all]`` and numpy (Triton's SDK container,
``nvcr.io/nvidia/tritonserver:<yy.mm>-py3-sdk``, has them), TensorFlow only for
``--client_json``. One line a file, ``--json`` for the outputs as JSON lines. A file that
cannot be read, or that the model could not decode (its ``valid`` output, or the server's
error for that file alone), gets its own "skipped" line on stderr and the others their
answers; the exit status is 1 only when no file was answered, 2 for an error in the command
(one line).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from serving.connection import (
    CommandError,
    connect,
    error_line,
    infer_input,
    model_config,
    positive,
)

PROG = "image_client.py"


NETWORK_SUFFIXES = ("_tensorrt_int8", "_tensorrt", "_onnx", "_python")


def local_preparer(client_json: str, info: dict):
    """The export's preprocessing (``preprocess/`` beside ``assets/``), run here by
    TensorFlow: encoded images -> (float batch, valid)."""
    export = os.path.dirname(os.path.dirname(os.path.abspath(client_json)))
    path = os.path.join(export, info.get("preprocess") or "-")
    if not info.get("preprocess") or not os.path.isdir(path):
        raise CommandError(f"--client_json {client_json}: its export has no preprocess/ "
                           "SavedModel (exported before it was written, or not an image model's "
                           "export): export again, or leave out --client_json and the server's "
                           "<name>_preprocess prepares the images")
    try:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf
    except ImportError:
        raise CommandError("--client_json prepares images with the export's own preprocessing, "
                           "which needs TensorFlow here (pip install tensorflow-cpu); or leave "
                           "out --client_json and the server's <name>_preprocess prepares them"
                           ) from None
    fn = tf.saved_model.load(path).signatures["serving_default"]

    def prepare(encoded: list[bytes]):
        out = fn(images=tf.constant(encoded, tf.string))
        return out["images"].numpy(), out["valid"].numpy()
    return prepare


def server_preparer(client, server, model: str):
    """The server's ``model`` (``<name>_preprocess``): encoded images -> (float batch, valid),
    the same function the ensembles run."""
    def prepare(encoded: list[bytes]):
        data = np.array([[x] for x in encoded], dtype=object)
        result = server.infer(model, [infer_input(client, "images", data, "BYTES")])
        return result.as_numpy("images"), result.as_numpy("valid").reshape(-1)
    return prepare


def preprocess_model_of(model: str) -> str:
    """``<name>_preprocess`` of a network ``<name>_onnx`` (``_python``, ``_tensorrt``,
    ``_tensorrt_int8``)."""
    for suffix in NETWORK_SUFFIXES:
        if model.endswith(suffix):
            return model.removesuffix(suffix) + "_preprocess"
    return model + "_preprocess"


def takes_encoded(config: dict) -> bool:
    (inp,) = config["input"]
    return inp["data_type"].removeprefix("TYPE_") == "STRING"


def read_input(path: str) -> bytes:
    """One file's bytes; a file that cannot be read raises ``CommandError`` with its reason."""
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as e:
        raise CommandError(f"{path}: {e.strerror or e}") from None


def request(client, config: dict, data: np.ndarray):
    """The request's input: the files' bytes for a model that takes encoded images, else the
    prepared float batch."""
    (inp,) = config["input"]
    dtype = "BYTES" if takes_encoded(config) else inp["data_type"].removeprefix("TYPE_")
    return [infer_input(client, inp["name"], data, dtype)]


def describe(path: str, out: dict, labels: list[str] | None, k: int, threshold: float) -> str:
    """One line for one image: the top ``k`` classes, or the detections above ``threshold``."""
    if "probabilities" in out and out["probabilities"].dtype == object:
        # Triton's classification extension: "score:index:label", the top k, best first.
        top = [v.decode() if isinstance(v, bytes) else str(v) for v in out["probabilities"]]
        return f"{path}: " + ", ".join(
            f"{t.split(':', 2)[2] or 'class ' + t.split(':')[1]} {float(t.split(':')[0]):.3f}"
            for t in top)
    if "probabilities" in out:
        probs = out["probabilities"].reshape(-1)
        top = np.argsort(-probs)[:k]
        return f"{path}: " + ", ".join(
            f"{labels[c] if labels else f'class {c}'} {probs[c]:.3f}" for c in top)
    n = int(np.asarray(out["num_detections"]).reshape(-1)[0])
    found = [(int(c), float(s), b) for c, s, b in zip(out["detection_classes"][:n],
                                                       out["detection_scores"][:n],
                                                       out["detection_boxes"][:n])
             if s >= threshold]
    names = {c["id"]: c["name"] for c in (labels or {}).get("categories", [])} \
        if isinstance(labels, dict) else {}
    return (f"{path}: {len(found)} detection(s) above {threshold}" + (": " if found else "")
            + ", ".join(f"{names.get(c, c)} {s:.2f} [" + ", ".join(f"{v:.3f}" for v in b) + "]"
                        for c, s, b in found))


def _read_json(path: str, flag: str):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except OSError as e:
        raise CommandError(f"{flag} {path}: {e.strerror}") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise CommandError(f"{flag} {path} is not JSON ({str(e).splitlines()[0]})") from None


def _read_labels(path: str):
    if path.endswith(".json"):
        found = _read_json(path, "--labels")
        if not isinstance(found, dict) or not isinstance(found.get("categories"), list):
            raise CommandError(f"--labels {path}: not a label map (no \"categories\" list: the "
                               "export's assets/label_map.json)")
        return found
    try:
        with open(path, encoding="utf-8") as fh:
            names = [ln.strip() for ln in fh if ln.strip()]
    except OSError as e:
        raise CommandError(f"--labels {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise CommandError(f"--labels {path} is not text (the export's assets/labels.txt)"
                           ) from None
    return names


def run(args) -> int:
    info = _read_json(args.client_json, "--client_json") if args.client_json else None
    if info is not None and not isinstance(info, dict):
        raise CommandError(f"--client_json {args.client_json}: not an export's client.json")
    labels = _read_labels(args.labels) if args.labels else None
    client, server = connect(args.url, args.protocol, "serving.image_client")
    if args.wait:
        _wait_ready(server, args)
    try:
        config = model_config(server, args.model, args.protocol)
    except Exception as e:  # tritonclient raises its own types per protocol (and OSErrors)
        raise CommandError(f"{args.model} at {args.url}: {error_line(e)}") from None
    if "sequence_batching" in config:
        raise CommandError(f"{args.model} is a sequence model of token ids (Transformer-XL), "
                           "not an image model: score or continue a text with "
                           "python -m serving.text_client")
    if len(config["input"]) != 1:
        raise CommandError(f"{args.model} takes {len(config['input'])} inputs ("
                           f"{', '.join(sorted(i['name'] for i in config['input']))}); this "
                           "client sends images to a model of one input")
    args.prepare = None
    if not takes_encoded(config):
        if info is not None:
            args.prepare = local_preparer(args.client_json, info)
        else:
            pre = args.preprocess_model or preprocess_model_of(args.model)
            try:
                ready = server.is_model_ready(pre)
            except Exception:  # tritonclient's errors for a model the server does not know
                ready = False
            if not ready:
                raise CommandError(f"{args.model} takes prepared images and {pre} is not ready "
                                   f"at {args.url}: serve it beside {args.model} (the "
                                   "repository has it), name it with --preprocess_model, or "
                                   "give --client_json (the export's assets/client.json) to "
                                   "prepare them here")
            args.prepare = server_preparer(client, server, pre)
    names = [o["name"] for o in config["output"]]
    check_model(args, config, labels)
    # Names from the server where the model has them (label_filename): Triton's
    # classification extension answers the top k of ``probabilities`` as "score:index:label".
    args.classify = not args.json and not labels and any(
        o["name"] == "probabilities" and o.get("label_filename") for o in config["output"])
    answered = failed = 0
    ready = []  # (path, bytes) of the files read, sent --batch_size at a time
    for n, path in enumerate(args.files):
        try:
            ready.append((path, read_input(path)))
        except CommandError as e:
            print(f"skipped {e}", file=sys.stderr)
            failed += 1
        if len(ready) == args.batch_size or (n == len(args.files) - 1 and ready):
            a, f = _send(client, server, args, config, names, ready, labels)
            answered, failed, ready = answered + a, failed + f, []
    if failed:
        print(f"{PROG}: {failed} of {len(args.files)} file(s) not answered", file=sys.stderr)
    return 0 if answered else 1


def check_model(args, config: dict, labels) -> None:
    """What the model's outputs and ``--labels`` must agree on, one line each: a classifier's
    class names (as many as its classes), a detector's label map, and a model whose outputs
    this client can describe (``--json`` prints any)."""
    outputs = {o["name"]: o for o in config["output"]}
    if "probabilities" in outputs:
        if isinstance(labels, dict):
            raise CommandError(f"--labels {args.labels} is a label map (a detector's); "
                               f"{args.model} is a classifier: give its labels.txt")
        dims = [int(d) for d in outputs["probabilities"].get("dims", [])]
        classes = dims[-1] if dims else None
        if labels is not None and classes and classes > 0 and len(labels) != classes:
            raise CommandError(f"--labels {args.labels} names {len(labels)} classes; "
                               f"{args.model} has {classes}")
    elif "num_detections" in outputs:
        if labels is not None and not isinstance(labels, dict):
            raise CommandError(f"--labels {args.labels} is a list of names; {args.model} is a "
                               "detector: give its label_map.json")
    elif not args.json:
        raise CommandError(f"{args.model} is neither a classifier nor a detector (its outputs: "
                           f"{', '.join(sorted(outputs))}): send the images to the model "
                           "itself (<name>, or <name>_python), or print them with --json")


def _wait_ready(server, args) -> None:
    """Until the model is ready, for at most ``--wait`` seconds (a server just started loads its
    models before it answers)."""
    import time
    deadline = time.monotonic() + args.wait
    while True:
        try:
            if server.is_model_ready(args.model):
                return
        except Exception:  # not listening yet: tritonclient's and the socket's errors
            pass
        if time.monotonic() >= deadline:
            raise CommandError(f"{args.model} at {args.url} was not ready within --wait "
                               f"{args.wait:g} s")
        time.sleep(0.5)


def _inputs(args, batch):
    """(the request's input array, which rows of ``batch`` it holds): the bytes as they are,
    or the prepared images of those the preprocessing could decode."""
    encoded = [x for _, x in batch]
    if args.prepare is None:
        return np.array([[x] for x in encoded], dtype=object), list(range(len(batch)))
    images, valid = args.prepare(encoded)
    kept = [row for row, ok in enumerate(np.asarray(valid).reshape(-1)) if ok]
    return images[kept], kept


def _send(client, server, args, config, names, batch, labels) -> tuple[int, int]:
    """One request for ``batch``; a request the server refuses is sent again one file at a
    time, so that one bad image costs only its own answer. (answered, failed)."""
    try:
        data, kept = _inputs(args, batch)
        result = server.infer(args.model, request(client, config, data),
                              outputs=[client.InferRequestedOutput(n, class_count=args.top_k)
                                       if args.classify and n == "probabilities" else
                                       client.InferRequestedOutput(n) for n in names]) \
            if kept else None
    except Exception as e:  # the server's error: InferenceServerException, socket errors
        if len(batch) > 1:
            counts = [_send(client, server, args, config, names, [item], labels)
                      for item in batch]
            return sum(c[0] for c in counts), sum(c[1] for c in counts)
        print(f"skipped {batch[0][0]}: the server answered: {error_line(e)}", file=sys.stderr)
        return 0, 1
    outputs = {n: result.as_numpy(n) for n in names} if result is not None else {}
    answered = failed = 0
    for row, (path, _) in enumerate(batch):
        out = {n: v[kept.index(row)] for n, v in outputs.items()} if row in kept else None
        if out is None or ("valid" in out and not bool(np.asarray(out["valid"]).reshape(-1)[0])):
            print(f"skipped {path}: the model could not decode it as an image",
                  file=sys.stderr)
            failed += 1
            continue
        answered += 1
        if args.json:
            print(json.dumps({"file": path, **{n: np.asarray(v).tolist()
                                               for n, v in out.items()}}), flush=True)
        else:
            print(describe(path, out, labels, args.top_k, args.score_threshold), flush=True)
    return answered, failed


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", help="images (JPEG, PNG, BMP, GIF)")
    p.add_argument("--model", required=True, help="the model's name in the repository")
    p.add_argument("--url", default="localhost:8000", help="the server, host:port (HTTP 8000, "
                   "gRPC 8001)")
    p.add_argument("--protocol", choices=("http", "grpc"), default="http")
    p.add_argument("--client_json", help="the export's assets/client.json: the networks alone "
                   "(*_onnx, *_python, *_tensorrt) get images prepared here by the export's "
                   "own preprocessing (needs TensorFlow)")
    p.add_argument("--preprocess_model", help="the networks alone without --client_json: the "
                   "served model that prepares their images (default: <name>_preprocess)")
    p.add_argument("--labels", help="labels.txt (ResNet-50) or label_map.json (SSD320) from "
                   "the export's assets/")
    p.add_argument("--batch_size", type=positive, default=8, help="images a request")
    p.add_argument("--top_k", type=positive, default=5)
    p.add_argument("--score_threshold", type=float, default=0.3)
    p.add_argument("--json", action="store_true", help="each image's outputs as a JSON line")
    p.add_argument("--wait", type=float, default=0, help="seconds to wait for the model to be "
                   "ready (a server just started loads its models first)")
    args = p.parse_args(argv)
    import math
    if not math.isfinite(args.wait) or args.wait < 0:
        p.error(f"argument --wait: seconds, 0 or more, not {args.wait}")
    if not 0 <= args.score_threshold <= 1:  # NaN too: it would keep no detection, saying nothing
        p.error(f"argument --score_threshold: a score from 0 to 1, not {args.score_threshold}")
    try:
        return run(args)
    except CommandError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
