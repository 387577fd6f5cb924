"""The per-op table of a ``--profile`` trace: every TensorFlow op's self time, its share, the
types it read and wrote, and on a GPU whether it could use tensor cores and did.

The times come from xprof's own converters (``framework_op_stats`` and ``kernel_stats``, the
tables TensorBoard's Profile tab shows), so they are the profiler's figures, not a re-reading of
the trace: self time excludes the ops an op waits on. The types come from the graph the step
ran (``profiling.graph_dtypes``), which the trace does not hold. On a GPU, xprof marks an op
"TensorCore eligible" by its type and a kernel "uses TensorCore" by its name, but its name test
misses the cuDNN/cuBLAS kernels of Ampere and Hopper (``sm80_xmma_*``, ``sm90_*gmma*``); a
kernel counts here as a tensor-core kernel when either says so (``profiling.TENSOR_CORE``).
The row that matters is an eligible op whose kernels did not use tensor cores: its shapes or
types kept it off them (``missed_tensor_cores``).

Written next to the trace as ``ops.csv``; ``python -m benchtools.profile_diff`` lines two of
them up.
"""
from __future__ import annotations

import csv
import json
import math
import re

from common.runtime import quiet_start

FILE = "ops.csv"
COLUMNS = ("op_type", "op_name", "where", "occurrences", "self_us", "ms_per_step", "share",
           "dtype", "tensor_core_eligible", "tensor_core_share")

# What xprof's converters write on descriptor 2 while they work: progress, and notes about a
# trace without a GPU vendor or TPU core details. Not the run's business; a failed conversion
# is reported by its result.
_XPROF_NOTES = re.compile(
    r"^(?:[IWE]\d{4} [^\]]*|\d{4}-\d\d-\d\d [\d:.]+: [IWE] [^\]]*)(xplane_to_\w+|"
    r"unified_profile_processor_factory|hardware_type_utils|derived_timeline|"
    r"multi_xplanes_to_op_stats|base_op_stats_processor|xprof_thread_pool_executor|"
    r"op_stats_to_\w+|xplane_utils|\w+_processor)\.cc:\d+\] ")


def dtype_of(name: str, dtypes: dict[str, str]) -> str | None:
    """The node's type; a node inlined from a function has the call's name before its own."""
    parts = name.split("/")
    for i in range(len(parts)):
        found = dtypes.get("/".join(parts[i:]))
        if found:
            return found
    return None


def _tool(trace: str, tool: str) -> list[dict]:
    """xprof's ``tool`` table of ``trace`` as dicts by column id (the first table, all rows)."""
    from xprof.convert import raw_to_tool_data
    with quiet_start.filtered_stderr(extra=(_XPROF_NOTES,)):
        data, _ = raw_to_tool_data.xspace_to_tool_data([trace], tool, {})
    if not data:
        raise RuntimeError(f"xprof could not convert {trace} to {tool}")
    tables = json.loads(data)
    table = tables[0] if isinstance(tables, list) else tables
    ids = [c["id"] for c in table["cols"]]
    return [{k: (c or {}).get("v") for k, c in zip(ids, row["c"])} for row in table["rows"]]


def from_trace(trace: str, steps: int, dtypes: dict[str, str], tensor_core_kernel,
               host_op_us: float | None = None) -> list[dict]:
    """The table's rows, largest self time first, for a trace of ``steps`` steps.
    ``dtypes``: node name -> its types (``profiling.graph_dtypes``); ``tensor_core_kernel``:
    a kernel name -> bool test. xprof lists the 500 ops of most self time: given the trace's
    total host op time (``host_op_us``, a CPU run), the rest is one "(other ops)" row."""
    ops = [r for r in _tool(trace, "framework_op_stats") if r["type"] != "IDLE"]
    kernels: dict[str, list[float]] = {}  # op name -> [kernel time, tensor-core kernel time]
    eligible: set[str] = set()
    if any(r["host_or_device"] == "Device" for r in ops):
        for k in _tool(trace, "kernel_stats"):
            t = kernels.setdefault(k["op_name"], [0.0, 0.0])
            t[0] += k["total_duration_us"]
            if k["is_kernel_using_tensor_core"] or tensor_core_kernel(k["kernel_name"]):
                t[1] += k["total_duration_us"]
            if k["is_op_tensor_core_eligible"]:
                eligible.add(k["op_name"])
    total = {}
    for r in ops:
        total[r["host_or_device"]] = total.get(r["host_or_device"], 0.0) + r["total_self_time"]
    rows = []
    for r in ops:
        where, name, self_us = r["host_or_device"].lower(), r["operation"], r["total_self_time"]
        k = kernels.get(name)
        rows.append({
            "op_type": r["type"], "op_name": name, "where": where,
            "occurrences": int(r["occurrences"]), "self_us": round(self_us, 3),
            "ms_per_step": round(self_us / 1000 / max(steps, 1), 4),
            "share": round(self_us / total[r["host_or_device"]], 5)
            if total[r["host_or_device"]] else 0.0,
            "dtype": dtype_of(name, dtypes) or "",
            "tensor_core_eligible": ("yes" if name in eligible else "no") if k else "",
            "tensor_core_share": round(k[1] / k[0], 3) if k and k[0] else ""})
    rest = (host_op_us or 0.0) - total.get("Host", 0.0)
    if host_op_us and rest > 1e-3 * host_op_us:
        total["Host"] = host_op_us
        for r in rows:
            if r["where"] == "host":
                r["share"] = round(r["self_us"] / host_op_us, 5)
        rows.append({"op_type": "(other ops)", "op_name": "(past the 500 xprof lists)",
                     "where": "host", "occurrences": "", "self_us": round(rest, 3),
                     "ms_per_step": round(rest / 1000 / max(steps, 1), 4),
                     "share": round(rest / host_op_us, 5), "dtype": "",
                     "tensor_core_eligible": "", "tensor_core_share": ""})
    rows.sort(key=lambda r: -r["self_us"])
    return rows


def missed_tensor_cores(rows, top: int = 5) -> str:
    """The eligible ops that spent most kernel time off tensor cores, "name (ms/step)"."""
    missed = [r for r in rows if r["tensor_core_eligible"] == "yes"
              and r["tensor_core_share"] != "" and float(r["tensor_core_share"]) < 0.5]
    return ", ".join(f"{r['op_name']} ({float(r['ms_per_step']):.2f} ms/step)"
                     for r in missed[:top])


def write(rows, path: str) -> None:
    from common.files import write_atomically
    lines = [",".join(COLUMNS)]
    for r in rows:
        lines.append(",".join(_csv_field(r[c]) for c in COLUMNS))
    write_atomically(path, "\n".join(lines) + "\n")


def _csv_field(value) -> str:
    text = str(value)
    return f'"{text.replace(chr(34), chr(34) * 2)}"' if any(c in text for c in ',"\n') else text


def read(path: str) -> list[dict]:
    """The rows of an ``ops.csv``; ``ValueError`` naming the file (and the row) when it is not
    one, is cut short or holds a time that is not a number. A table cut at a row's end is
    found by its shares: each place's (host, device) add up to 1 in a whole table (to the
    rounding of 5 decimals a row), less once rows are missing."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not text: not an op table of --profile") from None
    except csv.Error as e:
        raise ValueError(f"{path}: {e}: not an op table of --profile") from None
    if not rows or set(COLUMNS) - set(rows[0]):
        raise ValueError(f"{path} is not an op table of --profile (columns {', '.join(COLUMNS)})")
    for n, r in enumerate(rows, 2):  # row 1 is the header
        for column in ("self_us", "ms_per_step"):
            r[column] = _amount(path, n, column, r[column])
    shares: dict[str, float] = {}
    for n, r in enumerate(rows, 2):
        share = _amount(path, n, "share", r["share"])
        if share > 1.0:
            raise ValueError(f"{path}, row {n}: share is {r['share']!r}, more than the whole "
                             "(a table edited?)")
        shares[r["where"]] = shares.get(r["where"], 0.0) + share
    for where, total in shares.items():
        rows_there = sum(r["where"] == where for r in rows)
        if total > 0 and abs(total - 1.0) > 1e-3 + 1e-5 * rows_there:
            raise ValueError(f"{path}: the {where} ops' shares add up to {total:.3f}, not 1: "
                             f"the table is cut short or edited ({len(rows)} row(s) left)")
    return rows


def _amount(path: str, row: int, column: str, text) -> float:
    """A time or a share: a finite number, 0 or more (NaN, an infinity or a negative one
    would print as a figure and add up to nonsense)."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        what = "missing" if text is None else f"{text!r}, not a number"
        raise ValueError(f"{path}, row {row}: {column} is {what} (a table cut short or "
                         "edited?)") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{path}, row {row}: {column} is {text!r}, not a finite amount of 0 "
                         "or more (a table edited?)")
    return value
