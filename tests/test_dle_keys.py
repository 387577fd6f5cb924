"""What a parser written for NVIDIA DeepLearningExamples' logs finds in ours: NVIDIA's key list
per model, written out here from DLE's TensorFlow scripts (not read from this repository's
code), checked against every mode's summary and step records, each with the unit its METADATA
record gives, as DLLogger's JSON stream carries them."""
import json

import pytest
from conftest import TINY

from common import runner
from rn50.task import ResNetTask
from ssd.task import SSDTask
from txl.task import TransformerXLTask

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


def parse_dllogger(path):
    """DLE's way of reading a DLLogger JSON stream: "DLLL "-prefixed JSON; METADATA records
    give {metric: metadata}; LOG records with step [] are summaries, others step records."""
    meta, summaries, steps = {}, [], []
    with open(path) as f:
        for line in f:
            if not line.startswith("DLLL "):
                continue
            rec = json.loads(line[5:])
            if rec["type"] == "METADATA":
                meta[rec["metric"]] = rec["metadata"]
            elif rec["step"] == []:
                summaries.append(rec["data"])
            elif rec["step"] != "PARAMETER":
                steps.append(rec["data"])
    return meta, summaries, steps


def _runs(model, data):
    task = {"resnet50v1.5": ResNetTask, "ssd320": SSDTask, "transformerxl": TransformerXLTask}
    base = {"resnet50v1.5": [*TINY],
            "ssd320": [*TINY, "--image_size", "64"],
            "transformerxl": [*TINY]}[model]
    short = ["--iter_unit", "batch", "--num_iter", "3", "--warmup_steps", "1"]
    return task[model], [*base, "--data_dir", data], {
        "train": ["--mode", "train", *short, "--display_every", "1"],
        "evaluate": ["--mode", "evaluate"],
        "inference_benchmark": ["--mode", "inference_benchmark", *short],
        "training_benchmark": ["--mode", "training_benchmark", *short]}


@pytest.mark.one_stack("pip", "the names the logs use do not change with the Python stack")
@pytest.mark.parametrize("model", list(NVIDIA))
def test_a_dle_parser_finds_nvidias_keys_with_their_units_in_every_mode(
        model, tmp_path, request):
    data = request.getfixturevalue({"resnet50v1.5": "digits_records", "ssd320": "shapes_records",
                                    "transformerxl": "corpus"}[model])
    task, base, modes = _runs(model, data)
    checkpoints = str(tmp_path / "checkpoints")  # evaluate reads what train wrote
    for mode, args in modes.items():
        out = tmp_path / mode
        runner.run(task, ["main.py", *base, *args, "--model_dir", checkpoints,
                          "--results_dir", str(out)])
        meta, summaries, steps = parse_dllogger(out / "log.json")
        (summary,) = summaries
        for key, unit in NVIDIA[model][mode].items():
            assert key in summary, (mode, key, sorted(summary))
            assert isinstance(summary[key], float), (mode, key)
            assert key in meta and meta[key]["unit"] == unit, (mode, key, meta.get(key))
        if mode == "train" and "step" in NVIDIA[model]:
            assert len(steps) == 3
            for key, unit in NVIDIA[model]["step"].items():
                assert all(key in s for s in steps), (key, steps[0])
                assert meta[key]["unit"] == unit, (key, meta[key])
    # Evaluate read the checkpoint train wrote: its evaluation is logged at train's last step.
    with open(tmp_path / "evaluate" / "log.json") as f:
        records = [json.loads(line[5:]) for line in f if line.startswith("DLLL ")]
    logged = [r["step"][-1] for r in records if r["type"] == "LOG"
              and isinstance(r["step"], list) and r["step"]]
    assert logged and set(logged) == {3}, logged
