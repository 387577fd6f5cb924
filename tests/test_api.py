"""The Python API (``common/api.py``): README.md's example run as written (a checkpoint trained
here, a photograph for cat.jpg), a Transformer-XL checkpoint scored through it as its export
scores, and what it refuses."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import OWN_HANDLING, ROOT, TINY, photographs

from common import api
from common.errors import DataError


def _readme_python() -> str:
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    section = text.split("\n### From Python\n", 1)[1]
    return re.findall(r"```python\n(.*?)```", section, re.S)[0]


def test_the_readmes_python_example_runs(tmp_path, digits_records):
    """A checkpoint's predictions equal its export's (the README asserts it); the model card
    travels with both: the checkpoint's, scored by the evaluation recorded for its step."""
    results = tmp_path / "results"
    subprocess.run([sys.executable, os.path.join(ROOT, "resnet50v1.5", "main.py"), *TINY,
                    "--data_dir", digits_records, "--mode", "train_and_evaluate",
                    "--iter_unit", "batch", "--num_iter", "1", "--results_dir", str(results),
                    "--model_dir", str(results / "checkpoints")],
                   check=True, capture_output=True, timeout=600)
    code = _readme_python().replace("/results", str(results)).replace(
        "cat.jpg", photographs()[2])
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    labels = (results / "export_py" / "assets" / "labels.txt").read_text().split()
    assert last.split(" ")[0] in labels
    card = json.loads((results / "export_py" / "model_card.json").read_text())
    assert card["scored"]["step"] == 1 and card["scored"]["split"] == "validation"
    assert "'source': 'trained'" in last and "'split': 'validation'" in last


@pytest.mark.one_stack("pip", "the API's own calls; the SavedModel's scores on each stack are "
                        "test_txl_main's")
def test_a_transformerxl_checkpoint_scores_as_its_export(tmp_path, corpus):
    """Transformer-XL through the API: the checkpoint's ``score`` signature and its export's
    agree; its flags over the recorded ones (``eval_mem_len``) reach the model."""
    results = tmp_path / "r"
    subprocess.run([sys.executable, os.path.join(ROOT, "transformerxl", "main.py"), *TINY,
                    "--data_dir", corpus, "--mode", "train", "--iter_unit", "batch",
                    "--num_iter", "2", "--results_dir", str(results), "--model_dir",
                    str(results / "ck")], check=True, capture_output=True, timeout=600)
    model = api.load(str(results / "ck"), data_dir=corpus, eval_mem_len=8)  # its vocabulary
    assert model.task.flags.eval_mem_len == 8 and model.card["scored"] is None
    tokens = np.load(os.path.join(corpus, "test.npy"))[:20].reshape(2, 10).astype(np.int32)
    info = model.serving.client_info()  # the start memory: none, (layers, batch, 0, d_model)
    inputs = {"tokens": tokens[:, :-1], "targets": tokens[:, 1:],
              "mems": np.zeros((info["n_layer"], 2, 0, info["d_model"]), np.float32)}
    assert "score" in model.signatures
    mine = model.predict("score", **inputs)
    served = api.load(model.export(str(tmp_path / "export")))
    theirs = served.predict("score", **inputs)
    np.testing.assert_allclose(mine["nll"], theirs["nll"], rtol=1e-5)
    with pytest.raises(DataError, match="^score takes mems, targets, tokens; missing targets"):
        served.predict("score", tokens=tokens, mems=inputs["mems"])
    with pytest.raises(DataError, match="^no signature 'scores': this model has "):
        model.predict("scores", tokens=tokens)


@OWN_HANDLING
def test_what_is_no_checkpoint_or_export_is_refused_with_one_line(tmp_path):
    with pytest.raises(DataError, match=f"^{tmp_path} holds no checkpoint of this repository"):
        api.load(str(tmp_path))
    (tmp_path / "saved_model.pb").write_bytes(b"")
    with pytest.raises(DataError, match="is an export: its flags were fixed when it was "
                                        r"written \(amp given\)"):
        api.load(str(tmp_path), amp=True)
    with pytest.raises(DataError, match="has no readable assets/client.json"):
        api.load(str(tmp_path))
