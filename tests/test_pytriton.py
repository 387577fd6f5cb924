"""An export's SavedModel served alone through PyTriton (``python -m serving.pytriton_server``,
a real Triton server binary): it answers the image client over HTTP and gRPC with the
SavedModel's outputs, stops with its server on SIGTERM, and refuses what it cannot serve with
one line."""


import json
import os
import subprocess
import time

import numpy as np
from conftest import ROOT
from triton_servers import (
    TRITON_ENV,
    ask,
    assert_answers_as_saved,
    stop,
)

from serving.connection import free_ports


class _Server:
    """serving/pytriton_server.py on an export, in the Triton environment, until closed."""

    def __init__(self, python, export, tmp, *args):
        self.http, self.grpc, metrics = free_ports(3)
        ready = tmp / f"ready-{self.http}"
        self.log = open(tmp / f"server-{self.http}.log", "w")
        self.proc = subprocess.Popen(
            [python, "-m", "serving.pytriton_server", "--export_dir",
             str(export), "--http_port", str(self.http), "--grpc_port", str(self.grpc),
             "--metrics_port", str(metrics), "--ready_file", str(ready), *args],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)
        deadline = time.time() + 180
        while not ready.exists():
            assert self.proc.poll() is None, (tmp / f"server-{self.http}.log").read_text()[-3000:]
            assert time.time() < deadline, "the Triton server did not start in 180 s"
            time.sleep(0.5)

    def close(self):
        """SIGTERM, as docker stop sends: the server and its tritonserver end (the tritonserver
        was left running)."""
        import psutil
        children = psutil.Process(self.proc.pid).children(recursive=True)
        stop(self.proc, self.log)
        gone, alive = psutil.wait_procs(children, timeout=60)
        assert not alive, [p.cmdline()[:2] for p in alive]


@TRITON_ENV
def test_a_triton_server_answers_the_client_with_the_savedmodels_outputs(
        exported_resnet, triton_python, tmp_path):
    """ResNet-50's SavedModel served alone answers JPEGs and a PNG of odd sizes, two a request,
    with its own outputs; with --labels, each file's top class is one of its names. (SSD320's
    answers through a real server are the repository server's, test_triton_server.py.)"""
    from PIL import Image
    rng = np.random.RandomState(2)
    files = []
    for n, (h, w) in enumerate([(40, 52), (33, 33), (70, 45)]):
        path = tmp_path / f"{n}.{'png' if n == 1 else 'jpg'}"
        Image.fromarray((rng.rand(h, w, 3) * 255).astype(np.uint8)).save(path)
        files.append(str(path))
    _, export, _ = exported_resnet
    server = _Server(triton_python, export, tmp_path)
    try:
        assert_answers_as_saved(triton_python, server, "resnet50_savedmodel", export, files,
                                atol=1e-5)
        labels = str(export / "assets" / "labels.txt")
        said = ask(triton_python, server, "resnet50_savedmodel", files, "grpc", "--labels",
                   labels)
        assert [s.split(":")[0] for s in said] == files
        names = open(labels).read().split()
        assert all(line.split(": ")[1].split()[0] in names for line in said)
    finally:
        server.close()


@TRITON_ENV
def test_serve_pytriton_refuses_a_directory_that_is_no_export(tmp_path, triton_python):
    proc = subprocess.run([triton_python, "-m", "serving.pytriton_server",
                           "--export_dir", str(tmp_path)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 1
    assert proc.stderr.strip() == (f"pytriton_server.py: error: {tmp_path} holds no export of "
                                   "this repository (no assets/client.json): give what "
                                   "--export_dir wrote")


@TRITON_ENV
def test_serve_pytriton_refuses_what_it_cannot_serve_with_one_line(
        exported_resnet, exported_txl, triton_python, tmp_path):
    import shutil
    import socket
    _, export, _ = exported_resnet

    def serve(directory, *args):
        ports = [str(p) for p in free_ports(3)]
        proc = subprocess.run([triton_python, "-m", "serving.pytriton_server",
                               "--export_dir", str(directory), "--http_port", ports[0],
                               "--grpc_port", ports[1], "--metrics_port", ports[2], *args],
                              capture_output=True, text=True, timeout=300, cwd=ROOT)
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert proc.returncode == 1 and lines and "Traceback" not in proc.stderr, proc.stderr
        return lines[-1].removeprefix("pytriton_server.py: error: ")

    def copy(name):
        return shutil.copytree(export, tmp_path / name)

    # Transformer-XL's memory would travel with each request (and an empty one gets HTTP 500
    # from PyTriton's serializer): the repository's sequence model serves it.
    assert serve(exported_txl[1]) == (
        f"{exported_txl[1]}: transformerxl carries a state from request to request, which PyTriton "
        "would send back and forth with each request: serve the repository's sequence model "
        "transformerxl instead (main.py --export_triton DIR; serving/tritonserver.py "
        "--model-repository=DIR/cpu)")
    no_pb = copy("no_pb")
    os.remove(no_pb / "saved_model.pb")
    assert serve(no_pb) == (f"{no_pb} has no saved_model.pb: the export is incomplete; export it "
                            "again (main.py --mode evaluate --export_dir ...)")
    cut_json = copy("cut_json")
    info = cut_json / "assets" / "client.json"
    info.write_text(info.read_text()[:40])
    assert serve(cut_json).startswith(f"{info} is damaged (JSONDecodeError")
    cut_vars = copy("cut_vars")
    (data,) = (cut_vars / "variables").glob("variables.data-*")
    data.write_bytes(data.read_bytes()[:100])
    assert serve(cut_vars).startswith(f"{cut_vars}: the SavedModel cannot be loaded (")
    assert serve(export, "--signature", "nope") == \
        "--signature nope: the export has preprocessed, serving_default"
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert serve(export, "--http_port", str(port)) == \
            f"--http_port {port} cannot be used (Address already in use): choose another"
    # What hung or was a traceback: one port for two services, no batch, a model name Triton
    # cannot take, a ready file nowhere, a client.json naming no model.
    port = str(free_ports(1)[0])
    assert serve(export, "--http_port", port, "--grpc_port", port) == \
        f"--grpc_port {port} is --http_port's too: give each its own port"
    assert serve(export, "--max_batch_size", "0") == (
        "--max_batch_size 0: at least 1 (the most requests batched into one call)")
    assert serve(export, "--model_name", "a/b") == (
        "--model_name 'a/b': letters, digits, _ . - only (a Triton model name is a directory "
        "name and a URL path segment)")
    nowhere = tmp_path / "no" / "such" / "ready"
    assert serve(export, "--ready_file", str(nowhere)) == (
        f"--ready_file {nowhere}: its folder {nowhere.parent} is not a writable directory")
    numbered = copy("numbered")
    info = numbered / "assets" / "client.json"
    described = json.loads(info.read_text())
    described["savedmodel_model"] = 7
    info.write_text(json.dumps(described))
    assert serve(numbered) == (f"{info} is damaged (TypeError: savedmodel_model is 7, not a "
                               "model's name): export again")
