"""The model card: what a reader of an export needs to trust its weights, written beside every
export (``README.md`` and ``model_card.json`` in the export's directory, the same dict as
``client.json``'s ``model_card``) and into every Triton repository (beside the model a client
calls).

The fields follow conventions users already read rather than a new one: the Hugging Face Hub's
card metadata, made and written by ``huggingface_hub`` (``ModelCardData``, ``EvalResult``: the
README's YAML front matter, which ``ModelCard.load`` reads back; ``license`` a Hub licence id,
``pipeline_tag``, ``tags``, ``datasets``, ``base_model``, ``model-index``), and keras-hub's
``metadata.json`` (``parameter_count``, ``keras_version``, ``date_saved``). What neither has a
field for is under ``weights`` (their source, name, file hash, terms and the source's published
accuracy: never a path of the machine that exported them), ``scored`` (what the weights scored
here, on which split, at which step, every number the evaluation computed), ``served_files``
(the SHA-256 of each file a server runs) and ``project`` (this repository's build).

No ``library_name``: the Hub's libraries load a model with their own code (``keras`` a
``.keras`` file, ``tf-keras`` a Keras 2 SavedModel), and none loads an export's SavedModel
(``tf.saved_model.load``) or its ONNX file; the formats are ``tags``.
"""
from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import json
import os
import platform

from tf_model_scripts.version import this_build

CARD_JSON = "model_card.json"
CARD_README = "README.md"
PROJECT = "tf-model-scripts"


def file_sha256(path: str) -> str:
    """The SHA-256 of a file; of a directory or a TensorFlow checkpoint prefix, that of its
    files' names and hashes in order (one identity for weights kept in several files)."""
    if os.path.isfile(path):
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()
    if os.path.isdir(path):
        members = sorted(os.path.relpath(os.path.join(d, n), path)
                         for d, _, names in os.walk(path) for n in names)
        base = path
    else:  # a checkpoint prefix: PREFIX.index, PREFIX.data-*
        base, stem = os.path.split(path)
        members = sorted(n for n in os.listdir(base or ".") if n.startswith(stem + "."))
    return _files_sha256(base, members)


def _files_sha256(base: str, members) -> str:
    """The SHA-256 of the ``members`` of ``base`` as one: of their hashes and names in order."""
    lines = "".join(f"{file_sha256(os.path.join(base, m))}  {m}\n" for m in sorted(members))
    return hashlib.sha256(lines.encode()).hexdigest()


def weights_sha256(variables) -> str:
    """The SHA-256 of the exported weights' values (float32, little-endian, in the model's
    variable order: ``model.variables``): the same for the same weights whatever file holds
    them, so that a reader can check that an export holds the weights its card names."""
    import numpy as np
    digest = hashlib.sha256()
    for v in variables:
        digest.update(np.ascontiguousarray(v.numpy(), dtype="<f4").tobytes())
    return digest.hexdigest()


def project() -> dict:
    """This repository's build (``tf_model_scripts.version``): its version, and its commit with
    whether tracked files differed from it (``modified``), from the git checkout the code runs
    from, else from what the wheel's build recorded."""
    build = this_build()
    out = {"name": PROJECT, "version": build["version"], "commit": build.get("commit")}
    if build.get("commit"):
        out["modified"] = bool(build.get("dirty"))
    else:
        out["commit_note"] = build.get("commit_note", "unknown")
    return out


def packages() -> dict:
    def version(package):
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return None
    return {"python": platform.python_version(), **{
        n: version(n) for n in ("tensorflow", "keras", "numpy", "tf2onnx", "onnx")}}


def build(*, model: str, pipeline_tag: str, data: dict, weights: dict, recipe: str | None,
          scored: dict | None, parameter_count: int, exported_weights_sha256: str,
          triton_model: str) -> dict:
    """The card's dict (module docstring). ``data`` is what the run read (``Exports.data_read``:
    the Hub's dataset id only when it is that set, and a description), ``weights`` what the
    checkpoint recorded of its source (``common/checkpoint/start.py``) with the licence given
    to trained weights; ``scored`` the evaluation of these weights, or None."""
    pkgs = packages()
    card = {"model_name": model, **hub_metadata(model, pipeline_tag, data, weights, scored),
            "data": data["description"]}
    card.update({
        "parameter_count": int(parameter_count), "keras_version": pkgs["keras"],
        "date_saved": datetime.datetime.now(datetime.UTC).strftime(
            "%Y-%m-%d@%H:%M:%S"),
        "weights": dict(weights), "exported_weights_sha256": exported_weights_sha256,
        "evaluation_preprocessing": recipe, "scored": scored, "triton_model": triton_model,
        "served_files": {}, "project": project(), "exported_with": pkgs})
    return card


def hub_metadata(model: str, pipeline_tag: str, data: dict, weights: dict,
                 scored: dict | None) -> dict:
    """The front matter's fields, as ``huggingface_hub.ModelCardData`` writes them: the Hub's
    licence id (``unknown`` for weights that have none: trained here without
    ``--weights_license``), the dataset trained on only when the Hub holds it, and one
    ``EvalResult`` for each metric the Hub has a type for (``HUB_METRICS``), none for a
    sentinel (pycocotools' -1)."""
    from huggingface_hub import EvalResult, ModelCardData
    licence = (weights.get("license") or "unknown").lower()
    results = []
    for key, value in (scored or {}).get("metrics", {}).items():
        if key not in HUB_METRICS or not isinstance(value, (int, float)) or _no_value(key, value):
            continue
        metric, name, args = HUB_METRICS[key]
        results.append(EvalResult(
            task_type=pipeline_tag, dataset_type=data.get("dataset") or "custom",
            dataset_name=data.get("dataset") or data["description"],
            dataset_split=scored["split"], metric_type=metric, metric_name=name,
            metric_value=value, metric_args=args))
    card = ModelCardData(
        model_name=model, pipeline_tag=pipeline_tag, tags=["tensorflow", "savedmodel"],
        license=licence if licence in HUB_LICENCES else "other",
        license_name=None if licence in HUB_LICENCES else weights["license"],
        datasets=[data["dataset"]] if data.get("dataset") else None,
        base_model=weights.get("hub_id"), eval_results=results or None)
    return {k: v for k, v in card.to_dict().items() if k != "model_name"}


# The metrics the evaluation logs (each model's LOG_NAMES) that the Hub's model-index can
# carry: (the Hub's metric type, the name it shows, its arguments). Accuracy and perplexity are
# hf.co/metrics ids; COCO's AP and AR have none there, so their type says what they are and
# the arguments how pycocotools computed them. The evaluation loss is not a result.
HUB_METRICS = {
    "top1_accuracy": ("accuracy", "Top-1 accuracy", None),
    "top5_accuracy": ("accuracy", "Top-5 accuracy", {"top_k": 5}),
    "eval_ppl": ("perplexity", "Perplexity", None),
    **{f"DetectionBoxes_Precision/mAP{suffix}": (
        "mean_average_precision", f"COCO box AP{label}", {"iou": iou, "area": area})
       for suffix, label, iou, area in (
           ("", "", "0.50:0.95", "all"), ("@.50IOU", "50", "0.50", "all"),
           ("@.75IOU", "75", "0.75", "all"), (" (small)", " small", "0.50:0.95", "small"),
           (" (medium)", " medium", "0.50:0.95", "medium"),
           (" (large)", " large", "0.50:0.95", "large"))},
    **{f"DetectionBoxes_Recall/AR@{n}": (
        "mean_average_recall", f"COCO box AR@{n}", {"iou": "0.50:0.95", "max_detections": n})
       for n in (1, 10, 100)},
    **{f"DetectionBoxes_Recall/AR@100 ({a})": (
        "mean_average_recall", f"COCO box AR {a}", {"iou": "0.50:0.95", "max_detections": 100,
                                                    "area": a})
       for a in ("small", "medium", "large")},
}


# The Hub's licence ids the weights' sources use (SPDX's, in lower case); any other licence is
# the Hub's "other" with its own name.
HUB_LICENCES = {"unknown", "apache-2.0", "mit", "bsd-2-clause", "bsd-3-clause", "cc-by-4.0",
                "cc-by-sa-4.0", "cc-by-nc-4.0", "cc-by-nc-sa-4.0", "cc0-1.0", "gpl-3.0",
                "lgpl-3.0", "bigscience-openrail-m", "openrail"}


def _no_value(name: str, value: float) -> bool:
    """pycocotools' -1 for an AP or AR (``APs``, ``ARl`` ... as logged): the split has no
    object of that size, a sentinel, not a score the model-index may publish."""
    return value == -1 and ("AP" in name or "AR" in name)


FRONT_MATTER = ("license", "license_name", "pipeline_tag", "tags", "datasets", "base_model",
                "model-index")


def markdown(card: dict) -> str:
    """``README.md``: the Hub's metadata as YAML front matter (``huggingface_hub``'s), then the
    card in prose."""
    from huggingface_hub import ModelCardData
    front = ModelCardData(**{k: card[k] for k in FRONT_MATTER if k in card})
    w, s, p = card["weights"], card["scored"], card["project"]
    lines = ["---", front.to_yaml(), "---", "", f"# {card['model_name']}", ""]
    if w.get("source") == "trained":
        lines.append(f"Weights trained by this repository's {w.get('model')}/main.py on "
                     f"{card.get('data') or 'synthetic data'}.")
    else:
        claimed = " (the name as the importer gave it, unconfirmed by the file)" if w.get(
            "name_claimed") else ""
        lines.append(f"Weights: {w.get('source')} `{w.get('name') or 'unnamed'}`{claimed}"
                     f" (file `{w.get('file_name')}`, sha256 `{w.get('sha256')}`).")
        if w.get("fine_tuned_on"):
            lines.append(f"Fine-tuned here on `{w['fine_tuned_on']}`.")
    terms = [w.get("license") and f"licence {w['license']}", w.get("terms")]
    if any(terms):
        lines += ["", "Terms: " + "; ".join(t for t in terms if t) + "."]
    else:
        lines += ["", "Licence: none given (`--weights_license` names one for weights trained "
                  "here); the terms of the data trained on apply."]
    if w.get("published"):
        pub = w["published"]
        lines += ["", "Published by the source: " + ", ".join(
            f"{k} {v}" for k, v in pub.items() if k != "reference") +
            (f" ({pub['reference']})" if pub.get("reference") else "")]
    lines += ["", "## Evaluation", ""]
    if s:
        lines.append(f"Scored on the {s['split']} split of {card.get('data')} at step {s['step']}"
                     f"{' (' + s['data'] + ')' if s.get('data') else ''}:")
        lines += ["", "| metric | value |", "|---|---|"] + [
            f"| {k} | {v} |" for k, v in s["metrics"].items()]
    else:
        lines.append("Not evaluated: neither the exporting run nor an evaluation of this "
                     "checkpoint's step in its --model_dir scored these weights.")
    lines += ["", f"Evaluation preprocessing: `{card.get('evaluation_preprocessing')}`."
              if card.get("evaluation_preprocessing") else "",
              "", "## Export", "",
              f"- parameters: {card['parameter_count']:,}",
              f"- exported weights' sha256 (float32 values in variable order): "
              f"`{card['exported_weights_sha256']}`",
              f"- Triton model to call: `{card['triton_model']}`",
              f"- {p['name']} {p.get('version')}, commit "
              f"{p.get('commit') or p.get('commit_note')}"
              f"{' (with local changes)' if p.get('modified') else ''}",
              "- exported with " + ", ".join(f"{k} {v}" for k, v in
                                            card["exported_with"].items() if v),
              f"- saved {card['date_saved']}", "", "## Served files", ""]
    # The last section: build_engines.sh adds the TensorRT engines' lines when it builds them.
    lines += [f"- `{f}`: sha256 `{h}`" for f, h in card.get("served_files", {}).items()]
    return "\n".join(lines) + "\n"


def saved_model_sha256(export_dir: str) -> str:
    """The SavedModel's identity: ``saved_model.pb`` and ``variables/`` (its assets hold this
    card, and the export's other files are served apart)."""
    return _files_sha256(export_dir, ["saved_model.pb"] + [
        os.path.join("variables", n) for n in os.listdir(os.path.join(export_dir, "variables"))])


def served_files(export_dir: str, onnx_files) -> dict:
    """The SHA-256 of what servers run of the export in ``export_dir``: its SavedModel, its
    preprocessing's (``preprocess/``, a SavedModel too) and each ONNX file."""
    out = {"saved_model": saved_model_sha256(export_dir)}
    if os.path.isdir(os.path.join(export_dir, "preprocess")):
        out["preprocess"] = saved_model_sha256(os.path.join(export_dir, "preprocess"))
    for name in onnx_files:
        out[name] = file_sha256(os.path.join(export_dir, name))
    return out


def read(directory: str) -> dict | None:
    """The card in ``directory`` (``model_card.json``), None if there is none."""
    try:
        with open(os.path.join(directory, CARD_JSON), encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def write(directory: str, card: dict) -> None:
    """``model_card.json`` and ``README.md`` in ``directory`` (a staged one: written whole), as
    new files: one hard-linked from an export is left as it is."""
    for name, text in ((CARD_JSON, json.dumps(card, indent=1) + "\n"),
                       (CARD_README, markdown(card))):
        path = os.path.join(directory, name)
        if os.path.lexists(path):
            os.remove(path)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
