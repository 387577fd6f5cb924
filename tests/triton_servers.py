"""Exports and a real Triton server for the serving tests: a model set up and exported with its
Triton repositories, ``scripts/triton_env.sh``'s environment (tritonclient, PyTriton's
``tritonserver``), the server started on exported repositories the documented way
(``serving/tritonserver.py``, Triton's default flags), and a gRPC client run in that
environment that sends a sequence model's requests."""
import json
import os
import subprocess
import time

import pytest
from conftest import ROOT

from common import runner
from serving.connection import free_ports

NO_RUN = ["--mode", "inference_benchmark", "--iter_unit", "batch", "--num_iter", "2",
          "--warmup_steps", "1", "--seed", "3"]


def export_model(task_cls, tmp, args, weights=None, triton=True):
    """(trainer, export dir, Triton repositories) of a model set up from ``args`` (untrained;
    ``weights(trainer)`` changes them before the export); with ``triton`` the repositories
    (the image models' ONNX with them)."""
    out, repo = tmp / "export", tmp / "triton"
    trainer = runner.setup(task_cls, ["main.py", *args, *NO_RUN, "--results_dir", str(tmp),
                                      "--export_dir", str(out),
                                      *(["--export_triton", str(repo)] if triton else [])])
    if weights:
        weights(trainer)
    trainer.export(str(out))
    trainer.log.close()
    return trainer, out, repo


# The server and Triton's protobuf run in scripts/triton_env.sh's environment, the same for
# both stacks.
TRITON_ENV = pytest.mark.one_stack(
    "pip", "Triton's server and protobuf run in scripts/triton_env.sh's environment, the same "
    "for both stacks")


def triton_env_python() -> str:
    """scripts/triton_env.sh's python (tritonclient, PyTriton; made at first use)."""
    proc = subprocess.run(["bash", os.path.join(ROOT, "scripts", "triton_env.sh")],
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip().splitlines()[-1]


def stop(proc, log):
    """A test server stopped (SIGTERM, then SIGKILL after a minute) and its log closed."""
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


class Repositories:
    """The ``tritonserver`` binary nvidia-pytriton ships (Python backend only), started on
    exported repositories as written by the documented command (serving/tritonserver.py, with
    Triton's default flags: a model that cannot load stops the server), until closed;
    ``python`` runs the Python models where given (TRITONSERVER_PYTHON)."""

    def __init__(self, server_python, repos, tmp, python=None):
        self.http, self.grpc, self.metrics = free_ports(3)
        self.log_path = tmp / f"tritonserver-{self.http}.log"
        self.log = open(self.log_path, "w")
        env = {**os.environ, **({"TRITONSERVER_PYTHON": python} if python else {})}
        self.command = [server_python, "-m", "serving.tritonserver",
                        *(f"--model-repository={r}" for r in repos), f"--http-port={self.http}",
                        f"--grpc-port={self.grpc}", f"--metrics-port={self.metrics}"]
        self.proc = subprocess.Popen(self.command, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=env, cwd=ROOT)
        deadline = time.time() + 300
        while self.health("ready") != 200:  # strict readiness: every model loaded
            assert self.proc.poll() is None, self.log_path.read_text()[-4000:]
            assert time.time() < deadline, "tritonserver was not ready in 300 s"
            time.sleep(0.5)

    def health(self, what: str) -> int | None:
        """``/v2/health/<what>``'s HTTP status (None: not listening yet)."""
        import urllib.error
        import urllib.request
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/v2/health/{what}",
                                        timeout=10) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            return None

    def metric(self, name: str, model: str) -> float:
        """A counter of Triton's metrics endpoint for ``model`` (its versions summed):
        ``nv_inference_request_success``, ``nv_inference_exec_count`` (batches run)..."""
        import urllib.request
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics}/metrics", timeout=30) as r:
            lines = r.read().decode().splitlines()
        return sum(float(line.rsplit(" ", 1)[1]) for line in lines
                   if line.startswith(name + "{") and f'model="{model}"' in line)

    def index(self) -> dict:
        import urllib.request
        req = urllib.request.Request(f"http://127.0.0.1:{self.http}/v2/repository/index",
                                     data=b"{}", method="POST")
        with urllib.request.urlopen(req, timeout=30) as r:
            return {m["name"]: m for m in json.load(r)}

    def close(self):
        stop(self.proc, self.log)


SEQUENCES = """
import json, sys, threading
import numpy as np
import tritonclient.grpc as grpc
url, rounds = sys.argv[1], json.loads(sys.argv[2])


def send(step, out, i, barrier):
    seq, tokens, targets, start, end = step
    client = grpc.InferenceServerClient(url)
    inputs = []
    for name, values in (("tokens", tokens), ("targets", targets)):
        if values is not None:
            data = np.asarray(values, np.int32).reshape(1, -1)
            t = grpc.InferInput(name, list(data.shape), "INT32")
            t.set_data_from_numpy(data)
            inputs.append(t)
    barrier.wait()
    try:
        r = client.infer("transformerxl", inputs, sequence_id=seq, sequence_start=start,
                         sequence_end=end)
        out[i] = {k: r.as_numpy(k)[0].tolist() for k in ("log_probs", "nll")
                  if r.as_numpy(k) is not None}
    except Exception as e:
        out[i] = {"error": str(e).splitlines()[0]}


results = []
for steps in rounds:  # the rounds in order; a round's requests sent at once
    out = [None] * len(steps)
    barrier = threading.Barrier(len(steps))
    threads = [threading.Thread(target=send, args=(s, out, i, barrier))
               for i, s in enumerate(steps)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results.append(out)
print(json.dumps(results))
"""


def sequence_rounds(python, server, rounds):
    """Each round's requests ``[sequence id, tokens, targets or None, start, end]`` sent at
    once (a thread and a client each), the rounds one after the other: each request's answer
    (``log_probs`` or ``nll``, or ``error``: the server's line), by round."""
    proc = subprocess.run([python, "-c", SEQUENCES, f"localhost:{server.grpc}",
                           json.dumps(rounds)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def sequence_steps(python, server, steps):
    """The requests one after the other, in this order (sequences interleaved)."""
    return [r for (r,) in sequence_rounds(python, server, [[s] for s in steps])]


def sequence_log_probs(python, server, seq, segments):
    """The served log-probabilities after each segment of one new sequence."""
    steps = [[seq, s, None, n == 0, n == len(segments) - 1] for n, s in enumerate(segments)]
    return sequence_steps(python, server, steps)
