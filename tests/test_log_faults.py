"""Logs survive faults and match NVIDIA DLLogger 1.1.0's JSON lines (hardening, part 2)."""
import datetime
import json
import math
import os

import tensorflow as tf
from conftest import OWN_HANDLING
from linear_task import LinearTask
from reliability_helpers import tmpfs

from common import runner
from common.runtime import dllogger

# DLLogger 1.1.0's JSONStreamBackend: these keys, in this order, json.dumps' default separators.
DLLOGGER_KEYS = {"METADATA": ["timestamp", "elapsedtime", "datetime", "type", "metric", "metadata"],
                 "LOG": ["timestamp", "datetime", "elapsedtime", "type", "step", "data"]}

pytestmark = OWN_HANDLING


def _check_dllogger_form(line: str) -> dict:
    assert line.startswith("DLLL ") and line.endswith("\n")
    record = json.loads(line[5:])
    assert list(record) == DLLOGGER_KEYS[record["type"]]
    assert line == "DLLL " + json.dumps(record) + "\n"  # byte for byte as json.dumps writes it
    when = datetime.datetime.fromtimestamp(float(record["timestamp"]), datetime.UTC)
    assert record["datetime"] == str(when) and record["datetime"].endswith("+00:00")
    assert float(record["elapsedtime"]) >= 0 and isinstance(record["elapsedtime"], str)
    return record


def test_log_lines_have_dllogger_form_and_runs_append(tmp_path):
    args = ["x", "--results_dir", str(tmp_path), "--num_iter", "2"]
    runner.run(LinearTask, args)
    path = tmp_path / "log.json"
    with open(path, "a") as f:
        f.write('DLLL {"timestamp": "17953')  # a line cut short by a killed process
    runner.run(LinearTask, args[:-1] + ["4"])
    lines = open(path).read().splitlines(keepends=True)
    records = [_check_dllogger_form(ln) for ln in lines]
    assert [r["step"] for r in records if r["type"] == "LOG" and r["step"] == "PARAMETER"] == \
        ["PARAMETER", "PARAMETER"]  # one per run: the resumed run appended its own
    steps = [r["step"][1] for r in records if r["type"] == "LOG" and len(r["step"]) == 2]
    assert steps == [1, 2, 3, 4]
    assert len(dllogger.read_records(str(path))) == len(lines)


def test_non_finite_numbers_are_written_bare_as_dllogger_does(tmp_path):
    log = dllogger.Logger(json_path=str(tmp_path / "log.json"))
    log.log((1, 1), {"loss": float("nan"), "grad_norm": float("inf"), "neg": -float("inf")})
    log.close()
    line = open(tmp_path / "log.json").read()
    assert '"loss": NaN, "grad_norm": Infinity, "neg": -Infinity' in line
    record = _check_dllogger_form(line)
    assert math.isnan(record["data"]["loss"]) and record["data"]["grad_norm"] == math.inf


def test_full_disk_while_logging_keeps_training_and_whole_lines(tmp_path, capsys):
    results = tmp_path / "res"
    with tmpfs(results, 128):  # room to start (64 KiB are checked), not for 400 steps of logs
        code = runner.main(LinearTask, ["x", "--results_dir", str(results), "--model_dir",
                                        str(tmp_path / "ck"), "--num_iter", "400"])
        err = capsys.readouterr().err
        assert code == 0, err
        text = open(results / "log.json").read()
    assert "cannot write" in err and "No space left on device" in err
    assert "record(s) could not be written" in err
    assert text.endswith("\n")
    for line in text.splitlines(keepends=True):
        _check_dllogger_form(line)  # every line whole
    assert os.path.exists(tmp_path / "ck" / "ckpt-400.index")  # training finished and saved


def test_tensorboard_tags_have_no_repeated_prefix(tmp_path):
    log = dllogger.Logger(tensorboard_dir=str(tmp_path))
    log.log((1, 6), {"eval_top1": 0.5, "eval_images": 12}, tb_step=6, tb_prefix="eval")
    log.log((1, 6), {"loss": 2.0}, tb_step=6)
    log.close()
    tags = set()
    for name in os.listdir(tmp_path):
        for raw in tf.data.TFRecordDataset(str(tmp_path / name)):
            event = tf.compat.v1.Event.FromString(raw.numpy())
            tags |= {v.tag for v in event.summary.value}
    assert tags == {"eval/top1", "eval/images", "train/loss"}
