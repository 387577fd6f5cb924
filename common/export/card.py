"""The model card: what a reader of an export needs to trust its weights, written beside every
export (``README.md`` and ``model_card.json`` in the export's directory, the same dict as
``client.json``'s ``model_card``) and into every Triton repository (beside the model a client
calls).

The fields follow conventions users already read rather than a new one: the Hugging Face hub's
card metadata (``license`` as an SPDX id, ``library_name``, ``pipeline_tag``, ``datasets``,
``base_model``, ``model-index`` with its ``results``; the README's YAML front matter) and
keras-hub's ``metadata.json`` (``parameter_count``, ``keras_version``, ``date_saved``). What
neither has a field for is under ``weights`` (their source, name, file hash, terms and the
source's published accuracy: never a path of the machine that exported them), ``scored`` (what
the weights scored here, on which split, at which step) and ``project`` (this repository's
version and commit).
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
    lines = "".join(f"{file_sha256(os.path.join(base, m))}  {m}\n" for m in members)
    return hashlib.sha256(lines.encode()).hexdigest()


def weights_sha256(model) -> str:
    """The SHA-256 of the exported weights' values (float32, little-endian, in the model's
    variable order): the same for the same weights whatever file holds them, so that a reader
    can check that an export holds the weights its card names."""
    import numpy as np
    digest = hashlib.sha256()
    for v in model.variables:
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
    """The card's dict (module docstring). ``data`` is what the run read (``Serving.data_read``:
    the Hub's dataset id only when it is that set, and a description), ``weights`` what the
    checkpoint recorded of its source (``common/checkpoint/start.py``); ``scored`` the
    evaluation of these weights, or None."""
    pkgs = packages()
    card = {"model_name": model, "library_name": "keras", "pipeline_tag": pipeline_tag}
    if data.get("dataset"):  # the Hub's list of the data trained on: only a set it holds
        card["datasets"] = [data["dataset"]]
    card["data"] = data["description"]
    if weights.get("license"):  # the Hub's id (lower case); other licences by name
        hub = weights["license"].lower()
        card.update({"license": hub} if hub in HUB_LICENCES else
                    {"license": "other", "license_name": weights["license"]})
    if weights.get("hub_id"):
        card["base_model"] = weights["hub_id"]
    if scored:
        card["model-index"] = [{"name": model, "results": [{
            "task": {"type": pipeline_tag},
            "dataset": {"name": data.get("dataset") or data["description"],
                        "type": data.get("dataset") or "custom", "split": scored["split"]},
            "metrics": [{"type": k, "value": v} for k, v in scored["metrics"].items()
                        if isinstance(v, (int, float)) and not _no_value(k, v)]}]}]
    card.update({
        "parameter_count": int(parameter_count), "keras_version": pkgs["keras"],
        "date_saved": datetime.datetime.now(datetime.UTC).strftime(
            "%Y-%m-%d@%H:%M:%S"),
        "weights": dict(weights), "exported_weights_sha256": exported_weights_sha256,
        "evaluation_preprocessing": recipe, "scored": scored, "triton_model": triton_model,
        "project": project(), "exported_with": pkgs})
    return card


# The Hub's licence ids the weights' sources use (SPDX's, in lower case); any other licence is
# the Hub's "other" with its own name.
HUB_LICENCES = {"apache-2.0", "mit", "bsd-2-clause", "bsd-3-clause", "cc-by-4.0",
                "cc-by-sa-4.0", "cc-by-nc-4.0", "cc-by-nc-sa-4.0", "cc0-1.0", "gpl-3.0",
                "lgpl-3.0", "bigscience-openrail-m", "openrail"}


def _no_value(name: str, value: float) -> bool:
    """pycocotools' -1 for an AP or AR (``APs``, ``ARl`` ...): the split has no object of that
    size, a sentinel, not a score the model-index may publish."""
    return value == -1 and name.startswith(("AP", "AR"))


def _yaml(value, indent: int = 0) -> str:
    """The YAML of the front matter: block mappings and sequences, scalars as JSON (a subset
    of YAML that any YAML reader, the hub's included, reads back as written)."""
    pad = " " * indent
    if isinstance(value, dict):
        lines = []
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                lines.append(f"{pad}{k}:\n{_yaml(v, indent + 2)}")
            else:
                lines.append(f"{pad}{k}: {json.dumps(v)}")
        return "\n".join(lines)
    if isinstance(value, list):
        lines = []
        for v in value:
            if isinstance(v, (dict, list)) and v:
                inner = _yaml(v, indent + 2)
                lines.append(f"{pad}- {inner[indent + 2:]}")
            else:
                lines.append(f"{pad}- {json.dumps(v)}")
        return "\n".join(lines)
    return pad + json.dumps(value)


FRONT_MATTER = ("license", "license_name", "library_name", "pipeline_tag", "datasets", "base_model",
                "model-index")


def markdown(card: dict) -> str:
    """``README.md``: the hub's metadata as YAML front matter, then the card in prose."""
    front = {k: card[k] for k in FRONT_MATTER if k in card}
    w, s, p = card["weights"], card["scored"], card["project"]
    lines = ["---", _yaml(front), "---", "", f"# {card['model_name']}", ""]
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
              f"- saved {card['date_saved']}", ""]
    return "\n".join(lines)


def write(directory: str, card: dict) -> None:
    """``model_card.json`` and ``README.md`` in ``directory`` (a staged one: written whole)."""
    with open(os.path.join(directory, CARD_JSON), "w", encoding="utf-8") as f:
        json.dump(card, f, indent=1)
        f.write("\n")
    with open(os.path.join(directory, CARD_README), "w", encoding="utf-8") as f:
        f.write(markdown(card))
