"""Where a CPU step's kernel time goes inside oneDNN: one ``main.py`` command run with
``ONEDNN_VERBOSE=1``, its primitives summed by kind and direction, with GFLOP/s for the
convolutions, matmuls and inner products.

    python -m benchtools.onednn -- resnet50v1.5/main.py --mode training_benchmark \
        --batch_size 16 --iter_unit batch --num_iter 5 --warmup_steps 2 --amp

TensorFlow's profiler names a whole op (``_MklNativeConv2DBackpropFilter``); oneDNN's verbose
log says which kernel ran inside it (``jit_bf16:avx512_core_bf16``, ``brg_conv_fwd:...``), on
which problem, how long it took, and which weight reorders came with it. That is what tells
whether a precision loses in the convolutions themselves or around them.

A step is taken to start at each execution of the run's first primitive (for ResNet and SSD
the stem convolution; a model whose first primitive repeats within a step, such as a
Transformer-XL matmul, gets shorter "steps" and ``--skip_steps`` then skips less than it says).
The first ``--skip_steps`` are left out: they pay for page faults and cold caches. The command
runs one op at a time (``TF_NUM_INTEROP_THREADS=1``) so that no two primitives' times overlap;
that and the printing make it slower than a benchmark run, so its times are for shares and
GFLOP/s, not throughput.
``--log FILE`` summarises a log written before (``ONEDNN_VERBOSE=1 python ... > FILE``).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

from benchtools import failure

_DIMS = re.compile(r"([a-z]+)(\d+)")


def conv_flops(desc: str) -> int:
    """2 x multiply-adds of a convolution problem ``mb16_ic64oc256_ih56oh56kh1sh1dh0ph0_iw56...``
    (oneDNN leaves out the w and d dimensions that equal the h ones, and ``g`` when 1)."""
    d = {k: int(v) for k, v in _DIMS.findall(desc)}
    spatial_out = d["oh"] * d.get("ow", d["oh"]) * d.get("od", 1)
    kernel = d["kh"] * d.get("kw", d["kh"]) * d.get("kd", 1)
    return 2 * d["mb"] * d["oc"] * (d["ic"] // d.get("g", 1)) * spatial_out * kernel


def matmul_flops(desc: str) -> int:
    """2 x multiply-adds of ``[batch x]M x K:[batch x]K x N[:...]`` (src:weights[:dst])."""
    src, wei = (list(map(int, part.split("x"))) for part in desc.split(":")[:2])
    batch = 1
    for n in src[:-2]:
        batch *= n
    return 2 * batch * src[-2] * src[-1] * wei[-1]


def inner_product_flops(desc: str) -> int:
    d = {k: int(v) for k, v in _DIMS.findall(desc)}
    spatial = d.get("ih", 1) * d.get("iw", d.get("ih", 1)) * d.get("id", 1)
    return 2 * d["mb"] * d["ic"] * d["oc"] * spatial


_FLOPS = {"convolution": conv_flops, "deconvolution": conv_flops, "matmul": matmul_flops,
          "inner_product": inner_product_flops}


def _flops(record: dict) -> int | None:
    """The record's FLOPs, or None for kinds without a count and problems in a format these
    parsers do not know (their GFLOP/s is left blank rather than guessed)."""
    count = _FLOPS.get(record["kind"])
    try:
        return None if count is None else count(record["desc"])
    except (KeyError, ValueError, IndexError):
        return None


def executions(lines) -> list[dict]:
    """The ``exec`` records of a verbose log: kind, implementation, direction, problem, ms.
    Anchored on the ``exec`` field, so that both oneDNN 2's and 3's layouts parse."""
    out = []
    for line in lines:
        if not line.startswith(("onednn_verbose", "dnnl_verbose")):
            continue
        f = line.rstrip("\n").split(",")
        if "exec" not in f[:5]:
            continue
        i = f.index("exec")
        try:
            ms = float(f[-1])
        except ValueError:
            continue
        out.append({"kind": f[i + 2], "impl": f[i + 3], "prop": f[i + 4], "mds": f[i + 5],
                    "desc": f[-2], "ms": ms})
    return out


def skip_steps(records: list[dict], steps: int) -> tuple[list[dict], int]:
    """(records after the first ``steps`` steps, steps counted in all). A step starts at each
    execution of the first record's primitive (same kind, kernel, direction, memory formats and
    problem: a weight reorder for the forward and one for the backward differ in format)."""
    if not records:
        return records, 0

    def key(r):
        return tuple(r[k] for k in ("kind", "impl", "prop", "mds", "desc"))
    starts = [i for i, r in enumerate(records) if key(r) == key(records[0])]
    if steps >= len(starts):
        raise ValueError(f"the log has {len(starts)} steps; cannot skip {steps}")
    return records[starts[steps]:], len(starts)


def summarise(records: list[dict]) -> dict:
    """Totals by (kind, direction) and by (kind, direction, problem, implementation): count,
    ms, share of all primitives' time, GFLOP/s where the kind's FLOPs are known."""
    total = sum(r["ms"] for r in records) or 1.0
    flops = [_flops(r) for r in records]  # parsed once for both groupings

    def group(key):
        acc = collections.OrderedDict()
        for r, flop in zip(records, flops):
            k = key(r)
            a = acc.setdefault(k, {"count": 0, "ms": 0.0, "flop": 0})
            a["count"] += 1
            a["ms"] += r["ms"]
            a["flop"] = None if flop is None or a["flop"] is None else a["flop"] + flop
        rows = []
        for k, a in sorted(acc.items(), key=lambda kv: -kv[1]["ms"]):
            rows.append({**dict(zip(("kind", "prop", "desc", "impl"), k)), "count": a["count"],
                         "ms": round(a["ms"], 3), "share": a["ms"] / total,
                         "gflops": (a["flop"] / a["ms"] / 1e6 if a["flop"] and a["ms"] else None)})
        return rows

    return {"total_ms": round(total, 3),
            "by_direction": group(lambda r: (r["kind"], r["prop"])),
            "by_problem": group(lambda r: (r["kind"], r["prop"], r["desc"], r["impl"]))}


def _gf(row):
    return "" if row["gflops"] is None else f"{row['gflops']:.0f}"


def markdown(summary: dict, top: int) -> str:
    lines = ["| primitive | direction | executions | ms | share | GFLOP/s |",
             "|---|---|---|---|---|---|"]
    for r in summary["by_direction"]:
        lines.append(f"| {r['kind']} | {r['prop']} | {r['count']} | {r['ms']:.0f} | "
                     f"{r['share']:.1%} | {_gf(r)} |")
    lines += ["", f"Top {top} problems:", "",
              "| primitive | direction | problem | implementation | executions | ms | share "
              "| GFLOP/s |",
              "|---|---|---|---|---|---|---|---|"]
    for r in summary["by_problem"][:top]:
        lines.append(f"| {r['kind']} | {r['prop']} | `{r['desc']}` | {r['impl']} | {r['count']} | "
                     f"{r['ms']:.0f} | {r['share']:.1%} | {_gf(r)} |")
    return "\n".join(lines)


def run_verbose(command: list[str], log_path: str) -> None:
    """``python COMMAND`` with ``ONEDNN_VERBOSE=1``, its stdout (where oneDNN prints) into
    ``log_path``; a failing command ends this script with its last line. One TensorFlow op at a
    time (``TF_NUM_INTEROP_THREADS=1``): two primitives running side by side would each time
    the other's work too."""
    env = dict(os.environ, ONEDNN_VERBOSE="1", TF_NUM_INTEROP_THREADS="1")
    with open(log_path, "w") as out:
        proc = subprocess.run([sys.executable, *command], env=env, stdout=out,
                              stderr=subprocess.PIPE, text=True)
    if proc.returncode:
        raise SystemExit(f"{command[0]} failed: {failure(proc)}")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = []
    if "--" in argv:
        i = argv.index("--")
        argv, command = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--log", default=None, help="summarise this verbose log instead of running")
    p.add_argument("--keep_log", default=None, help="also keep the run's verbose log here")
    p.add_argument("--skip_steps", type=int, default=1)
    p.add_argument("--top", type=int, default=20)
    p.add_argument("--json", default=None, help="also write the summary here")
    args = p.parse_args(argv)
    if (args.log is None) == (not command):
        p.error("give either --log FILE or -- MAIN_PY ARGS")
    if args.skip_steps < 0 or args.top < 1:
        p.error("--skip_steps must be >= 0 and --top >= 1")
    log = args.log
    if log is None:
        log = args.keep_log or os.path.join(tempfile.mkdtemp(prefix="onednn"), "verbose.log")
        run_verbose(command, log)
    with open(log, errors="replace") as f:
        records = executions(f)
    if not records:
        raise SystemExit(f"{log}: no oneDNN executions (is TF_ENABLE_ONEDNN_OPTS=0 set, or not "
                         "an x86 CPU?)")
    try:
        kept, steps = skip_steps(records, args.skip_steps)
    except ValueError as e:
        raise SystemExit(f"{log}: {e}") from None
    summary = summarise(kept)
    summary.update(steps=steps, skipped_steps=args.skip_steps, command=command or None, log=log)
    print(f"oneDNN primitives of {' '.join(command) or log}: steps {args.skip_steps + 1}-{steps} "
          f"of {steps}, {summary['total_ms']:.0f} ms of primitive time\n")
    print(markdown(summary, args.top))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
