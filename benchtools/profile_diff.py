"""Two ``--profile`` runs side by side, op type by op type: where did run B lose (or win)?

    python -m benchtools.profile_diff results/rn50_fp32 results/rn50_amp [--by type|name]

Each argument is a run directory (its log.json names the per-op table the profiler wrote) or an
``ops.csv`` itself (``common/tools/op_table.py``). Times are self times in milliseconds per profiled
step, so runs that profiled different numbers of steps compare; the rows are sorted by what B
spends more than A, and the last lines name the biggest losers with their part of the total
difference. Profile both runs with the same batch size (the page says when they differ) and, on
a CPU with few cores, one op at a time (``TF_NUM_INTEROP_THREADS=1``, see docs/tools.md).
"""
from __future__ import annotations

import argparse
import glob
import os
import sys

from common.errors import reported
from common.runtime.dllogger import read_records
from common.tools import op_table


class DiffError(Exception):
    """An argument that is no profiled run; main() prints it as one line."""


def load(path: str) -> tuple[str, list[dict], dict]:
    """(label, op table rows, the run's PARAMETER record or {}) of a run directory or an
    ``ops.csv``."""
    params, table, summary = {}, path, {}
    # The run's log: in a run directory, or above its ops.csv (tensorboard/.../ops.csv).
    run_dir = path if os.path.isdir(path) else next(
        (d for d in _parents(path) if os.path.exists(os.path.join(d, "log.json"))), None)
    if run_dir:
        log = os.path.join(run_dir, "log.json")
        if os.path.exists(log):
            try:
                records = read_records(log)
            except ValueError as e:
                raise DiffError(str(e)) from None
            params = next((r["data"] for r in records if r.get("step") == "PARAMETER"), {})
            summary = next((r["data"] for r in reversed(records) if r.get("step") == []), {})
    if os.path.isdir(path):
        table = summary.get("op_table")
        if not table or not os.path.isfile(table):  # none, or relative to another directory
            table = _newest(path)
    if not os.path.isfile(table):
        raise DiffError(f"{path}: no per-op table ({op_table.FILE}): run main.py with "
                        "--profile START:STOP first")
    try:
        rows = op_table.read(table)
    except (ValueError, KeyError) as e:
        raise DiffError(str(e)) from None
    written = summary.get("op_table_rows")
    if written and os.path.abspath(table) == os.path.abspath(summary.get("op_table") or "") \
            and len(rows) != written:
        raise DiffError(f"{table} has {len(rows)} rows; the run wrote {written}: the table was "
                        "cut short or edited since")
    return _label(path, params), rows, params


def _parents(path: str, levels: int = 6):
    d = os.path.dirname(os.path.abspath(path))
    for _ in range(levels):
        yield d
        d = os.path.dirname(d)


def _newest(run_dir: str) -> str:
    found = glob.glob(os.path.join(run_dir, "tensorboard", "**", op_table.FILE),
                      recursive=True)
    return max(found, key=os.path.getmtime) if found else os.path.join(run_dir, op_table.FILE)


def _label(path: str, params: dict) -> str:
    policy = params.get("dtype_policy", "")
    name = os.path.basename(os.path.normpath(path))
    if not policy:
        return name
    precision = (f"AMP ({policy.removeprefix('mixed_')})" if policy.startswith("mixed_")
                 else "FP32")
    return f"{precision}{' + XLA' if params.get('xla') else ''} ({name})"


def group(rows, by: str) -> dict[tuple[str, str], float]:
    """(op type or name, where) -> ms per step."""
    key = "op_type" if by == "type" else "op_name"
    out: dict[tuple[str, str], float] = {}
    for r in rows:
        k = (r[key], r["where"])
        out[k] = out.get(k, 0.0) + r["ms_per_step"]
    return out


def diff(a_rows, b_rows, by: str = "type") -> list[dict]:
    """A row per op (type or name) in either run: ms per step in A and B, B - A and B / A,
    largest B - A first."""
    a, b = group(a_rows, by), group(b_rows, by)
    out = []
    for k in set(a) | set(b):
        ta, tb = a.get(k, 0.0), b.get(k, 0.0)
        out.append({"op": k[0], "where": k[1], "a_ms": ta, "b_ms": tb, "delta_ms": tb - ta,
                    "ratio": tb / ta if ta else None})
    return sorted(out, key=lambda r: (-r["delta_ms"], r["op"]))


def render(label_a: str, label_b: str, rows, top: int = 20, notes=()) -> str:
    total_a, total_b = sum(r["a_ms"] for r in rows), sum(r["b_ms"] for r in rows)
    lines = [f"A: {label_a}", f"B: {label_b}", *notes, "",
             "| op | where | A ms/step | B ms/step | B / A | B - A ms |",
             "|---|---|---:|---:|---:|---:|"]
    shown = rows if len(rows) <= top else rows[:top // 2] + rows[-(top - top // 2):]
    for r in shown:
        if len(rows) > top and r is rows[top // 2]:
            lines.append(f"| ... {len(rows) - top} more | | | | | |")
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else "new"
        lines.append(f"| {r['op']} | {r['where']} | {r['a_ms']:.2f} | {r['b_ms']:.2f} | {ratio} | "
                     f"{r['delta_ms']:+.2f} |")
    ratio = f"{total_b / total_a:.2f}x" if total_a else "-"
    lines.append(f"| **all ops** | | {total_a:.2f} | {total_b:.2f} | {ratio} | "
                 f"{total_b - total_a:+.2f} |")
    losers = [r for r in rows if r["delta_ms"] > 0][:3]
    gained = -sum(r["delta_ms"] for r in rows if r["delta_ms"] < 0)
    lines.append("")
    if losers:
        lost = sum(r["delta_ms"] for r in rows if r["delta_ms"] > 0)
        lines.append("B loses most in: " + "; ".join(
            f"{r['op']} ({r['delta_ms']:+.2f} ms/step, {r['delta_ms'] / lost:.0%} of the "
            f"{lost:.2f} ms B loses)" for r in losers))
    if gained:
        best = min(rows, key=lambda r: r["delta_ms"])
        lines.append(f"B gains {gained:.2f} ms/step, most in {best['op']} "
                     f"({best['delta_ms']:+.2f} ms/step)")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchtools.profile_diff",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("run_a", help="a run directory profiled with --profile, or its ops.csv")
    p.add_argument("run_b")
    p.add_argument("--by", choices=("type", "name"), default="type",
                   help="line the ops up by type (default) or by name (layer by layer)")
    p.add_argument("--top", type=int, default=20, help="rows shown (the most lost and won)")
    args = p.parse_args(argv)
    return reported("profile_diff", lambda: _show(args), {DiffError: 2, OSError: 2})


def _show(args) -> int:
    if args.top < 1:
        raise DiffError(f"--top {args.top}: show at least one row")
    (label_a, a, pa), (label_b, b, pb) = load(args.run_a), load(args.run_b)
    notes = []
    if pa and pb and pa.get("model") != pb.get("model"):
        notes.append(f"note: the runs are of different models ({pa.get('model')} and "
                     f"{pb.get('model')}): only op types compare, not times")
    if pa and pb and pa.get("batch_size") != pb.get("batch_size"):
        notes.append(f"note: batch sizes differ ({pa.get('batch_size')} and "
                     f"{pb.get('batch_size')}): times per step do not compare op for op")
    print(render(label_a, label_b, diff(a, b, args.by), args.top, notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
