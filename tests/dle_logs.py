"""What a parser written for NVIDIA DeepLearningExamples' logs finds in ours: NVIDIA's key list
per model, written out here from DLE's TensorFlow scripts (not read from this repository's
code), checked by ``check_log`` against every run a log holds (the every-mode tests of the three
models call it on theirs: each mode's summary and step records, each key with the unit its
METADATA record gives, as DLLogger's JSON stream carries them)."""
import json

# DLE's names, by the mode that logs them, with their DLLogger units (None: unitless). ResNet-50:
# TensorFlow/Classification/ConvNets main.py's METADATA, runner.py's summaries,
# training_hooks.py's step records. SSD320: model_main.py's train_throughput, the inference
# benchmark's infer_throughput and eval_{avg,90%,...}_latency; COCO AP under TF Object
# Detection's names. Transformer-XL: tf/main.py and exp_utils.py.
NVIDIA = {
    "resnet50v1.5": {
        "step": {"total_loss": None, "learning_rate": None, "imgs_per_sec": "images/s"},
        "train": {"train_throughput": "images/s"},
        "evaluate": {"top1_accuracy": None, "top5_accuracy": None,
                     "eval_throughput": "images/s"},
        "inference_benchmark": {"eval_throughput": "images/s", "eval_latency_avg": "ms",
                                "eval_latency_p90": "ms", "eval_latency_p95": "ms",
                                "eval_latency_p99": "ms"},
        "training_benchmark": {"train_throughput": "images/s"},
    },
    "ssd320": {
        "train": {"train_throughput": "images/s"},
        "evaluate": {"DetectionBoxes_Precision/mAP": None,
                     "DetectionBoxes_Precision/mAP@.50IOU": None,
                     "DetectionBoxes_Precision/mAP@.75IOU": None,
                     "DetectionBoxes_Recall/AR@100": None},
        "inference_benchmark": {"infer_throughput": "images/s", "eval_avg_latency": "ms",
                                "eval_90%_latency": "ms", "eval_95%_latency": "ms",
                                "eval_99%_latency": "ms"},
        "training_benchmark": {"train_throughput": "images/s"},
    },
    "transformerxl": {
        "step": {"lr": None, "train_loss": None, "train_perplexity": None,
                 "train_throughput": "tokens/s"},
        "train": {"train_throughput": "tokens/s"},
        "evaluate": {"eval_loss": None, "eval_ppl": None, "eval_avg_throughput": "tokens/s"},
        "inference_benchmark": {"eval_avg_throughput": "tokens/s", "eval_avg_latency": "ms",
                                "eval_90%_latency": "ms", "eval_95%_latency": "ms",
                                "eval_99%_latency": "ms"},
        "training_benchmark": {"train_throughput": "tokens/s"},
    },
}


def runs(path):
    """The runs a log.json holds, in order, each as DLE reads a stream (``_parse``): a run
    starts with its METADATA records (a run appends to the log of the one before it)."""
    chunks, previous = [], None
    with open(path) as f:
        for line in f:
            if not line.startswith("DLLL "):
                continue
            rec = json.loads(line[5:])
            if rec["type"] == "METADATA" and previous != "METADATA":
                chunks.append([])
            chunks[-1].append(rec)
            previous = rec["type"]
    out = []
    for records in chunks:
        params = next(r["data"] for r in records if r.get("step") == "PARAMETER")
        out.append((params["mode"], *_parse(records)))
    return out


def _parse(records):
    """DLE's way of reading a DLLogger JSON stream ("DLLL "-prefixed JSON): METADATA records
    give {metric: metadata}; LOG records with step [] are summaries, others step records."""
    meta, summaries, steps = {}, [], []
    for rec in records:
        if rec["type"] == "METADATA":
            meta[rec["metric"]] = rec["metadata"]
        elif rec["step"] == []:
            summaries.append(rec["data"])
        elif rec["step"] != "PARAMETER":
            steps.append((rec["step"], rec["data"]))
    return meta, summaries, steps


def check_log(model, path):
    """Every run in ``path`` has NVIDIA's keys for its mode in its one summary, floats with
    NVIDIA's units (train_and_evaluate: train's and evaluate's); a training run's step records
    carry NVIDIA's per-step keys; an evaluation is logged at the step of the checkpoint it read
    (the training run's before it). Returns the modes seen, so that a test can say which it ran."""
    keys, trained, seen = NVIDIA[model], None, []
    for mode, meta, summaries, steps in runs(path):
        seen.append(mode)
        (summary,) = summaries
        parts = {"train_and_evaluate": ("train", "evaluate")}.get(mode, (mode,))
        for key, unit in ((k, u) for part in parts for k, u in keys.get(part, {}).items()):
            assert key in summary, (mode, key, sorted(summary))
            assert isinstance(summary[key], float), (mode, key)
            assert key in meta and meta[key]["unit"] == unit, (mode, key, meta.get(key))
        if mode in ("train", "train_and_evaluate"):
            trained = summary["final_step"]
            if "step" in keys:
                first = next(iter(keys["step"]))
                records = [data for _, data in steps if first in data]
                assert records, (mode, "no step records")
                for key, unit in keys["step"].items():
                    assert all(key in data for data in records), (mode, key, records[0])
                    assert meta[key]["unit"] == unit, (mode, key, meta[key])
        elif mode == "evaluate" and trained is not None:
            logged = {step[-1] for step, _ in steps if isinstance(step, list) and step}
            assert logged == {trained}, (mode, logged, trained)
    return seen
