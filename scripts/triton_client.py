#!/usr/bin/env python3
"""Send images to a Triton Inference Server serving an export of this repository
(``--export_triton``) and print what the model found: ResNet-50's top-5 classes, SSD320's
detections.

    python scripts/triton_client.py --model resnet50_savedmodel --url localhost:8001 \
        --protocol grpc --labels export/assets/labels.txt cat.jpg dog.png

It reads the model's inputs and outputs from the server (its config), so the same client
serves ``<name>_savedmodel`` (encoded images sent as they are), ``<name>_onnx`` and
``<name>_tensorrt`` (images prepared here as ``client.json`` says: the evaluation's resize and
normalisation, ``--client_json``). Needs only ``tritonclient[all]``, numpy and Pillow: Triton's
SDK container (``nvcr.io/nvidia/tritonserver:<yy.mm>-py3-sdk``) has them. One line a file,
``--json`` for the outputs as JSON lines.
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np


def _client(url: str, protocol: str):
    if protocol == "grpc":
        import tritonclient.grpc as client
    else:
        import tritonclient.http as client
    return client, client.InferenceServerClient(url)


def _config(server, model: str, protocol: str) -> dict:
    config = server.get_model_config(model, as_json=True) if protocol == "grpc" else \
        server.get_model_config(model)
    return config.get("config", config)


def prepare(path: str, info: dict) -> np.ndarray:
    """The float32 (size, size, 3) input of ``path`` as ``client.json`` describes the model's
    evaluation: ResNet-50's shorter side to ``resize_shorter_side`` and central crop, SSD's
    resize without aspect; then (pixel - mean) / std on the 0..255 scale."""
    from PIL import Image
    image = Image.open(path).convert("RGB")
    h, w = info["input_size"]
    if "resize_shorter_side" in info:
        s = info["resize_shorter_side"] / min(image.size)
        size = (round(image.width * s), round(image.height * s))
        image = image.resize(size, Image.BILINEAR, reducing_gap=None)
        left, top = (size[0] - w + 1) // 2, (size[1] - h + 1) // 2
        image = image.crop((left, top, left + w, top + h))
    else:
        image = image.resize((w, h), Image.BILINEAR)
    x = np.asarray(image, np.float32)
    return (x - np.asarray(info["mean"], np.float32)) / np.asarray(info["std"], np.float32)


def request(client, config: dict, paths: list[str], info: dict | None):
    """The request's inputs: the files' bytes for a model that takes encoded images, else the
    prepared float batch."""
    (inp,) = config["input"]
    name, dtype = inp["name"], inp["data_type"].removeprefix("TYPE_")
    if dtype == "STRING":
        data = np.array([[open(p, "rb").read()] for p in paths], dtype=object)
        dtype = "BYTES"
    else:
        if info is None:
            raise SystemExit(f"triton_client.py: error: {config['name']} takes prepared images: "
                             "give --client_json (the export's assets/client.json)")
        data = np.stack([prepare(p, info) for p in paths])
    tensor = client.InferInput(name, list(data.shape), dtype)
    tensor.set_data_from_numpy(data)
    return [tensor]


def describe(path: str, out: dict, labels: list[str] | None, k: int, threshold: float) -> str:
    """One line for one image: the top ``k`` classes, or the detections above ``threshold``."""
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", help="images (JPEG, PNG, BMP, GIF)")
    p.add_argument("--model", required=True, help="the model's name in the repository")
    p.add_argument("--url", default="localhost:8000", help="the server (HTTP 8000, gRPC 8001)")
    p.add_argument("--protocol", choices=("http", "grpc"), default="http")
    p.add_argument("--client_json", help="the export's assets/client.json (models that take "
                   "prepared images: *_onnx, *_tensorrt)")
    p.add_argument("--labels", help="labels.txt (ResNet-50) or label_map.json (SSD320) from "
                   "the export's assets/")
    p.add_argument("--batch_size", type=int, default=8, help="images a request")
    p.add_argument("--top_k", type=int, default=5)
    p.add_argument("--score_threshold", type=float, default=0.3)
    p.add_argument("--json", action="store_true", help="each image's outputs as a JSON line")
    args = p.parse_args(argv)

    info = json.load(open(args.client_json)) if args.client_json else None
    labels = None
    if args.labels:
        with open(args.labels, encoding="utf-8") as fh:
            labels = json.load(fh) if args.labels.endswith(".json") else \
                [ln.strip() for ln in fh if ln.strip()]
    client, server = _client(args.url, args.protocol)
    try:
        config = _config(server, args.model, args.protocol)
    except Exception as e:  # tritonclient raises its own exception types per protocol
        print(f"triton_client.py: error: {args.model} at {args.url}: {e}", file=sys.stderr)
        return 1
    names = [o["name"] for o in config["output"]]
    for start in range(0, len(args.files), args.batch_size):
        paths = args.files[start:start + args.batch_size]
        result = server.infer(args.model, request(client, config, paths, info),
                              outputs=[client.InferRequestedOutput(n) for n in names])
        outputs = {n: result.as_numpy(n) for n in names}
        for row, path in enumerate(paths):
            out = {n: v[row] for n, v in outputs.items()}
            if args.json:
                print(json.dumps({"file": path, **{n: np.asarray(v).tolist()
                                                   for n, v in out.items()}}))
            else:
                print(describe(path, out, labels, args.top_k, args.score_threshold))
    return 0


if __name__ == "__main__":
    sys.exit(main())
