"""benchtools.report: charts and a Markdown page from the logs of real (tiny) runs."""
import os
import re

import matplotlib.image
import pytest
from conftest import TINY

from benchtools import report
from common import runner
from rn50.task import ResNetTask

pytestmark = pytest.mark.one_stack(
    "pip", "the report reads the logs' JSON lines, whose names do not change with the Python "
    "stack (tests/dle_logs.py), and draws them")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, digits_records):
    """Two training runs that differ only in precision, and a benchmark of both precisions."""
    root = tmp_path_factory.mktemp("runs")
    base = ["main.py", *TINY, "--data_dir", digits_records, "--seed", "3"]
    for name, extra in (("fp32", []), ("amp", ["--amp"])):
        runner.run(ResNetTask, base + ["--mode", "train_and_evaluate", "--num_iter", "2",
                                       "--results_dir", str(root / "learning" / name), *extra])
        runner.run(ResNetTask, base + ["--mode", "training_benchmark", "--iter_unit", "batch",
                                       "--num_iter", "4", "--warmup_steps", "1",
                                       "--results_dir", str(root / "sweep" / name), *extra])
    return root


def _png(path):
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    height, width, _ = matplotlib.image.imread(path).shape
    assert width > 300 and height > 200
    assert os.path.getsize(path) < 200_000  # small enough to commit


def test_report_draws_learning_curves_and_speedups(runs, tmp_path):
    out = tmp_path / "report"
    assert report.main([str(runs / "learning"), str(runs / "sweep"), "--out", str(out)]) == 0
    page = (out / "report.md").read_text()
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", page)
    assert images == ["resnet50v1.5_learning.png", "resnet50v1.5_training_benchmark.png"]
    for name in images:
        _png(out / name)
    # The learning table: one row per run, labelled by precision (the only difference).
    assert "| FP32 | 12 |" in page and "| AMP (bfloat16) | 12 |" in page
    assert "top1_accuracy" in page  # the model's headline metric (NVIDIA's name) is plotted
    # The benchmark table: FP32 is 1.00x against itself; AMP has a ratio of its own.
    rows = [ln for ln in page.splitlines() if ln.startswith("| 8 | 1 | off |")]
    assert len(rows) == 2 and "| FP32 |" in rows[0] and "| 1.00x |" in rows[0]
    # The device as the logs record it, never "GPU" for a CPU run.
    assert "| batch/process | processes |" in page and "GPU |" not in page
    assert page.count("Measured on CPU: ") == 2
    ratio = float(re.search(r"\| ([\d.]+)x \|", rows[1]).group(1))
    runs_ = report.find_runs([str(runs / "sweep")])
    tput = {r.precision: r.summary["train_throughput"] for r in runs_}
    assert ratio == pytest.approx(tput["AMP (bfloat16)"] / tput["FP32"], abs=0.006)
    assert "no GPU" in page  # the machine each figure came from


def test_runs_differing_in_seed_are_labelled_by_it(runs):
    a = report.find_runs([str(runs / "learning" / "fp32")])[0]
    b = report.Run(a.path, {**a.params, "seed": 4}, a.summary, a.steps)
    assert report._labels([a, b]) == ["FP32, seed 3", "FP32, seed 4"]
    # Where the output went is not what was trained: no "export_onnx True" in a legend.
    c = report.Run(a.path, {**a.params, "export_onnx": True, "export_dir": "/x",
                            "profile": "2:3"}, a.summary, a.steps)
    assert report._labels([a, c]) == ["FP32", "FP32"]


def test_rounds_of_one_setting_are_a_median_with_their_range(runs, tmp_path):
    (fp32,) = report.find_runs([str(runs / "sweep" / "fp32")])
    key = "train_throughput"
    rounds = [report.Run(fp32.path, fp32.params, {**fp32.summary, key: v}, fp32.steps)
              for v in (90.0, 100.0, 130.0)]
    gpu = {**fp32.params, "machine": "NVIDIA A100-SXM4-80GB (GPU 0 of 8)", "world_size": 8}
    on_gpu = report.Run(fp32.path, gpu, {**fp32.summary, key: 5000.0}, fp32.steps)
    name, table = report.benchmark_chart("m", "training_benchmark", rounds, str(tmp_path))
    _png(tmp_path / name)
    assert "| 8 | 1 | off | FP32 | 100.0 | 90.0-130.0 | 3 | 1.00x |" in table
    assert table.startswith("Measured on CPU: ")
    assert on_gpu.device == "8 x NVIDIA A100-SXM4-80GB"
    _, table = report.benchmark_chart("m", "training_benchmark", [on_gpu], str(tmp_path))
    assert "| batch/GPU | GPUs |" in table and "Measured on 8 x NVIDIA A100-SXM4-80GB." in table


def test_a_directory_without_runs_is_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert report.main([str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"report: error: {tmp_path / 'empty'} holds no run: no log.json in it or its " \
                  "subdirectories"
    assert report.main([str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err.strip().endswith("missing: no such directory")


def test_a_log_cut_by_a_kill_is_reported_and_a_garbled_line_named_by_its_line(runs, tmp_path):
    """A run killed in the middle of a log line (main.py repairs the line when it next appends)
    is still reported; a line that does not parse elsewhere stops the report with the file's
    line, not a position inside the record."""
    import shutil
    run = tmp_path / "killed"
    shutil.copytree(runs / "learning" / "fp32", run)
    with open(run / "log.json", "a") as f:
        f.write('DLLL {"timestamp": "17", "datetime": "2026-11-2')  # cut: no newline
    assert report.main([str(run), "--out", str(tmp_path / "out")]) == 0
    text = (run / "log.json").read_text().replace('DLLL {"timestamp"', 'DLLL {"times', 1)
    (run / "log.json").write_text(text)
    with pytest.raises(report.ReportError, match=rf"^cannot read {run}/log.json, line 1: "):
        report.find_runs([str(run)])


def test_runs_of_other_configurations_are_charts_of_their_own_not_rounds(runs, tmp_path):
    """Two image sizes of one model and batch used to be merged as two "rounds" of one
    setting: each configuration is its own chart, titled with its architecture and size."""
    (fp32,) = report.find_runs([str(runs / "sweep" / "fp32")])
    key = "train_throughput"
    small = report.Run(fp32.path, fp32.params, {**fp32.summary, key: 100.0}, fp32.steps)
    large = report.Run(fp32.path, {**fp32.params, "image_size": 64},
                       {**fp32.summary, key: 30.0}, fp32.steps)
    groups = list(report.configurations([small, large]).values())
    assert [[r.params["image_size"] for r in g] for g in groups] == [[32], [64]]
    assert report.describe_configuration(groups[1]) == "resnet_tiny, 64x64, preset tiny"
    path = report.write_report([small, large], str(tmp_path / "out"), "report")
    page = open(path).read()
    assert "## resnet50v1.5 (resnet_tiny, 32x32, preset tiny): training benchmark" in page
    assert "## resnet50v1.5 (resnet_tiny, 64x64, preset tiny): training benchmark" in page
    assert page.count("| 8 | 1 | off | FP32 |") == 2 and "| 2 |" not in page  # no 2 rounds


def _figures(monkeypatch):
    """The figures the report draws, kept open to read their layout."""
    kept = []
    monkeypatch.setattr(report.plt, "close", kept.append)
    return kept


def test_inference_latency_tails_are_tabled_and_drawn_and_no_titles_overlap(runs, tmp_path,
                                                                           monkeypatch):
    """An inference benchmark (every step waited for) of both precisions: the table has the
    mean, p90, p95 and p99 latency under NVIDIA's names, a second panel draws them, and no two
    titles of any figure overlap (the learning chart's long configuration title included)."""
    for name, extra in (("fp32", []), ("amp", ["--amp"])):
        runner.run(ResNetTask, ["main.py", *TINY, "--seed", "3", "--mode", "inference_benchmark",
                                "--iter_unit", "batch", "--num_iter", "6", "--warmup_steps", "1",
                                "--results_dir", str(tmp_path / "infer" / name), *extra])
    kept = _figures(monkeypatch)
    out = tmp_path / "report"
    assert report.main([str(runs / "learning"), str(tmp_path / "infer"), "--out",
                        str(out)]) == 0
    page = (out / "report.md").read_text()
    assert "Keys: eval_throughput (images/s); latency eval_latency_avg, eval_latency_p90, " \
           "eval_latency_p95, eval_latency_p99" in page
    assert "| latency mean ms | latency p90 ms | latency p95 ms | latency p99 ms |" in page
    infer = [r for r in report.find_runs([str(tmp_path / "infer")])]
    fp32 = next(r for r in infer if r.precision == "FP32").summary
    row = next(ln for ln in page.splitlines() if ln.startswith("| 8 | 1 | off | FP32 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[-4:] == [report._num(fp32[k]) for k in (
        "eval_latency_avg", "eval_latency_p90", "eval_latency_p95", "eval_latency_p99")]
    assert float(cells[-3]) <= float(cells[-2]) <= float(cells[-1])  # p90 <= p95 <= p99
    bench = next(f for f in kept if len(f.axes) == 2 and f.axes[1].get_title() ==
                 "latency per step")
    assert [t.get_text() for t in bench.axes[1].get_legend().get_texts()][-4:] == \
        ["mean", "p90", "p95", "p99"]
    assert len(kept) == 2
    for fig in kept:
        assert len(report.title_boxes(fig)) >= 3  # the figure's and each panel's
        assert report.overlapping_titles(fig) == [], [t.get_text() for t in fig.texts]


def test_overlapping_titles_are_found_and_the_report_separates_them(monkeypatch, tmp_path):
    """The check itself: two panels whose long titles run into each other are found, and the
    report's save wraps them until they do not."""
    fig, axes = report.plt.subplots(1, 2, figsize=(6, 3))
    for ax in axes:
        ax.set_title("ssd320 (resnet_tiny, 128x128, preset shapes): training loss and more")
    fig.tight_layout()
    assert report.overlapping_titles(fig) == [(0, 1)]
    report._save(fig, str(tmp_path / "x.png"))
    assert report.overlapping_titles(fig) == []


def test_a_run_resumed_in_another_precision_is_labelled_by_both(runs, tmp_path,
                                                                digits_records):
    """A training run resumed with --amp in the same results directory: its label says FP32,
    then AMP, not FP32 alone."""
    import shutil
    run = tmp_path / "resumed"
    shutil.copytree(runs / "learning" / "fp32", run)
    runner.run(ResNetTask, ["main.py", *TINY, "--seed", "3", "--mode", "train", "--data_dir",
                            digits_records, "--num_iter", "3", "--amp", "--results_dir",
                            str(run)])
    (resumed,) = report.find_runs([str(run)])
    assert resumed.precision == "FP32, then AMP (bfloat16)"
    assert report._labels([resumed]) == ["FP32, then AMP (bfloat16)"]
    (plain,) = report.find_runs([str(runs / "learning" / "amp")])
    assert plain.precision == "AMP (bfloat16)"
