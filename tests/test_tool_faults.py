"""The tools' bad inputs end in one line, never a traceback, and leave no half-written output:
ssd320/scripts/attach_efficient_nms.py and python -m benchtools.profile_diff."""
import os

import numpy as np
import pytest
from conftest import OWN_HANDLING, load_script
from reliability_helpers import tmpfs

pytestmark = OWN_HANDLING


@pytest.fixture(scope="module")
def before_nms(tmp_path_factory):
    """A small graph with model_before_nms.onnx's outputs (decoded_boxes, class_scores)."""
    import onnx
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 8, 4])
    boxes = helper.make_tensor_value_info("decoded_boxes", TensorProto.FLOAT, ["batch", 8, 4])
    scores = helper.make_tensor_value_info("class_scores", TensorProto.FLOAT, ["batch", 8, 4])
    # A 256 KiB weight, so that the graph is larger than a small disk.
    big = helper.make_tensor("big", TensorProto.FLOAT, [64, 1024],
                             np.random.default_rng(0).random(64 * 1024).astype(np.float32))
    graph = helper.make_graph([helper.make_node("Identity", ["images"], ["decoded_boxes"]),
                               helper.make_node("ReduceMean", ["big"], ["mean"], keepdims=0),
                               helper.make_node("Add", ["images", "mean"], ["logits"]),
                               helper.make_node("Sigmoid", ["logits"], ["class_scores"])],
                              "before_nms", [x], [boxes, scores], initializer=[big])
    path = tmp_path_factory.mktemp("onnx") / "model_before_nms.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _nms(capsys, *args):
    nms = load_script("ssd320", "attach_efficient_nms")
    code = nms.main([str(a) for a in args])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    return code, err


def test_efficient_nms_writes_the_plugin_graph(before_nms, tmp_path, capsys):
    code, err = _nms(capsys, before_nms, tmp_path / "out.onnx")
    assert code == 0 and err == []
    assert os.listdir(tmp_path) == ["out.onnx"]


@pytest.mark.parametrize("case, code, expected", [
    ("not_onnx", 1, "is not a whole ONNX model"),
    ("cut", 1, "is not a whole ONNX model"),
    ("no_folder", 2, "the folder of {dst} does not exist"),
    ("dst_is_folder", 2, "{dst} is a folder: give the output file's path"),
    ("same_file", 2, "{dst} is the input: write the graph with the plugin to another file"),
    ("max_detections", 2, "--max_detections 0: at least 1"),
    ("iou", 2, "--iou_threshold 7.0: an IoU in (0, 1]"),
    ("score", 2, "--score_threshold -1.0: a score in [0, 1)"),
])
def test_efficient_nms_bad_inputs_are_one_line(before_nms, tmp_path, capsys, case, code,
                                               expected):
    src, dst, extra = before_nms, tmp_path / "out.onnx", []
    if case == "not_onnx":
        src = tmp_path / "notes.onnx"
        src.write_text("these are not the bytes of a model\n")
    elif case == "cut":
        src = tmp_path / "cut.onnx"
        src.write_bytes(before_nms.read_bytes()[:-40])
    elif case == "no_folder":
        dst = tmp_path / "missing" / "out.onnx"
    elif case == "dst_is_folder":
        dst = tmp_path / "folder"
        dst.mkdir()
    elif case == "same_file":
        src = tmp_path / "in.onnx"
        src.write_bytes(before_nms.read_bytes())
        dst = src
    else:
        extra = {"max_detections": ["--max_detections", "0"], "iou": ["--iou_threshold", "7"],
                 "score": ["--score_threshold", "-1"]}[case]
    got, err = _nms(capsys, src, dst, *extra)
    assert got == code and len(err) == 1, err
    assert err[0].startswith("attach_efficient_nms.py: error: ")
    assert expected.format(dst=dst) in err[0], err[0]
    assert not os.path.exists(tmp_path / "out.onnx")


def test_efficient_nms_on_a_full_disk_leaves_no_truncated_file(before_nms, tmp_path, capsys):
    with tmpfs(tmp_path / "small", 8) as small:
        code, err = _nms(capsys, before_nms, small / "out.onnx")
        assert code == 1 and len(err) == 1 and "cannot write" in err[0], err
        assert os.listdir(small) == []


# --- benchtools.profile_diff ------------------------------------------------------------------
def _profile_run(root, model="resnet50v1.5", rows=(("Conv2D", "100.0"), ("MatMul", "50.5"))):
    """A run's directory as --profile leaves it: log.json (its PARAMETER record) and ops.csv."""
    from common.runtime.dllogger import Logger
    root.mkdir(parents=True)
    log = Logger(enabled=True, json_path=str(root / "log.json"), tensorboard_dir=None)
    log.parameters({"model": model, "results_dir": str(root), "profile": "3:4",
                    "machine": "CPU", "amp": False})
    log.close()
    prof = root / "tensorboard" / "plugins" / "profile" / "2026_11_26"
    prof.mkdir(parents=True)
    lines = ["op_type,op_name,where,occurrences,self_us,ms_per_step,share,dtype,"
             "tensor_core_eligible,tensor_core_share"]
    share = round(1 / len(rows), 5)  # a whole table's shares add up to 1
    lines += [f"{t},{t.lower()}_1,host,2,{us},{us},{share},float32->float32,," for t, us in rows]
    (prof / "ops.csv").write_text("\n".join(lines) + "\n")
    return root


def _diff(capsys, *args):
    from benchtools import profile_diff
    code = profile_diff.main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, [ln for ln in out.err.splitlines() if ln.strip()]


def test_profile_diff_compares_two_runs_and_notes_different_models(tmp_path, capsys):
    a = _profile_run(tmp_path / "a")
    b = _profile_run(tmp_path / "b", model="ssd320", rows=(("Conv2D", "150.0"),))
    code, out, err = _diff(capsys, a, b)
    assert code == 0 and err == []
    assert "note: the runs are of different models (resnet50v1.5 and ssd320)" in out
    assert "| Conv2D | host |" in out
    code, _, err = _diff(capsys, a, b, "--top", "0")
    assert code == 2 and err[-1].endswith("--top 0: show at least one row")


@pytest.mark.parametrize("fault, expected", [
    ("cut_csv", "ops.csv, row 3: self_us is missing (a table cut short or edited?)"),
    ("cut_at_a_row_end", "ops.csv: the host ops' shares add up to 0.500, not 1: the table is "
                         "cut short or edited (1 row(s) left)"),
    ("binary_csv", "ops.csv is not text: not an op table of --profile"),
    ("not_a_number", "ops.csv, row 2: self_us is 'fast', not a number"),
    ("binary_log", "log.json, line 1: not text (not a DLLogger log?)"),
])
def test_profile_diff_bad_tables_and_logs_are_one_line_naming_the_file(tmp_path, capsys, fault,
                                                                       expected):
    a = _profile_run(tmp_path / "a")
    b = _profile_run(tmp_path / "b", rows=(("Conv2D", "fast" if fault == "not_a_number"
                                            else "1.0"), ("MatMul", "2.0")))
    table = next((tmp_path / "b" / "tensorboard").rglob("ops.csv"))
    if fault == "cut_csv":
        text = table.read_text()
        table.write_text(text[:text.rindex("MatMul") + 10])
    elif fault == "cut_at_a_row_end":  # whole rows, but not all of them
        text = table.read_text()
        table.write_text(text[:text.rindex("MatMul")])
    elif fault == "binary_csv":
        table.write_bytes(b"\xff\xfe\x00" + os.urandom(64))
    elif fault == "binary_log":
        (tmp_path / "b" / "log.json").write_bytes(b"\x8b\xff" + os.urandom(64))
    code, _, err = _diff(capsys, a, b)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("profile_diff: error: ") and expected in err[0], err[0]


def test_amp_lists_without_a_table_or_with_a_negative_show_is_one_line(tmp_path, capsys):
    from benchtools import amp_lists
    assert amp_lists.main([str(tmp_path)]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert err == [f"amp_lists: error: {tmp_path}: no per-op table (ops.csv): run main.py with "
                   "--profile START:STOP first"]
    assert amp_lists.main([str(_profile_run(tmp_path / "a")), "--show", "-1"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert err == ["amp_lists: error: --show -1: a number of ops, 0 or more"]


@pytest.mark.parametrize("column, value", [("ms_per_step", "nan"), ("self_us", "inf"),
                                           ("ms_per_step", "-3.5"), ("share", "nan"),
                                           ("share", "-0.5"), ("share", "inf")])
def test_amp_lists_refuses_times_and_shares_that_are_no_amount(tmp_path, capsys, column,
                                                                value):
    """NaN, infinite and negative times and shares were read as figures and printed as
    "(nan%)"; the table is refused with the row and the value."""
    from benchtools import amp_lists
    run = _profile_run(tmp_path / "a")
    (table,) = run.glob("tensorboard/plugins/profile/*/ops.csv")
    lines = table.read_text().splitlines()
    header = lines[0].split(",")
    cells = lines[1].split(",")
    cells[header.index(column)] = value
    table.write_text("\n".join([lines[0], ",".join(cells), *lines[2:]]) + "\n")
    assert amp_lists.main([str(run)]) == 2
    captured = capsys.readouterr()
    err = [ln for ln in captured.err.splitlines() if ln.strip()]
    assert err == [f"amp_lists: error: {table}, row 2: {column} is '{value}', not a finite "
                   "amount of 0 or more (a table edited?)"], err
    assert "nan" not in captured.out


def test_profile_diff_finds_the_table_of_a_run_recorded_from_another_directory(tmp_path, capsys,
                                                                             monkeypatch):
    """A summary records its op_table path as the run saw it (relative to its directory)."""
    from common.runtime.dllogger import Logger
    a, b = _profile_run(tmp_path / "a"), _profile_run(tmp_path / "b")
    log = Logger(enabled=True, json_path=str(b / "log.json"), tensorboard_dir=None)
    log.summary({"op_table": "results/b/tensorboard/plugins/profile/2026_11_26/ops.csv"})
    log.close()
    monkeypatch.chdir(tmp_path)
    code, out, err = _diff(capsys, a, b)
    assert code == 0 and err == [], err


# --- exports: one export per directory -------------------------------------------------------
def test_an_export_replaces_the_whole_earlier_one_and_clears_stale_staging(tmp_path, capsys):
    """Exporting without INT8 over an INT8 export used to keep its model_int8.onnx beside the
    new model; a killed export's .staging-* and .size-probe-* folders stayed forever."""
    from conftest import TINY

    from common import runner
    from rn50.task import ResNetTask
    export = tmp_path / "export"
    export.mkdir()
    for name in ("model_int8.onnx", "model.onnx"):
        (export / name).write_bytes(b"an earlier export's")
    (export / "notes.txt").write_text("the user's own file\n")
    for stale in (".staging-abc123", ".size-probe-def456"):
        (export / stale).mkdir()
        (export / stale / "saved_model.pb").write_bytes(b"half")
    runner.run(ResNetTask, ["main.py", *TINY, "--mode", "train", "--iter_unit", "batch",
                            "--num_iter", "1", "--results_dir", str(tmp_path / "r"),
                            "--export_dir", str(export)])
    out = capsys.readouterr().out
    assert sorted(os.listdir(export)) == ["README.md", "assets", "fingerprint.pb",
                                          "model_card.json", "notes.txt", "preprocess",
                                          "saved_model.pb", "variables"]
    assert f"removed {export / 'model_int8.onnx'}: the previous export's" in out
    assert f"removed {export / '.staging-abc123'}, left by an export that was stopped" in out


def test_profile_diff_refuses_a_table_shorter_than_its_run_wrote(tmp_path, capsys):
    """Ten rows of tiny ops cut from an ops.csv leave its shares adding up to 1: it compared
    without a note. The run's summary records how many rows it wrote; a table with fewer is
    refused, given as the run or as the file."""
    from common.runtime.dllogger import Logger
    a = _profile_run(tmp_path / "a")
    b = _profile_run(tmp_path / "b")
    table = next((b / "tensorboard").rglob("ops.csv"))
    header = table.read_text().splitlines()[0]
    rows = [f"Op{n},op{n}_1,host,2,{100 if n < 2 else 0.001},1.0,{0.5 if n < 2 else 0.0},"
            "float32->float32,," for n in range(12)]
    table.write_text("\n".join([header, *rows[:2]]) + "\n")  # the last ten cut
    log = Logger(enabled=True, json_path=str(b / "log.json"), tensorboard_dir=None)
    log.summary({"op_table": str(table), "op_table_rows": 12})
    log.close()
    for given in (b, table):
        code, _, err = _diff(capsys, a, given)
        assert code == 2 and err == [f"profile_diff: error: {table} has 2 rows; the run wrote "
                                     "12: the table was cut short or edited since"], err


@pytest.mark.one_stack("pip", "the check reads the run's record of its device, written the "
                        "same on both stacks")
def test_gpu_parity_without_a_gpu_is_refused_not_passed(tmp_path, digits_records):
    """benchtools.parity --runs gpu-fp32 on a machine where TensorFlow sees no GPU (a driver or
    CUDA mismatch, the very fault the check exists for) said "gpu-fp32 PASS": its GPU run was a
    second CPU run. Now the run's own record of its device decides: one line, exit 2."""
    import subprocess
    import sys

    from conftest import ROOT, TINY
    proc = subprocess.run([sys.executable, "-m", "benchtools.parity", "resnet50v1.5", "--out",
                           str(tmp_path / "parity"), "--runs", "gpu-fp32", "--steps", "1",
                           "--", *TINY, "--data_dir", digits_records],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, (proc.stdout[-2000:], proc.stderr[-2000:])
    assert "PASS" not in proc.stdout
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("parity: error: gpu-fp32: TensorFlow saw no GPU in this run (") and \
        last.endswith("no GPU): its driver or CUDA does not match TensorFlow's, or "
                      "CUDA_VISIBLE_DEVICES hides it; nothing was compared"), last
    # Refused before the CPU reference ran: at a real model's size the slowest run of all.
    assert "[parity] gpu-fp32: gpu" in proc.stdout and "[parity] cpu-fp32" not in proc.stdout


@pytest.mark.parametrize("args, expected", [
    (["benchtools.int8_accuracy", "resnet50v1.5", "--workdir", "FILE"],
     "--workdir FILE is a file, not a directory"),
    (["benchtools.dali_compare", "resnet50v1.5", "--data_dir", "DATA", "--batches", "0"],
     "--batches 0 and --batch_size 8: at least 1 each"),
    (["benchtools.dali_compare", "resnet50v1.5", "--data_dir", "SHAPES"],
     "its records are not resnet50v1.5's (no image/class/label feature): give the --data_dir "
     "that model's prepare_dataset.py wrote"),
])
def test_tool_command_lines_that_cannot_run_are_one_line(tmp_path, digits_records,
                                                         shapes_records, args, expected):
    import subprocess
    import sys

    from conftest import ROOT
    (tmp_path / "FILE").write_text("not a directory\n")
    args = [str(tmp_path / "FILE") if a == "FILE" else digits_records if a == "DATA" else
            shapes_records if a == "SHAPES" else a for a in args]
    expected = expected.replace("FILE", str(tmp_path / "FILE"))
    proc = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].endswith(expected), proc.stderr


def test_int8_accuracy_without_model_optimizer_stops_before_training(tmp_path):
    """Model Optimizer missing: the command trained for minutes, then failed with a traceback
    in the export. Now one line before anything runs."""
    import subprocess
    import sys

    from conftest import ROOT
    env = {**os.environ, "MODELOPT_PYTHON": sys.executable}  # a Python without modelopt
    proc = subprocess.run([sys.executable, "-m", "benchtools.int8_accuracy", "resnet50v1.5",
                           "--workdir", str(tmp_path / "w")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(
        f"int8_accuracy: error: --export_onnx_int8: MODELOPT_PYTHON={sys.executable} cannot "
        "import modelopt.onnx.quantization"), proc.stderr
    assert not (tmp_path / "w").exists()
