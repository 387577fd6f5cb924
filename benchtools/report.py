"""Charts and a Markdown page from the DLLogger logs of runs: FP32-vs-AMP learning curves and
the speed-ups of a sweep, the pictures NVIDIA's model-script pages show.

    python -m benchtools.report results/learning/ssd320 results/sweep --out results/report

Every argument is a run directory (one that holds its log.json) or a directory whose
subdirectories are runs, which is what the learning checks' --results_dir and benchtools.sweep
leave. Training runs of a model make one chart: training loss and the model's headline
evaluation metric against step, one line per run, labelled by what differs between the runs in
what was trained (precision, seed, ...; not where the output went). Benchmark runs of a model
and mode make one grouped bar chart: throughput for each batch size, process count and XLA
setting, a bar per precision at the median of its rounds (runs of the same setting), with a
whisker from the slowest to the fastest round, each labelled with its speed-up against FP32 at
the same setting; beside it, where the runs measured each step's latency, the latency's mean,
p90, p95 and p99 per setting and precision. Figures are read under the model's own names
(NVIDIA's DLLogger keys: ``common/runtime/log_names.py``). A run resumed in its results directory is
labelled by the precision of every job it took ("FP32, then AMP (bfloat16)" where they
differ). Every title, axis and table names the device the runs were measured on as their logs
record it ("CPU: 2 x AMD EPYC ..." or "8 x NVIDIA A100 ..."): a CPU figure is never labelled
GPU. Writes OUT/report.md with the PNGs beside it. matplotlib draws headless (Agg), and no two
titles of a figure overlap (``overlapping_titles``).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import textwrap
from dataclasses import dataclass, field

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

from common import models  # noqa: E402
from common.errors import reported  # noqa: E402
from common.runtime.dllogger import read_records, step_logs  # noqa: E402

BENCHMARK_MODES = ("training_benchmark", "inference_benchmark")
# Settings that name files, say where output goes or how often it is written, or where a value
# came from: never what was trained, so never in a legend.
_IGNORED = {"results_dir", "model_dir", "data_dir", "data_idx_dir", "log_filename",
            "export_dir", "export_onnx", "export_onnx_int8", "calibration_images", "to_predict",
            "display_every", "save_checkpoint_steps", "keep_checkpoints", "profile",
            "max_bad_steps", "hang_timeout", "TF_XLA_FLAGS"}
# Settings that the precision label already says.
_PRECISION_KEYS = {"amp", "amp_dtype", "dtype_policy", "loss_scale", "static_loss_scale", "tf32",
                   "no_tf32", "xla"}
# What a chart's bars or lines tell apart (precision, seed, the benchmark settings) and what
# follows from them; every other setting that differs between runs makes a chart of its own.
_WITHIN_CHART = {"seed", "batch_size", "world_size", "global_batch_size", "lr_peak",
                 "lr_warmup_steps", "steps_per_epoch", "total_steps", "num_iter", "epochs"}
_COLOURS = {"FP32": "tab:blue", "TF32": "tab:green", "AMP (bfloat16)": "tab:orange",
            "AMP (float16)": "tab:red"}
_STYLES = ("-", "--", ":", "-.")


class ReportError(Exception):
    """Input the report cannot use; main() prints it as one line."""


def _precision(params: dict, summary: dict) -> str:
    """FP32, TF32 (float32 with TF32 on a GPU), AMP (bfloat16) or AMP (float16)."""
    policy = params.get("dtype_policy") or summary.get("precision", "float32")
    if policy.startswith("mixed_"):
        return f"AMP ({policy.removeprefix('mixed_')})"
    on_gpu = "no GPU" not in params.get("machine", "no GPU")
    return "TF32" if params.get("tf32") and on_gpu else "FP32"


@dataclass
class Run:
    path: str
    params: dict
    summary: dict
    steps: list = field(default_factory=list)
    jobs: list = field(default_factory=list)  # every job's PARAMETER record (resumed runs)

    @property
    def model(self) -> str:
        return self.params.get("model", "model")

    @property
    def names(self):
        """The model's names in its logs (``common/runtime/log_names.py``)."""
        return models.log_names(self.model)

    @property
    def mode(self) -> str:
        return self.params.get("mode", "")

    @property
    def precision(self) -> str:
        """The precision of every job of the run, in order where they differ: "FP32, then
        AMP (bfloat16)" for a run resumed under --amp."""
        seen = list(dict.fromkeys(_precision(p, self.summary) for p in self.jobs or
                                  [self.params]))
        return ", then ".join(seen)

    @property
    def label(self) -> str:
        return self.precision + (" + XLA" if self.params.get("xla") else "")

    @property
    def on_gpu(self) -> bool:
        return "no GPU" not in self.params.get("machine", "no GPU")

    @property
    def device(self) -> str:
        """What the run computed on, as its log records it: "CPU: 2 x AMD EPYC ..." or
        "8 x NVIDIA A100-SXM4-80GB" (its processes times the GPU model)."""
        machine = self.params.get("machine", "unknown machine")
        if not self.on_gpu:
            return "CPU: " + machine.removesuffix(", no GPU")
        return f"{self.params.get('world_size', 1)} x {machine.split(' (GPU ')[0]}"

    def series(self, key: str) -> list[tuple[int, float]]:
        return [(r["step"][1], r["data"][key]) for r in self.steps if key in r["data"]]


def _load(path: str) -> Run:
    log = os.path.join(path, "log.json")
    try:
        records = read_records(log)
    except (OSError, UnicodeDecodeError) as e:
        raise ReportError(f"cannot read {log}: {e}") from None
    except ValueError as e:  # a line that does not parse, named by its line in the file
        raise ReportError(f"cannot read {e}") from None
    params = [r["data"] for r in records if r.get("step") == "PARAMETER"]
    summaries = [r["data"] for r in records if r.get("step") == []]
    if not params:
        raise ReportError(f"{log} has no PARAMETER record: not a log of these scripts")
    # A resumed run appends its own records: the first PARAMETER says what was trained, the
    # last summary how the whole run ended, and each job's PARAMETER its precision.
    return Run(path, params[0], summaries[-1] if summaries else {}, step_logs(records), params)


def find_runs(paths) -> list[Run]:
    """The runs at ``paths``: each a run directory or a directory of them (one level down)."""
    runs = []
    for path in paths:
        if not os.path.isdir(path):
            raise ReportError(f"{path}: no such directory")
        if os.path.exists(os.path.join(path, "log.json")):
            runs.append(_load(path))
            continue
        found = sorted(os.path.join(path, d) for d in os.listdir(path)
                       if os.path.exists(os.path.join(path, d, "log.json")))
        if not found:
            raise ReportError(f"{path} holds no run: no log.json in it or its subdirectories")
        runs.extend(_load(p) for p in found)
    return runs


def configurations(runs) -> dict[tuple, list]:
    """The runs of each configuration: by the settings (architecture, image size, any flag)
    that differ between ``runs`` besides what a chart tells apart (``_WITHIN_CHART``,
    precision); the key is ((setting, value), ...), architecture and size first."""
    differ = [k for k in _differing(runs) if k not in _WITHIN_CHART]
    differ.sort(key=lambda k: (k not in ("arch", "image_size"), k))
    groups: dict[tuple, list] = {}
    for r in runs:
        key = tuple((k, json.dumps(r.params.get(k), sort_keys=True)) for k in differ)
        groups.setdefault(key, []).append(r)
    return groups


def describe_configuration(runs) -> str:
    """"resnet_tiny, 32x32" and any other setting the runs share that a reader needs: the
    architecture and image size every chart title carries."""
    p = runs[0].params
    parts = [str(p["arch"])] if p.get("arch") else []
    if p.get("image_size"):
        parts.append(f"{p['image_size']}x{p['image_size']}")
    if p.get("preset"):
        parts.append(f"preset {p['preset']}")
    return ", ".join(parts)


def _differing(runs) -> list[str]:
    """The settings whose values differ between ``runs`` (precision and paths aside)."""
    keys = sorted({k for r in runs for k in r.params} - _IGNORED - _PRECISION_KEYS)
    return [k for k in keys if not k.endswith("_source")
            and len({json.dumps(r.params.get(k), sort_keys=True) for r in runs}) > 1]


def _labels(runs) -> list[str]:
    differ = _differing(runs)
    return [", ".join([r.label] + [f"{k} {r.params.get(k)}" for k in differ]) for r in runs]


def _metric_key(runs) -> str | None:
    """The evaluation series to plot: the model's headline metric (its logged name), else
    the first of its evaluation results logged."""
    headline = runs[0].params.get("headline_metric")
    if headline and any(r.series(headline) for r in runs):
        return headline
    names = runs[0].names
    results = [n for n, _ in names.metrics.values()]
    keys = [k for r in runs for s in r.steps for k in s["data"]
            if k in results or (k.startswith("eval_") and k != names.eval_throughput)]
    return keys[0] if keys else None


def title_boxes(fig) -> list:
    """The window extents of the figure's title and of each axes' titles, as drawn."""
    if not hasattr(fig.canvas, "get_renderer"):  # a figure already closed
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        FigureCanvasAgg(fig)
    renderer = fig.canvas.get_renderer()
    texts = [fig._suptitle] if fig._suptitle is not None else []
    for ax in fig.axes:
        texts += [ax.title, ax._left_title, ax._right_title]
    return [t.get_window_extent(renderer) for t in texts if t.get_visible() and t.get_text()]


def overlapping_titles(fig) -> list[tuple[int, int]]:
    """Pairs (by ``title_boxes``' order) of titles that overlap once the figure is drawn."""
    boxes = title_boxes(fig)
    return [(i, j) for i in range(len(boxes)) for j in range(i + 1, len(boxes))
            if boxes[i].overlaps(boxes[j])]


def _save(fig, path: str) -> None:
    """Lays the figure out, wrapping titles until none overlaps another, and writes it."""
    fig.tight_layout()
    for width in (60, 45, 30, 20):
        if not overlapping_titles(fig):
            break
        for ax in fig.axes:
            ax.set_title(textwrap.fill(ax.get_title().replace("\n", " "), width),
                         fontsize=ax.title.get_fontsize())
        fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _devices(runs) -> str:
    return "; ".join(sorted({r.device for r in runs}))


def _log_scale_if_wide(ax, values) -> None:
    values = [v for v in values if v == v]  # NaN-free
    # Perplexities fall by orders of magnitude; fractions (accuracy, AP) read best linear.
    if values and min(values) >= 1 and max(values) / min(values) > 20:
        ax.set_yscale("log")


def learning_chart(model: str, runs, out_dir: str, name: str | None = None) -> tuple[str, str]:
    """One PNG of loss and evaluation metric against step; returns its file name and a table.
    ``model``: the figure's title (the model and its configuration)."""
    runs = sorted(runs, key=lambda r: (list(_COLOURS).index(r.precision)
                                       if r.precision in _COLOURS else 9, r.path))
    labels, metric = _labels(runs), _metric_key(runs)
    names = runs[0].names
    fig, axes = plt.subplots(1, 2 if metric else 1, figsize=(10, 4.2), squeeze=False)
    loss_ax = axes[0][0]
    seen: dict[str, int] = {}
    for run, label in zip(runs, labels):
        colour = _COLOURS.get(run.precision)
        # A colour per precision; runs of one precision (other seeds) get a line style each.
        n = seen[run.label] = seen.get(run.label, -1) + 1
        style = _STYLES[n % len(_STYLES)]
        series = run.series(names.loss)
        steps, loss = [s for s, _ in series], [v for _, v in series]
        window = max(1, len(loss) // 40)  # noisy per-step losses: a running mean over 1/40
        if window > 1:
            loss_ax.plot(steps, loss, style, color=colour, lw=0.5, alpha=0.3)
            loss = [statistics.fmean(loss[max(0, i - window + 1):i + 1])
                    for i in range(len(loss))]
        loss_ax.plot(steps, loss, style, color=colour, lw=1.2, label=label)
        if metric:
            ev = run.series(metric)
            axes[0][1].plot([s for s, _ in ev], [v for _, v in ev], style, marker="o", ms=3,
                            color=colour, lw=1.2, label=label)
    running = any(len(r.series(names.loss)) >= 80 for r in runs)
    loss_ax.set(title=f"training loss ({names.loss})", xlabel="step",
                ylabel="loss (running mean)" if running else "loss")
    fig.suptitle(f"{model}\n{_devices(runs)}", fontsize=9)
    _log_scale_if_wide(loss_ax, [v for r in runs for _, v in r.series(names.loss)])
    if metric:
        axes[0][1].set(title=f"{metric} (held out)", xlabel="step", ylabel=metric)
        _log_scale_if_wide(axes[0][1], [v for r in runs for _, v in r.series(metric)])
    for ax in axes[0]:
        ax.grid(alpha=0.3)
        ax.title.set_fontsize(10)
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))  # steps
    axes[0][-1].legend(fontsize=8)
    name = name or f"{model}_learning.png"
    _save(fig, os.path.join(out_dir, name))

    unit = names.train_throughput
    rows = [f"Measured on {_devices(runs)}.", "",
            f"| run | steps | final {names.loss} | {metric or 'metric'} | {unit} "
            f"({names.unit}) |", "|---|---|---|---|---|"]
    for run, label in zip(runs, labels):
        loss = run.series(names.loss)
        final = run.summary.get(metric) if metric else None
        rows.append(f"| {label} | {run.summary.get('final_step', loss[-1][0] if loss else '-')} "
                    f"| {_num(loss[-1][1]) if loss else '-'} | {_num(final)} | "
                    f"{_num(run.summary.get(unit))} |")
    return name, "\n".join(rows)


def _num(v) -> str:
    if v is None:
        return "-"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _keys(run: Run, mode: str) -> tuple[str, list[str]]:
    """The run's throughput key and its latency keys (mean, p90, p95, p99) for ``mode``."""
    names, phase = run.names, "train" if mode == "training_benchmark" else "eval"
    rate = names.train_throughput if phase == "train" else names.infer_throughput
    return rate, [names.latency(phase, s) for s in LATENCY_STATS]


LATENCY_STATS = ("avg", 90, 95, 99)
_LATENCY_LABELS = ("mean", "p90", "p95", "p99")


def benchmark_chart(model: str, mode: str, runs, out_dir: str,
                    name: str | None = None) -> tuple[str, str]:
    """A grouped bar chart of throughput (bars: precision, at the median of its rounds;
    whiskers: the slowest and fastest round; groups: batch, processes, XLA) of runs of one
    configuration (``configurations``: rounds are runs of the same settings only), and beside
    it, where the runs measured each step, the latency per setting and precision (mean, p90,
    p95, p99: markers on one line per precision)."""
    key, lat_keys = _keys(runs[0], mode)
    unit = runs[0].names.unit
    gpu = any(r.on_gpu for r in runs)
    per = "GPU" if gpu else "process"

    def setting(r):
        return (r.params.get("batch_size"), r.params.get("world_size", 1),
                bool(r.params.get("xla")))

    settings = sorted({setting(r) for r in runs})
    precisions = [p for p in _COLOURS if any(r.precision == p for r in runs)]
    precisions += sorted({r.precision for r in runs} - set(precisions))
    rounds: dict[tuple, list[float]] = {}
    latency: dict[tuple, list[list[float]]] = {}
    for r in runs:
        if r.summary.get(key) is not None:
            rounds.setdefault((setting(r), r.precision), []).append(r.summary[key])
            if all(r.summary.get(k) is not None for k in lat_keys):
                latency.setdefault((setting(r), r.precision), []).append(
                    [r.summary[k] for k in lat_keys])
    median = {k: statistics.median(v) for k, v in rounds.items()}
    lat_median = {k: [statistics.median(col) for col in zip(*v)] for k, v in latency.items()}
    width = 0.8 / len(precisions)
    panels = 2 if latency else 1
    fig, axes = plt.subplots(1, panels, figsize=(max(5, 1.6 * len(settings) + 2) * panels, 4.2),
                             squeeze=False)
    ax = axes[0][0]
    labels = [f"batch {b}/{per}\n{g} {per}{'es' if g > 1 and not gpu else ''}"
              f"{'s' if g > 1 and gpu else ''}{', XLA' if x else ''}" for b, g, x in settings]
    rows = []
    for i, p in enumerate(precisions):
        xs, heights, spread = [], [], [[], []]
        for j, s in enumerate(settings):
            v = median.get((s, p))
            if v is None:
                continue
            xs.append(j + (i - (len(precisions) - 1) / 2) * width)
            heights.append(v)
            spread[0].append(v - min(rounds[(s, p)]))
            spread[1].append(max(rounds[(s, p)]) - v)
            base = median.get((s, "FP32"))
            speedup = f"{v / base:.2f}x" if base else ""
            ax.text(xs[-1], max(rounds[(s, p)]), speedup, ha="center", va="bottom", fontsize=8)
            n = len(rounds[(s, p)])
            spread_text = (f"{min(rounds[(s, p)]):.1f}-{max(rounds[(s, p)]):.1f}" if n > 1
                           else "-")
            lat = lat_median.get((s, p))
            lat_text = " | ".join(_num(v) for v in lat) if lat else " | ".join("-" * 4)
            rows.append((j, i, f"| {s[0]} | {s[1]} | {'on' if s[2] else 'off'} | {p} | {v:.1f} "
                               f"| {spread_text} | {n} | {speedup or '-'} | {lat_text} |"))
        ax.bar(xs, heights, width, color=_COLOURS.get(p), label=p,
               yerr=spread if any(map(any, spread)) else None, capsize=3,
               error_kw={"elinewidth": 0.8})
    ax.set_xticks(range(len(settings)), labels, fontsize=8)
    ax.set(title="throughput", ylabel=f"{key} ({unit}, median of rounds)")
    ax.margins(y=0.15)
    ax.legend(fontsize=8)
    if latency:
        lax = axes[0][1]
        for i, p in enumerate(precisions):
            for j, s in enumerate(settings):
                lat = lat_median.get((s, p))
                if not lat:
                    continue
                x = j + (i - (len(precisions) - 1) / 2) * width
                lax.plot([x] * len(lat), lat, "-", color=_COLOURS.get(p), lw=1, alpha=0.6)
                for v, marker in zip(lat, ("o", "^", "s", "v")):
                    lax.plot(x, v, marker, color=_COLOURS.get(p), ms=5)
        for marker, label in zip(("o", "^", "s", "v"), _LATENCY_LABELS):
            lax.plot([], [], marker, color="grey", label=label)
        lax.set_xticks(range(len(settings)), labels, fontsize=8)
        lax.set(title="latency per step", ylabel="ms (median of rounds)")
        lax.legend(fontsize=8)
    for a in axes[0]:
        a.grid(axis="y", alpha=0.3)
        a.title.set_fontsize(10)
    fig.suptitle(f"{model}: {mode.replace('_', ' ')}\n{_devices(runs)}", fontsize=9)
    name = name or f"{model}_{mode}.png"
    _save(fig, os.path.join(out_dir, name))
    lat_cols = " | ".join(f"latency {lbl} ms" for lbl in _LATENCY_LABELS)
    head = [f"Measured on {_devices(runs)}. Keys: {key} ({unit}); latency "
            f"{', '.join(lat_keys)} (ms; '-' where the host did not wait for every step).", "",
            f"| batch/{per} | {per}es | XLA | precision | {unit} (median) | range over rounds | "
            f"rounds | vs FP32 | {lat_cols} |".replace("GPUes", "GPUs"),
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    return name, "\n".join(head + [row for _, _, row in sorted(rows)])


def _configurations_in_order(runs) -> list[list]:
    return list(configurations(runs).values()) if runs else []


def _title(model: str, runs) -> str:
    what = describe_configuration(runs)
    return f"{model} ({what})" if what else model


def _file(model: str, kind: str, n: int) -> str:
    """The chart's file: MODEL_KIND.png, MODEL_KIND_2.png for a second configuration."""
    return f"{model}_{kind}{'' if n == 0 else f'_{n + 1}'}.png"


def write_report(runs, out_dir: str, command: str) -> str:
    """Charts and ``report.md`` in ``out_dir``; returns the page's path."""
    os.makedirs(out_dir, exist_ok=True)
    machines = sorted({f"{r.params.get('machine', 'unknown machine')}, TensorFlow "
                       f"{r.params.get('tensorflow', '?')}" for r in runs})
    page = ["# Results report", "",
            f"Made on {datetime.date.today()} by `{command}` from {len(runs)} run(s), measured "
            f"on: {'; '.join(machines)}.", ""]
    failed = [r for r in runs if not r.summary]
    done = [r for r in runs if r.summary]
    models = list(dict.fromkeys(r.model for r in done))
    for model in models:
        mine = [r for r in done if r.model == model]
        training = [r for r in mine if r.mode not in BENCHMARK_MODES
                    and r.series(r.names.loss)]
        for n, group in enumerate(_configurations_in_order(training)):
            title = _title(model, group)
            name, table = learning_chart(title, group, out_dir, _file(model, "learning", n))
            page += [f"## {title}: learning", "", f"![{title} learning curves]({name})", "",
                     table, ""]
        for mode in BENCHMARK_MODES:
            bench = [r for r in mine if r.mode == mode and r.summary.get(_keys(r, mode)[0])
                     is not None]
            for n, group in enumerate(_configurations_in_order(bench)):
                title = _title(model, group)
                name, table = benchmark_chart(title, mode, group, out_dir, _file(model, mode, n))
                page += [f"## {title}: {mode.replace('_', ' ')}", "",
                         f"![{title} {mode}]({name})", "", table, ""]
    if failed:
        page += ["## Runs without a summary (failed or still running)", ""]
        page += [f"- `{r.path}`" for r in failed] + [""]
    path = os.path.join(out_dir, "report.md")
    with open(path, "w") as f:
        f.write("\n".join(page))
    return path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchtools.report",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="run directories, or directories of runs")
    p.add_argument("--out", default="results/report", help="where report.md and PNGs go")
    args = p.parse_args(argv)
    command = "python -m benchtools.report " + " ".join(
        sys.argv[1:] if argv is None else list(argv))

    def body() -> int:
        runs = find_runs(args.runs)
        path = write_report(runs, args.out, command)
        print(f"report: {len(runs)} run(s) -> {path}")
        return 0
    return reported("report", body, {ReportError: 2, OSError: 1})


if __name__ == "__main__":
    sys.exit(main())
