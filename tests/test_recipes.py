"""Each recipe lives in Python once (``Task.derive_settings``): the rules that depend on the
number of processes and the data, and ``main.py`` started directly or through a model's
``train.sh`` runs the same recipe (the same PARAMETER record). The flags themselves are never
written."""
import os
import shlex
import subprocess

import pytest
from conftest import ROOT, TINY

from common import flags, runner
from common.errors import UsageError
from common.runtime import distributed
from common.runtime.distributed import Distributed
from common.runtime.dllogger import read_records


def _settings(task_cls, *args):
    return flags.parse(flags.build(task_cls.config.define_flags, task_cls.config.FLAG_DEFAULTS),
                       ["main.py", *args])


@pytest.mark.parametrize("world, batch, steps", [(1, 32, 100_000), (4, 32, 25_000),
                                                 (8, 32, 12_500), (16, 32, 6_250),
                                                 (32, 16, 6_250)])
def test_ssd_keeps_nvidias_images_whatever_the_world(world, batch, steps):
    from ssd.task import SSDTask
    derived = SSDTask.derive_settings(_settings(SSDTask, "--batch_size", str(batch)), world)
    assert derived == {"num_classes": 90, "num_iter": steps}
    given = SSDTask.derive_settings(_settings(SSDTask, "--num_iter", "7"), world)
    assert "num_iter" not in given  # a command line's --num_iter wins


def test_ssd_takes_its_classes_from_the_data(shapes_records):
    import json

    from ssd.task import SSDTask
    with open(os.path.join(shapes_records, "label_map.json")) as f:
        classes = json.load(f)["num_classes"]
    s = _settings(SSDTask, "--data_dir", shapes_records)
    assert SSDTask.derive_settings(s, 1)["num_classes"] == classes
    with pytest.raises(UsageError, match="is below the largest category id"):
        SSDTask.derive_settings(_settings(SSDTask, "--data_dir", shapes_records,
                                          "--num_classes", "1"), 1)


@pytest.mark.parametrize("world, chunk, rows", [(1, 8, 32), (2, 4, 32), (8, 1, 32), (32, 1, 8)])
def test_txl_keeps_256_rows_per_step(world, chunk, rows):
    from txl.task import TransformerXLTask
    derived = TransformerXLTask.derive_settings(_settings(TransformerXLTask), world)
    assert (derived["batch_size"], derived["batch_chunk"]) == (rows, chunk)
    assert rows * chunk * world == 256
    given = TransformerXLTask.derive_settings(_settings(TransformerXLTask, "--batch_chunk", "2"),
                                              8)
    assert (given["batch_size"], given["batch_chunk"]) == (16, 2)
    with pytest.raises(UsageError, match="rows per step do not split over 3 processes"):
        TransformerXLTask.derive_settings(_settings(TransformerXLTask), 3)


def test_txl_preset_values_are_derived_settings_not_written_flags():
    from common.flags import preset_values
    from txl.task import TransformerXLTask
    s = _settings(TransformerXLTask, *TINY, "--d_model", "48")
    derived = preset_values(s, TransformerXLTask.config.PRESETS)
    assert derived["n_layer"] == 2 and "d_model" not in derived  # the command line wins
    assert derived["batch_size"] == 4 and "batch_chunk" not in derived  # the preset's rows
    assert TransformerXLTask.derive_settings(s.with_derived(derived), 1) == {}
    assert s.n_layer == 16  # the flag is untouched
    with pytest.raises(AttributeError, match="read-only"):
        s.with_derived(derived).n_layer = 3


class _TwoProcesses:
    """Horovod as rank 0 of two processes sees it, for a run that only sets up (no step): the
    recipe's sizes depend on the world, and the collectives of set-up are rank 0's own values."""
    Average, Sum, Max = "average", "sum", "max"

    def rank(self):
        return 0

    def local_rank(self):
        return 0

    def size(self):
        return 2

    def allreduce(self, t, op=None):
        return t

    def grouped_allreduce(self, ts, op=None, compression=None):
        return list(ts)

    def broadcast_object(self, obj, root_rank=0):
        return obj

    def allgather_object(self, obj):  # rank 1 sees what rank 0 sees
        return [obj, obj]

    def broadcast_variables(self, variables, root_rank=0):
        return None


def _train_sh_args(model, env):
    """The main.py arguments that ``MODEL/scripts/train.sh fp32 2`` passes (DRY_RUN=1)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "HOSTS",
                                                                     "LAUNCHER", "PYTHON"))}
    proc = subprocess.run(["bash", os.path.join(ROOT, model, "scripts", "train.sh"), "fp32", "2"],
                          capture_output=True, text=True, env={**full, "DRY_RUN": "1", **env},
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    cmd = shlex.split(proc.stdout)
    assert cmd[:2] == ["mpirun", "--allow-run-as-root"]
    return cmd[cmd.index(os.path.join(ROOT, model, "main.py")) + 1:]


@pytest.mark.parametrize("model", ["resnet50v1.5", "ssd320", "transformerxl"])
def test_main_py_and_train_sh_run_one_recipe(model, tmp_path, monkeypatch, digits_records,
                                             shapes_records, corpus):
    """``mpirun -np 2 python MODEL/main.py --no_tf32 [data]`` and ``train.sh fp32 2`` with the
    same data give the same PARAMETER record: every derived size included."""
    from common import models
    data = {"resnet50v1.5": digits_records, "ssd320": shapes_records, "transformerxl": corpus}
    # Small models (the recipe's sizes do not depend on the network's): set-up in seconds.
    extra = {"resnet50v1.5": ["--num_classes", "10", "--arch", "resnet_tiny"],
             "ssd320": ["--arch", "resnet_tiny", "--image_size", "64"],
             "transformerxl": ["--n_layer", "2", "--d_model", "32", "--n_head", "2",
                               "--d_head", "16", "--d_inner", "64"]}[model]
    results = str(tmp_path / "r")
    env = {"DATA_DIR": data[model], "RESULTS_DIR": results}
    if model == "transformerxl":
        env["DALI"] = "1"
    monkeypatch.setattr(distributed, "init", lambda: Distributed(_TwoProcesses()))
    task = models.task_class(model)
    direct = ["--no_tf32", "--data_dir", data[model], "--dali", "--results_dir", results, *extra]
    for argv in (direct, _train_sh_args(model, env) + extra):
        trainer = runner.setup(task, ["main.py", *argv])
        trainer.log.close()
    first, second = [r["data"] for r in read_records(os.path.join(results, "log.json"))
                     if r.get("step") == "PARAMETER"]
    assert first["world_size"] == 2 and first == second
    if model == "ssd320":
        assert first["num_iter"] == 12_500 * 256 // (2 * 32)
    if model == "transformerxl":
        assert (first["batch_size"], first["batch_chunk"]) == (32, 4)
