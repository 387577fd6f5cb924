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


def export_model(task_cls, tmp, args, weights=None, triton=True, export_args=()):
    """(trainer, export dir, Triton repositories) of a model set up from ``args`` (untrained;
    ``weights(trainer)`` changes them before the export); with ``triton`` the repositories
    (the image models' ONNX with them); ``export_args``: more export flags (--export_onnx)."""
    out, repo = tmp / "export", tmp / "triton"
    trainer = runner.setup(task_cls, ["main.py", *args, *NO_RUN, "--results_dir", str(tmp),
                                      "--export_dir", str(out), *export_args,
                                      *(["--export_triton", str(repo)] if triton else [])])
    if weights:
        weights(trainer)
    trainer.export(str(out))
    trainer.log.close()
    return trainer, out, repo


def shared_export(tmp_path_factory, task_cls, args, weights=None, export_args=()):
    """``export_model``'s (trainer, export dir, Triton repositories), the export written once
    for the whole run: the serving tests of four files use the same three exports, most of
    their fixtures' time. The first process of the run (a pytest-xdist worker) that asks
    writes it in the run's shared temporary folder while the others wait on its lock, and
    returns the trainer that wrote it; each other process sets up its own trainer from the same
    arguments and seed, which gives the weights the export holds (the tests compare the two),
    without exporting again. ``args`` name the
    data by its folder, which each process prepares alike from the same seed."""
    import fcntl
    import hashlib
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    data = args.index("--data_dir")
    key = hashlib.sha256(json.dumps([task_cls.__name__, *args[:data], *args[data + 2:],
                                     *export_args, weights and weights.__name__]
                                    ).encode()).hexdigest()[:16]
    root = shared / "shared-exports" / f"{task_cls.__name__}-{key}"
    root.mkdir(parents=True, exist_ok=True)
    with open(root.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (root / "written").exists():
            trainer, export, repo = export_model(task_cls, root, args, weights,
                                                 export_args=export_args)
            (root / "written").write_text("")
            return trainer, export, repo  # the trainer that wrote it
    here = tmp_path_factory.mktemp(f"{task_cls.__name__}-trainer")
    trainer = runner.setup(task_cls, ["main.py", *args, *NO_RUN, "--results_dir", str(here)])
    if weights:
        weights(trainer)
    trainer.log.close()
    return trainer, root / "export", root / "triton"


def signature(export, name):
    """The export's signature ``name``, loaded by TensorFlow."""
    import tensorflow as tf
    return tf.saved_model.load(str(export)).signatures[name]


def random_images(tmp_path, n, seed=3):
    """``n`` small JPEGs of random pixels (30+i by 40), their paths."""
    import numpy as np
    from PIL import Image
    rng = np.random.RandomState(seed)
    paths = []
    for i in range(n):
        path = tmp_path / f"good{i}.jpg"
        Image.fromarray((rng.rand(30 + i, 40, 3) * 255).astype(np.uint8)).save(path)
        paths.append(str(path))
    return paths


def ask(python, server, model, files, protocol, *args):
    """serving.image_client's stdout lines for ``files`` sent to ``model`` at ``server`` over
    ``protocol`` (it must exit 0)."""
    url = f"localhost:{server.http if protocol == 'http' else server.grpc}"
    proc = subprocess.run([python, "-m", "serving.image_client", "--model", model, "--url", url,
                           "--protocol", protocol, *args, *files],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.splitlines()


def assert_answers_as_saved(python, server, model, export, files, atol, network=False):
    """The one comparison of a served model with its export: ``model`` asked by the client
    (``--json``, two files a request) over HTTP and gRPC answers each of ``files``, in order,
    with the outputs the export's ``serving_default`` gives on their bytes (the network alone,
    ``network``: without ``valid``), within ``atol``; detections as detections (two scores
    1e-6 apart may swap places)."""
    import numpy as np
    import tensorflow as tf
    from conftest import same_detections
    encoded = tf.constant([open(p, "rb").read() for p in files])
    want = {k: v.numpy() for k, v in signature(export, "serving_default")(
        images=encoded).items()}
    if network:
        want.pop("valid")
    for protocol in ("http", "grpc"):
        got = [json.loads(line) for line in ask(python, server, model, files, protocol,
                                                "--json", "--batch_size", "2")]
        assert [g["file"] for g in got] == list(files)
        assert all(sorted(g) == sorted(["file", *want]) for g in got), (model, protocol)
        got = {k: np.stack([np.reshape(g[k], v.shape[1:]) for g in got]).astype(v.dtype)
               for k, v in want.items()}
        if "num_detections" in want:
            np.testing.assert_array_equal(got["num_detections"], want["num_detections"])
            assert want["num_detections"].min() > 0
            same_detections(got, want)
            continue
        for k, v in want.items():
            np.testing.assert_allclose(got[k], v, atol=atol, err_msg=f"{model} {protocol} {k}")


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


# Clients of the sequence model's limits (test_serving_sequence.py): 1,024 refused starts, then
# a new sequence timed; and requests kept in flight (two clients sending full segments).
FLOOD = """
import json, sys, threading, time
import numpy as np
import tritonclient.grpc as grpc
url, first, count, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
client = grpc.InferenceServerClient(url)


def tokens(ids):
    t = grpc.InferInput("tokens", [1, len(ids)], "INT32")
    t.set_data_from_numpy(np.asarray([ids], np.int32))
    return [t]


errors, done = [], threading.Semaphore(0)


def answered(result, error):
    errors.append(str(error).splitlines()[0] if error else None)
    done.release()


sent = time.monotonic()
for n in range(count):  # out of the vocabulary, or a start beyond the model's limit
    client.async_infer("transformerxl", tokens([vocab] if n % 2 else [1, 2]), answered,
                       sequence_id=first + n, sequence_start=True)
for _ in range(count):
    done.acquire()
refused_s = time.monotonic() - sent
out = {"refused_s": refused_s, "errors": sorted(set(map(str, errors)))}
try:
    client.infer("transformerxl", tokens([3]), sequence_id=2, sequence_end=True)
except Exception as e:
    out["end_error"] = str(e).splitlines()[0]
start = time.monotonic()
try:
    client.infer("transformerxl", tokens([1, 2]), sequence_id=first + count,
                 sequence_start=True, sequence_end=True, client_timeout=90)
except Exception as e:
    out["new_error"] = str(e).splitlines()[0]
out["new_s"] = time.monotonic() - start
print(json.dumps(out))
"""
BUSY = """
import sys, threading
import numpy as np
import tritonclient.grpc as grpc
url, length = sys.argv[1], int(sys.argv[2])


def loop(seq):
    client = grpc.InferenceServerClient(url)
    t = grpc.InferInput("tokens", [1, length], "INT32")
    t.set_data_from_numpy(np.ones([1, length], np.int32))
    while True:
        client.infer("transformerxl", [t], sequence_id=seq, sequence_start=True,
                     sequence_end=True)
        print(seq, flush=True)


for seq in (7001, 7002):
    threading.Thread(target=loop, args=(seq,), daemon=True).start()
threading.Event().wait()
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
