"""Serving figures of an ``--export_triton`` repository: throughput and p50/p90/p95/p99 latency
of one served model over concurrency 1..N, with and without dynamic batching and with 1..k
instances of its models (and other queue delays: ``--batching on,off,0,500``), as NVIDIA's
deployment READMEs give them (perf_analyzer's
concurrency mode). perf_analyzer ships only in Triton's SDK container (its pip package is an
empty placeholder), so this is a load generator of this repository through tritonclient: each
of N clients keeps one request outstanding (sends the next when the last is answered) for
``--seconds`` after ``--warmup_s``, and the latency is the client's, from the request sent to
its answer read, as perf_analyzer's "client" latency. With ``--url`` it measures a server
already running (a container's) as it serves the model.

    TRITON_PY=$(bash scripts/triton_env.sh)
    $TRITON_PY -m serving.load --repository /results/triton/cpu --model resnet50 \\
        --image cat.jpg --concurrency 1,2,4,8 --instances 1,2 --out results/serving-resnet50

For each setting (instances, batching) the repository is copied (hard links) with its models'
``instance_group`` count and ``dynamic_batching`` changed, and the server started on the copy
with Triton's default flags (serving/tritonserver.py: PyTriton's ``tritonserver``, or
``--server tritonserver`` for a container's). An image model gets ``--batch_size`` copies of
``--image`` a request; Transformer-XL's sequence model, one sequence per client, segments of
``--tokens`` token ids (the memory kept in the server: the steady state after the first
``mem_len`` tokens), its figures in tokens/s. Without batching, the sequence model runs one
sequence's request at a time (``max_batch_size`` 1). Writes ``serving.json`` (every
measurement, the machine, the server's resident memory) and ``serving.md`` (the table) in
``--out``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import numpy as np

from serving.connection import (
    connect,
    error_line,
    free_ports,
    infer_input,
    model_config,
    positive,
)

PROG = "load.py"
HERE = os.path.dirname(os.path.abspath(__file__))
PERCENTILES = (50, 90, 95, 99)


def _configs(repo: str):
    """(model name -> its parsed ModelConfig) of a repository (tritonclient's proto)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2
    out = {}
    for name in sorted(os.listdir(repo)):
        path = os.path.join(repo, name, "config.pbtxt")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as fh:
                out[name] = text_format.Parse(fh.read(), model_config_pb2.ModelConfig())
    return out


def _models_of(configs: dict, model: str) -> list[str]:
    """``model`` and, for an ensemble, the models its steps run."""
    c = configs[model]
    steps = [s.model_name for s in c.ensemble_scheduling.step]
    return [model, *[m for s in steps for m in _models_of(configs, s)]]


def variant(repo: str, model: str, instances: int, batching: int | None, out: str) -> None:
    """A copy of ``repo`` at ``out`` (hard links; configs rewritten) with ``model``'s models at
    ``instances`` instances each, without dynamic batching (``batching`` None) or with it, its
    queue delay ``batching`` microseconds (-1: as the repository has it)."""
    from google.protobuf import text_format
    shutil.copytree(repo, out, copy_function=os.link)
    configs = _configs(repo)
    for name in _models_of(configs, model):
        c = configs[name]
        if c.platform == "ensemble":
            continue
        for group in c.instance_group:
            group.count = instances
        if c.HasField("sequence_batching"):
            if batching is None:
                c.max_batch_size = 1
            elif batching >= 0:
                c.sequence_batching.oldest.max_queue_delay_microseconds = batching
        elif batching is None:
            c.ClearField("dynamic_batching")
        elif batching >= 0 and c.HasField("dynamic_batching"):
            c.dynamic_batching.max_queue_delay_microseconds = batching
        path = os.path.join(out, name, "config.pbtxt")
        os.unlink(path)  # a hard link to the original: write a file of its own
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text_format.MessageToString(c))


class Server:
    """A tritonserver on a repository with its default flags, until ``close``."""

    def __init__(self, repo: str, server: list[str], log_path: str, timeout: float = 600):
        self.http, self.grpc, metrics = free_ports(3)
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [*server, f"--model-repository={repo}", f"--http-port={self.http}",
             f"--grpc-port={self.grpc}", f"--metrics-port={metrics}"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.proc.poll() is not None:
                raise RuntimeError(f"tritonserver stopped (exit code {self.proc.returncode}): "
                                   f"see {log_path}")
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"tritonserver was not ready in {timeout:g} s: see {log_path}")
            time.sleep(0.5)

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/v2/health/ready",
                                        timeout=5) as r:
                return r.status == 200
        except OSError:
            return False

    def resident_mib(self) -> float:
        """The resident memory of the server and its backend processes (the Python models'
        stubs), in MiB."""
        total, pids = 0, [self.proc.pid]
        children = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as fh:
                        ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
                    children.setdefault(ppid, []).append(int(entry))
                except (OSError, IndexError, ValueError):
                    pass
        while pids:
            pid = pids.pop()
            pids += children.get(pid, [])
            try:
                with open(f"/proc/{pid}/status") as fh:
                    total += next(int(ln.split()[1]) for ln in fh if ln.startswith("VmRSS:"))
            except (OSError, StopIteration):
                pass
        return total / 1024

    def close(self):
        import signal
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        except ProcessLookupError:
            pass
        self.log.close()


def _worker(url: str, model: str, kind: dict, stop_at: float, count_from: float, seq_id: int,
            latencies: list, errors: list):
    """One client: a request outstanding until ``stop_at``; latencies of those sent after
    ``count_from`` (seconds) kept."""
    import tritonclient.grpc as client
    server = client.InferenceServerClient(url)
    first = True
    try:
        while True:
            now = time.monotonic()
            if now >= stop_at:
                break
            if "image" in kind:
                images = np.array([[kind["image"]]] * kind["rows"], dtype=object)
                r = server.infer(model, [infer_input(client, "images", images, "BYTES")])
                valid = r.as_numpy("valid")
                if valid is not None and not valid.all():  # the ensemble answered on zeros
                    raise ValueError("the model could not decode --image (valid is False): "
                                     "give an image it decodes (a JPEG or PNG)")
            else:
                tokens = np.asarray([kind["tokens"]], np.int32)
                server.infer(model, [infer_input(client, "tokens", tokens, "INT32")],
                             sequence_id=seq_id, sequence_start=first)
                first = False
            done = time.monotonic()
            if now >= count_from:
                latencies.append((now, done))
        if "tokens" in kind and not first:  # the sequence ended: the server lets it go
            last = np.asarray([kind["tokens"][:1]], np.int32)
            server.infer(model, [infer_input(client, "tokens", last, "INT32")],
                         sequence_id=seq_id, sequence_end=True)
    except Exception as e:  # noqa: BLE001  (the server's answer, said in the table's notes)
        errors.append(str(e).splitlines()[0][:200])
    finally:
        server.close()


def measure(url: str, model: str, kind: dict, concurrency: int, seconds: float,
            warmup_s: float) -> dict:
    """Throughput (rows a second) and latency percentiles (ms) at ``concurrency``."""
    start = time.monotonic()
    count_from, stop_at = start + warmup_s, start + warmup_s + seconds
    latencies: list[list] = [[] for _ in range(concurrency)]
    errors: list[str] = []
    threads = [threading.Thread(target=_worker, args=(url, model, kind, stop_at, count_from,
                                                      1000 + n, latencies[n], errors))
               for n in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done = [(s, e) for each in latencies for s, e in each]
    if errors or not done:
        return {"concurrency": concurrency, "error": errors[0] if errors else "no request "
                "was answered in the window"}
    window = max(e for _, e in done) - min(s for s, _ in done)
    ms = np.array([(e - s) * 1000 for s, e in done])
    return {"concurrency": concurrency, "requests": len(done),
            "throughput": len(done) * kind["rows"] / window,
            **{f"p{p}_ms": float(np.percentile(ms, p)) for p in PERCENTILES}}


def _served_config(url: str, model: str) -> dict:
    """The model's config as the server at ``url`` (gRPC) serves it."""
    try:
        _, server = connect(url, "grpc", "serving.load")
        return model_config(server, model, "grpc")
    except Exception as e:  # noqa: BLE001  (CommandError, tritonclient's errors)
        raise SystemExit(f"{PROG}: error: {model} at {url}: {error_line(e)}") from None


def run(args) -> list[dict]:
    os.makedirs(args.out, exist_ok=True)
    if args.url:  # a server already running, measured as it serves
        sequence = "sequence_batching" in _served_config(args.url, args.model)
    else:
        configs = _configs(args.repository)
        if args.model not in configs:
            raise SystemExit(f"{PROG}: error: {args.repository} has no model {args.model} "
                             f"(it has {', '.join(configs)})")
        sequence = configs[args.model].HasField("sequence_batching")
    if sequence:
        params = _served_config(args.url, args.model).get("parameters", {}) if args.url else \
            {k: {"string_value": v.string_value}
             for k, v in configs[args.model].parameters.items()}
        longest = params.get("max_segment", {}).get("string_value")
        if longest and args.tokens > int(longest):
            raise SystemExit(f"{PROG}: error: --tokens {args.tokens} is longer than "
                             f"{args.model} takes ({longest} tokens a request, max_segment in "
                             "its config)")
        kind = {"tokens": list(np.random.RandomState(0).randint(0, 2, args.tokens)),
                "rows": args.tokens, "unit": "tokens/s"}
    else:
        if not args.image:
            raise SystemExit(f"{PROG}: error: an image model: give --image (a JPEG)")
        with open(args.image, "rb") as fh:
            kind = {"image": fh.read(), "rows": args.batch_size, "unit": "images/s"}
    server = args.server.split() if args.server else [
        sys.executable, os.path.join(HERE, "tritonserver.py")]
    results = []
    if args.url:
        for c in args.concurrency:
            r = measure(args.url, args.model, kind, c, args.seconds, args.warmup_s)
            r.update(instances=None, batching=-1, resident_mib=None)
            results.append(r)
            print(f"as served, concurrency {c}: " + (r["error"] if "error" in r else
                  f"{r['throughput']:.1f} {kind['unit']}, p50 {r['p50_ms']:.1f} ms"), flush=True)
    for instances in [] if args.url else args.instances:
        for batching in args.batching:
            with tempfile.TemporaryDirectory(dir=args.out) as tmp:
                repo = os.path.join(tmp, "repository")
                variant(args.repository, args.model, instances, batching, repo)
                label = f"instances {instances}, batching {_batching(batching)}"
                try:
                    srv = Server(repo, server, os.path.join(args.out, "tritonserver.log"))
                except (RuntimeError, OSError) as e:
                    raise SystemExit(f"{PROG}: error: {label}: {e}") from None
                try:
                    for c in args.concurrency:
                        r = measure(f"127.0.0.1:{srv.grpc}", args.model, kind, c,
                                    args.seconds, args.warmup_s)
                        r.update(instances=instances, batching=batching,
                                 resident_mib=srv.resident_mib())
                        results.append(r)
                        print(f"{label}, concurrency {c}: " + (
                            r["error"] if "error" in r else
                            f"{r['throughput']:.1f} {kind['unit']}, p50 {r['p50_ms']:.1f} ms, "
                            f"p99 {r['p99_ms']:.1f} ms"), flush=True)
                finally:
                    srv.close()
    machine = _machine()
    with open(os.path.join(args.out, "serving.json"), "w") as fh:
        json.dump({"model": args.model, "repository": args.repository, "machine": machine,
                   "unit": kind["unit"], "rows_per_request": kind["rows"],
                   "seconds": args.seconds, "results": results}, fh, indent=1)
    with open(os.path.join(args.out, "serving.md"), "w") as fh:
        fh.write(table(args.model, kind, machine, results))
    return results


def table(model: str, kind: dict, machine: str, results: list[dict]) -> str:
    per = "segment" if "tokens" in kind else "request"
    lines = [f"`{model}` on {machine}; {kind['rows']} {kind['unit'].split('/')[0]} a {per}, "
             "closed loop (each client one request outstanding), client-side latency.", "",
             f"| instances | dynamic batching | concurrency | {kind['unit']} | p50 ms | p90 ms "
             "| p95 ms | p99 ms | server memory MiB |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['instances']} | {_batching(r['batching'])} | "
                         f"{r['concurrency']} | error: {r['error']} | | | | | |")
            continue
        memory = "" if r["resident_mib"] is None else f"{r['resident_mib']:.0f}"
        lines.append(f"| {r['instances'] or 'as served'} | {_batching(r['batching'])} | "
                     f"{r['concurrency']} | {r['throughput']:.1f} | "
                     + " | ".join(f"{r[f'p{p}_ms']:.1f}" for p in PERCENTILES)
                     + f" | {memory} |")
    return "\n".join(lines) + "\n"


def _machine() -> str:
    """The CPU's model name, its core count and its bfloat16 support (or the platform)."""
    name, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name") and name in ("", platform.machine()):
                    name = line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    bf16 = ", AMX" if "amx_bf16" in flags else ", AVX512-BF16" if "avx512_bf16" in flags else \
        ", AVX-512" if "avx512f" in flags else ""
    return f"{name} ({os.cpu_count()} vCPUs{bf16})"


# The most clients one measurement starts: each is a thread with its own connection, and the
# sequence model keeps at most 256 sequences open (max_sequences in its config).
MAX_CONCURRENCY = 256


def _ints(text: str, most: int | None = None) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"give positive integers, comma-separated: {text}")
    if most is not None and max(values) > most:
        raise argparse.ArgumentTypeError(f"at most {most} (each a client thread with its own "
                                         f"connection): {text}")
    return values


def _seconds(text: str, strict: bool = True) -> float:
    """A finite number of seconds, above 0 (``strict``) or at least 0: NaN or infinity would
    never end a window, a negative one measure nothing."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (strict and value == 0):
        raise argparse.ArgumentTypeError(f"give a finite number of seconds "
                                         f"{'above 0' if strict else '0 or more'}: {text}")
    return value


def _batching(value: int | None) -> str:
    return "off" if value is None else "as shipped" if value < 0 else f"{value} µs delay"


def _switches(text: str) -> list[int | None]:
    """``off`` (None), ``on`` (-1: the repository's own setting) or a queue delay in µs."""
    out = []
    for v in text.split(","):
        if v in ("on", "off"):
            out.append(-1 if v == "on" else None)
        elif v.isdigit():
            out.append(int(v))
        else:
            raise argparse.ArgumentTypeError(f"give on, off or queue delays in microseconds, "
                                             f"comma-separated: {text}")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--repository", help="an --export_triton repository (DIR/cpu for "
                       "PyTriton's tritonserver): a server started on each setting of it")
    where.add_argument("--url", help="HOST:GRPC_PORT of a server already running: the model "
                       "measured as it is served (--instances and --batching do not apply)")
    p.add_argument("--model", required=True, help="the served model to load (an ensemble "
                   "brings its steps)")
    p.add_argument("--image", help="an image model: the JPEG each request sends")
    p.add_argument("--batch_size", type=positive, default=1, help="images a request")
    p.add_argument("--tokens", type=positive, default=64,
                   help="Transformer-XL: tokens a segment")
    p.add_argument("--concurrency", type=lambda t: _ints(t, MAX_CONCURRENCY), default=[1, 2, 4],
                   help=f"clients, each with one request outstanding (at most "
                        f"{MAX_CONCURRENCY}); comma-separated")
    p.add_argument("--instances", type=_ints, default=[1, 2])
    p.add_argument("--batching", type=_switches, default=[-1, None], help="dynamic batching: "
                   "on (as the repository has it), off, or its queue delay in microseconds; "
                   "comma-separated (default on,off)")
    p.add_argument("--seconds", type=_seconds, default=10.0)
    p.add_argument("--warmup_s", type=lambda t: _seconds(t, strict=False), default=2.0)
    p.add_argument("--server", help="the server command (default: serving/tritonserver.py "
                   "with this Python)")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    # The files named are checked before any server starts.
    if args.image is not None and not os.path.isfile(args.image):
        p.error(f"--image {args.image}: " + ("a directory, not a JPEG" if os.path.isdir(
            args.image) else "no such file"))
    if args.image is not None and not os.access(args.image, os.R_OK):
        p.error(f"--image {args.image}: not readable")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        p.error(f"--out {args.out} is a file: give a directory (serving.md and serving.json "
                "are written there)")
    results = run(args)
    print(open(os.path.join(args.out, "serving.md")).read())
    if results and all("error" in r for r in results):
        print(f"{PROG}: error: no setting was answered (every row of "
              f"{os.path.join(args.out, 'serving.md')} is an error)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
