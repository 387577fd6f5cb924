"""A real ``tritonserver`` (PyTriton's binary, the documented command, Triton's default
flags) on the three models' ``cpu`` repositories as exported: every model loads, also with only
NVIDIA's container's Python packages; the ensembles and the networks alone answer photographs
with the SavedModel's outputs; Transformer-XL is served as a sequence whose memory stays in the
server, and the text client scores a file as the chained steps do; the serving figures measure
it; a corrupt request among concurrent ones fails alone; the client refuses what it cannot
describe; the README's CPU-host commands serve a JPEG, with the model card beside the
export."""


import json
import os
import re
import subprocess

import numpy as np
import pytest
import tensorflow as tf
from conftest import ROOT, TINY, photographs
from triton_servers import (
    TRITON_ENV,
    Repositories,
    ask,
    assert_answers_as_saved,
    random_images,
    sequence_log_probs,
    sequence_steps,
    signature,
)

from serving.connection import free_ports


@pytest.fixture(scope="module")
def served(exported_resnet, exported_ssd, exported_txl, triton_python, tmp_path_factory):
    repos = [exported_resnet[2] / "cpu", exported_ssd[2] / "cpu", exported_txl[2] / "cpu"]
    server = Repositories(triton_python, repos, tmp_path_factory.mktemp("served"))
    yield server
    server.close()


@TRITON_ENV
def test_a_real_tritonserver_loads_the_cpu_repositories_with_its_defaults(served):
    """The documented command with Triton's default flags (no --exit-on-error=false: a model
    that cannot load would have stopped it) on the three models' cpu/ repositories as
    exported: every model READY, /v2/health/ready and /live 200."""
    assert not any(a.startswith(("--exit-on-error", "--strict-readiness", "--model-control"))
                   for a in served.command)
    index = served.index()
    assert sorted(index) == ["resnet50", "resnet50_preprocess", "resnet50_python", "ssd320",
                             "ssd320_preprocess", "ssd320_python", "transformerxl"]
    assert all(m["state"] == "READY" for m in index.values()), index
    assert served.health("ready") == 200 and served.health("live") == 200
    log = served.log_path.read_text()
    assert "Traceback" not in log and "exit-on-error" not in log, log[-4000:]


@pytest.fixture(scope="module")
def container_python():
    """scripts/triton_container_env.sh's python: Python 3.12 holding exactly
    docker/triton-requirements.lock (made at first use)."""
    proc = subprocess.run(["bash", os.path.join(ROOT, "scripts", "triton_container_env.sh")],
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip().splitlines()[-1]


@TRITON_ENV
def test_the_python_models_load_with_only_the_containers_packages(
        exported_resnet, exported_ssd, exported_txl, triton_python, container_python, tmp_path):
    """NVIDIA's container as docker/Dockerfile.triton builds it, emulated: its Python (3.12)
    holding only docker/triton-requirements.lock runs the Python backend of the same binary,
    with Triton's default flags, on the repositories' Python models (cpu/, whose
    ``_preprocess`` and sequence model triton/ holds too): every one loads and answers. (The
    25.02 line the guide gave, a pip install of TensorFlow alone at start, left
    ``<name>_python`` without onnxruntime and the server stopped.)"""
    listed = subprocess.run([container_python, "-m", "pip", "list", "--format=json"],
                            capture_output=True, text=True, check=True).stdout
    names = {p["name"].lower().replace("_", "-") for p in json.loads(listed)}
    assert {"tensorflow-cpu", "onnxruntime", "numpy"} <= names
    assert not names & {"nvidia-pytriton", "tritonclient"}  # nothing but what the file lists
    repos = [exported_resnet[2] / "cpu", exported_ssd[2] / "cpu", exported_txl[2] / "cpu"]
    server = Repositories(triton_python, repos, tmp_path, python=container_python)
    try:
        assert server.health("ready") == 200
        assert all(m["state"] == "READY" for m in server.index().values())
        stubs = _stub_libraries(server.proc.pid)
        assert stubs and all("libpython3.12" in libs for libs in stubs), stubs
        for model in ("resnet50", "ssd320"):
            assert len(ask(triton_python, server, model, photographs()[:1], "http",
                            "--json")) == 1
        assert sequence_log_probs(triton_python, server, 1, [[1, 2, 3]])
    finally:
        server.close()


def _stub_libraries(pid: int) -> list[str]:
    """The mapped files of each Python-backend stub the server ``pid`` started."""
    out = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            cmd = open(f"/proc/{entry}/cmdline", "rb").read()
            if ppid == pid and b"triton_python_backend_stub" in cmd:
                out.append(open(f"/proc/{entry}/maps").read())
        except (OSError, ValueError, IndexError):
            pass
    return out


@TRITON_ENV
def test_the_served_ensembles_answer_what_the_savedmodel_answers_on_photographs(
        served, exported_resnet, exported_ssd, triton_python):
    """serving/image_client.py sends the JPEGs' bytes to <name> (preprocessing on the
    server, then the ONNX network) over HTTP and gRPC and gets the SavedModel's outputs, and
    to <name>_python alone, whose input the server's <name>_preprocess prepares; ResNet-50's
    top-5 names come from the server (classification extension)."""
    photos = photographs()
    encoded = tf.constant([open(p, "rb").read() for p in photos])
    for (_, export, _), model in ((exported_resnet, "resnet50"), (exported_ssd, "ssd320"),
                                  (exported_resnet, "resnet50_python"),
                                  (exported_ssd, "ssd320_python")):
        assert_answers_as_saved(triton_python, served, model, export, photos, atol=1e-4,
                                network=model.endswith("_python"))
    names = (exported_resnet[1] / "assets" / "labels.txt").read_text().split()
    probs = signature(exported_resnet[1], "serving_default")(images=encoded)
    probs = probs["probabilities"].numpy()
    for protocol in ("http", "grpc"):
        said = ask(triton_python, served, "resnet50", photos, protocol)
        for line, p, row in zip(said, photos, probs):
            path, _, top = line.partition(": ")
            assert path == p
            assert [t.rsplit(" ", 1)[0] for t in top.split(", ")] == [
                names[c] for c in np.argsort(-row, kind="stable")[:5]]


@TRITON_ENV
def test_transformer_xl_is_served_as_a_sequence_its_memory_kept_in_the_server(
        served, exported_txl, triton_python):
    """Three segments of a text sent as one sequence, tokens only, give the log-probabilities
    of the SavedModel's three chained steps (each given the memory the last returned); a new
    sequence starts from no memory; two sequences interleaved do not mix; scoring with targets
    gives the chained NLL; a sequence ended (or never started) is refused."""
    trainer, export, _ = exported_txl
    cfg = trainer.task.cfg
    ids = np.load(os.path.join(trainer.flags.data_dir, "valid.npy"))
    a = [ids[i:i + 5].tolist() for i in (0, 5, 10)]
    b = [ids[i:i + 3].tolist() for i in (40, 43, 46)]
    fns = tf.saved_model.load(str(export)).signatures

    def local(segments, score=False):
        mems, out = tf.zeros([cfg.n_layer, 1, 0, cfg.d_model]), []
        for s in segments:
            tokens = tf.constant([s[:-1] if score else s], tf.int32)
            r = fns["score"](tokens=tokens, targets=tf.constant([s[1:]], tf.int32),
                             mems=mems) if score else fns["serving_default"](
                tokens=tokens, mems=mems)
            out.append(r["nll" if score else "log_probs"].numpy()[0])
            mems = r["new_mems"]
        return out

    want_a, want_b = local(a), local(b)
    got = sequence_log_probs(triton_python, served, 11, a)
    for g, w in zip(got, want_a):
        np.testing.assert_allclose(g["log_probs"], w, atol=1e-4)
    # Memory matters: the third segment alone (a new sequence) is not the chained answer.
    fresh = sequence_log_probs(triton_python, served, 11, [a[2]])[0]["log_probs"]
    np.testing.assert_allclose(fresh, local([a[2]])[0], atol=1e-4)
    assert np.abs(np.asarray(fresh) - want_a[2]).max() > 1e-3
    steps = [[21, a[0], None, True, False], [22, b[0], None, True, False],
             [21, a[1], None, False, False], [22, b[1], None, False, False],
             [22, b[2], None, False, True], [21, a[2], None, False, True],
             [21, a[0], None, False, False]]
    got = sequence_steps(triton_python, served, steps)
    for g, w in zip([got[0], got[2], got[5]], want_a):
        np.testing.assert_allclose(g["log_probs"], w, atol=1e-4)
    for g, w in zip([got[1], got[3], got[4]], want_b):
        np.testing.assert_allclose(g["log_probs"], w, atol=1e-4)
    assert "error" in got[6]  # sequence 21 ended: a request without the start flag is refused
    # Scoring: tokens and targets, the NLL of the chained steps.
    pieces = [ids[i:i + 6].tolist() for i in (0, 5, 10)]  # 5 tokens and the next as targets
    steps = [[31, p[:-1], p[1:], n == 0, n == 2] for n, p in enumerate(pieces)]
    for g, w in zip(sequence_steps(triton_python, served, steps), local(pieces, score=True)):
        np.testing.assert_allclose(g["nll"], w, atol=1e-4)


@TRITON_ENV
def test_the_text_client_scores_a_file_as_the_chained_steps_do(served, exported_txl, triton_python,
                                                               tmp_path):
    """serving/text_client.py score: the file encoded as the corpus was (each line
    ending with <eos>), sent in segments of one sequence: the perplexity of the SavedModel's
    chained scoring steps; continue: the greedy words of the chained next-word steps; the
    Python API's score and generate on the export (``protocol="served"``) answer the same."""
    trainer, export, _ = exported_txl
    cfg, vocab = trainer.task.cfg, trainer.task.vocab
    text = "the king sees the castle .\nmy lord waits for a letter .\n"
    path = tmp_path / "text.txt"
    path.write_text(text)
    client = [triton_python, "-m", "serving.text_client", "--vocab",
              str(export / "assets" / "vocab.txt"), "--url", f"localhost:{served.grpc}",
              "--protocol", "grpc", "--json"]
    proc = subprocess.run([*client, "score", str(path), "--segment", "4"], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.splitlines()[-1])
    ids = [vocab.index(w) for line in text.splitlines() for w in [*line.split(), "<eos>"]]
    fn = tf.saved_model.load(str(export)).signatures["score"]
    mems, nll = tf.zeros([cfg.n_layer, 1, 0, cfg.d_model]), []
    for start in range(0, len(ids) - 1, 4):
        end = min(start + 4, len(ids) - 1)
        r = fn(tokens=tf.constant([ids[start:end]]), targets=tf.constant([ids[start + 1:end + 1]]),
               mems=mems)
        nll += r["nll"].numpy()[0].tolist()
        mems = r["new_mems"]
    assert got["tokens"] == len(ids) - 1
    assert abs(got["perplexity"] - float(np.exp(np.mean(nll)))) < 1e-3 * got["perplexity"]
    # The Python API's sequence of the export, as the server keeps it: the same answers.
    from common import api
    mine = api.load(str(export))
    assert mine.score(text, protocol="served", segment=4)["perplexity"] == pytest.approx(
        got["perplexity"], rel=1e-4)
    proc = subprocess.run([*client, "continue", "the king", "--words", "3"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    step = tf.saved_model.load(str(export)).signatures["serving_default"]
    mems, tokens, words = tf.zeros([cfg.n_layer, 1, 0, cfg.d_model]), [vocab.index("the"),
                                                                     vocab.index("king")], []
    for _ in range(3):
        r = step(tokens=tf.constant([tokens]), mems=mems)
        tokens, mems = [int(np.argmax(r["log_probs"].numpy()[0]))], r["new_mems"]
        words.append(tokens[0])
    assert json.loads(proc.stdout)["ids"] == words
    assert mine.generate("the king", words=3) == " ".join(vocab[i] for i in words)


@TRITON_ENV
# `make test-slow` (the suite's time budget): a second server of the repositories the first test
# serves; the figures' refusals are test_serving_sequence's.
@pytest.mark.slow
def test_the_serving_figures_script_measures_a_served_model(exported_resnet, served, triton_python,
                                                            tmp_path):
    """serving.load (the model READMEs' serving tables) on a tiny export: the repository
    copied with the instances and batching asked (the original untouched), a server with
    Triton's defaults on the copy, throughput and latency percentiles at each concurrency;
    and Transformer-XL's sequences (each client its own) on the server already running."""
    before = {p: p.read_text() for p in (exported_resnet[2] / "cpu").glob("*/config.pbtxt")}
    out = tmp_path / "serving"
    proc = subprocess.run(
        [triton_python, "-m", "serving.load", "--repository", str(exported_resnet[2] / "cpu"),
         "--model", "resnet50", "--image", photographs()[0], "--concurrency", "1,2",
         "--instances", "2", "--batching", "off,500", "--seconds", "1", "--warmup_s", "0.5",
         "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads((out / "serving.json").read_text())
    assert got["unit"] == "images/s" and "vCPUs" in got["machine"]
    rows = got["results"]
    assert [(r["instances"], r["batching"], r["concurrency"]) for r in rows] == [
        (2, None, 1), (2, None, 2), (2, 500, 1), (2, 500, 2)]
    for r in rows:
        assert r["requests"] > 0 and r["throughput"] > 0 and r["resident_mib"] > 0, r
        assert r["p50_ms"] <= r["p90_ms"] <= r["p95_ms"] <= r["p99_ms"], r
    table = (out / "serving.md").read_text().splitlines()
    assert table[2].startswith("| instances | dynamic batching | concurrency | images/s |")
    assert table[4].startswith("| 2 | off | 1 | ")
    assert table[6].startswith("| 2 | 500 µs delay | 1 |")
    assert {p: p.read_text() for p in before} == before  # a copy was changed, not these
    log = (out / "tritonserver.log").read_text()
    assert "TRITONBACKEND_ModelInstanceInitialize: resnet50_python_0_1" in log  # 2 instances
    proc = subprocess.run(
        [triton_python, "-m", "serving.load", "--url", f"localhost:{served.grpc}",
         "--model", "transformerxl", "--tokens", "4", "--concurrency", "2", "--seconds", "1",
         "--warmup_s", "0.5", "--out", str(out / "txl")],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads((out / "txl" / "serving.json").read_text())
    (row,) = got["results"]
    assert got["unit"] == "tokens/s" and row["throughput"] > 0 and row["requests"] > 0, row


CONCURRENT = """
import json, sys
import numpy as np
import tritonclient.http as http
url, model, files = sys.argv[1], sys.argv[2], sys.argv[3:]
client = http.InferenceServerClient(url, concurrency=len(files))
pending = []
for path in files:  # every request in flight at once: Triton batches them together
    data = np.array([[open(path, "rb").read()]], dtype=object)
    tensor = http.InferInput("images", list(data.shape), "BYTES")
    tensor.set_data_from_numpy(data)
    pending.append(client.async_infer(model, [tensor], outputs=[
        http.InferRequestedOutput("valid"), http.InferRequestedOutput("classes")]))
out = []
for path, p in zip(files, pending):
    try:
        r = p.get_result()
        out.append([path, bool(r.as_numpy("valid").reshape(-1)[0]),
                    int(r.as_numpy("classes").reshape(-1)[0])])
    except Exception as e:
        out.append([path, "error", str(e)[:200]])
print(json.dumps(out))
"""


@TRITON_ENV
def test_concurrent_requests_with_a_corrupt_one_are_all_answered(served, triton_python,
                                                                 tmp_path):
    """Twelve good requests and a corrupt one sent together to Triton's dynamic batching (the
    served ensemble's preprocessing): every good one is answered (9 to 11 of them got "[500]
    Model execute error" when one bad image failed the batch), the corrupt one is flagged; and
    serving/image_client.py gives the others' answers and a line for each file it could not
    send or the model could not decode."""
    good = random_images(tmp_path, 12)
    bad = tmp_path / "corrupt.jpg"
    bad.write_bytes(open(good[0], "rb").read()[:60])
    text = tmp_path / "notes.txt"
    text.write_text("not an image\n")
    proc = subprocess.run([triton_python, "-c", CONCURRENT, f"localhost:{served.http}",
                           "resnet50", *good[:6], str(bad), *good[6:]],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    answers = {path: rest for path, *rest in json.loads(proc.stdout)}
    assert answers[str(bad)][0] is False
    assert all(answers[p][0] is True and answers[p][1] >= 0 for p in good), answers
    files = [good[0], str(bad), str(tmp_path / "missing.jpg"), str(text), good[1]]
    client = subprocess.run(
        [triton_python, "-m", "serving.image_client", "--model",
         "resnet50", "--url", f"http://localhost:{served.http}", "--batch_size", "5",
         *files], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert client.returncode == 0, client.stderr[-2000:]
    assert [ln.split(":")[0] for ln in client.stdout.splitlines()] == [good[0], good[1]]
    err = client.stderr.splitlines()
    assert f"skipped {tmp_path / 'missing.jpg'}: No such file or directory" in err
    assert f"skipped {bad}: the model could not decode it as an image" in err
    assert f"skipped {text}: the model could not decode it as an image" in err
    assert err[-1] == "image_client.py: 3 of 5 file(s) not answered"


@TRITON_ENV
def test_the_client_refuses_labels_and_models_it_cannot_describe_with_one_line(
        served, exported_resnet, exported_ssd, triton_python, tmp_path):
    """What the server's config tells the client, one line each (exit 2), where it was a
    traceback: --labels naming fewer classes than the classifier has, a label map given for a
    classifier (or names for a detector), and a model whose outputs are neither a classifier's
    nor a detector's (<name>_preprocess) without --json."""
    photo = photographs()[:1]
    few = tmp_path / "labels.txt"
    few.write_text("cat\ndog\n")
    classes = exported_resnet[0].flags.num_classes

    def refused(model, *args):
        proc = subprocess.run([triton_python, "-m", "serving.image_client",
                               "--model", model, "--url", f"localhost:{served.http}", *args,
                               *photo], capture_output=True, text=True, timeout=120, cwd=ROOT)
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, \
            proc.stderr
        return lines[0].removeprefix("image_client.py: error: ")

    assert refused("resnet50", "--labels", str(few)) == (
        f"--labels {few} names 2 classes; resnet50 has {classes}")
    label_map = exported_ssd[1] / "assets" / "label_map.json"
    assert refused("resnet50", "--labels", str(label_map)) == (
        f"--labels {label_map} is a label map (a detector's); resnet50 is a classifier: give "
        "its labels.txt")
    names = exported_resnet[1] / "assets" / "labels.txt"
    assert refused("ssd320", "--labels", str(names)) == (
        f"--labels {names} is a list of names; ssd320 is a detector: give its label_map.json")
    assert refused("resnet50_preprocess") == (
        "resnet50_preprocess is neither a classifier nor a detector (its outputs: images, "
        "valid): send the images to the model itself (<name>, or <name>_python), or print "
        "them with --json")


def _readme_blocks(heading: str) -> list[str]:
    """The bash blocks of README.md's section ``heading``, continuation lines joined."""
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return [block.replace("\\\n", " ") for block in re.findall(r"```bash\n(.*?)```", section,
                                                                re.S)]


@TRITON_ENV
# `make test-slow` (the suite's time budget): the same repositories served with Triton's defaults
# by the first test of this file.
@pytest.mark.slow
def test_the_readmes_cpu_host_commands_serve_a_jpeg(tmp_path, digits_records, triton_python):
    """README's Deployment commands for a CPU host, run as written (the data, the results
    folder and cat.jpg replaced by this test's, ports of its own, the tiny preset of the
    checkpoint trained here first): a Triton server answers a photograph with the SavedModel's
    top class."""
    import sys
    cpu, gpu = _readme_blocks("Deployment: export, Triton, TensorRT, INT8")
    results, photo = tmp_path / "results", photographs()[2]
    subprocess.run([sys.executable, os.path.join(ROOT, "resnet50v1.5", "main.py"), *TINY,
                    "--data_dir", digits_records, "--mode", "train", "--iter_unit", "batch",
                    "--num_iter", "1", "--results_dir", str(results)],
                   check=True, capture_output=True, timeout=300)
    http, grpc, metrics = free_ports(3)
    lines = []
    for line in cpu.strip().splitlines():
        line = line.replace("/data/imagenet", digits_records).replace("/results", str(results))
        line = line.replace("cat.jpg", photo)
        if line.startswith("python "):
            line = f"{sys.executable} {line[len('python '):]} --preset tiny"
        if "-m serving.tritonserver" in line:
            line = line.replace(" &", f" --http-port={http} --grpc-port={grpc} "
                                      f"--metrics-port={metrics} >{tmp_path}/server.log 2>&1 &")
        if "-m serving.image_client" in line:
            line = line.replace(" --wait", f" --url localhost:{http} --wait")
        lines.append(line)
    script = "\n".join(["set -euo pipefail", "trap 'kill $(jobs -p) 2>/dev/null' EXIT", *lines])
    proc = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, (proc.stderr[-3000:], (tmp_path / "server.log").read_text()[-3000:]
                                  if (tmp_path / "server.log").exists() else "")
    answer = proc.stdout.strip().splitlines()[-1]
    assert not any("exit-on-error" in block or "pip install" in block for block in (cpu, gpu))
    _check_card(results, digits_records, tmp_path)
    names = (results / "export" / "assets" / "labels.txt").read_text().split()
    probs = signature(results / "export", "serving_default")(
        images=tf.constant([open(photo, "rb").read()]))["probabilities"].numpy()[0]
    assert answer.startswith(f"{photo}: {names[int(np.argmax(probs))]} {probs.max():.3f}, ")
    # The GPU host's commands: the engine script the first one runs is where it says.
    assert "bash /results/triton.tensorrt/build_engines.sh" in gpu
    assert (results / "triton.tensorrt" / "build_engines.sh").exists()


def _check_card(results, digits_records, tmp_path):
    """The README's export's model card: trained here on the digits, scored on their validation
    split by this evaluation, the project's commit, no path of this machine; the same card
    (JSON and README.md, whose front matter is the hub's metadata) beside the export and the
    model a client calls in each Triton repository."""
    import hashlib

    from huggingface_hub import ModelCard

    from common.export import card as cards
    export = results / "export"
    card = json.loads((export / "model_card.json").read_text())
    assert card == json.loads((export / "assets" / "client.json").read_text())["model_card"]
    assert card["weights"] == {"source": "trained", "dataset": os.path.basename(digits_records),
                               "from": "trained by this repository's resnet50v1.5/main.py",
                               "model": "resnet50v1.5"}
    scored = card["scored"]
    assert (scored["split"], scored["step"], scored["data"]) == (
        "validation", 1, os.path.basename(digits_records)), scored
    assert 0 <= scored["metrics"]["top1_accuracy"] <= 1
    assert str(tmp_path) not in json.dumps(card) and digits_records not in json.dumps(card)
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert card["project"]["commit"] == head and card["project"]["name"] == "tf-model-scripts"
    # The exported weights are the ones the card's hash names (float32 in variable order).
    digest = hashlib.sha256()
    for w in tf.saved_model.load(str(export)).weights:
        digest.update(np.ascontiguousarray(w.numpy(), dtype="<f4").tobytes())
    assert card["exported_weights_sha256"] == digest.hexdigest()
    assert card["parameter_count"] == sum(int(np.prod(w.shape)) for w in
                                          tf.saved_model.load(str(export)).weights)
    assert (export / "README.md").read_text() == cards.markdown(card)
    # The front matter as the Hub reads it (huggingface_hub's ModelCard.load).
    front = ModelCard.load(export / "README.md").data
    assert (front.pipeline_tag, front.license, front.tags) == (
        "image-classification", "unknown", ["tensorflow", "savedmodel"])
    assert "library_name" not in front.to_dict()  # no Hub library loads an export's SavedModel
    # Trained on digits, not ImageNet: no Hub dataset, the data it read named.
    assert front.datasets is None and card["data"] == (
        "an image dataset of 10 classes (digit_0, digit_1, digit_2, ...)")
    by_metric = {(r.metric_type, r.metric_name): r for r in front.eval_results}
    top1 = by_metric[("accuracy", "Top-1 accuracy")]
    assert (top1.dataset_name, top1.dataset_type, top1.dataset_split, top1.task_type,
            top1.metric_value) == (card["data"], "custom", "validation",
                                   "image-classification", scored["metrics"]["top1_accuracy"])
    assert by_metric[("accuracy", "Top-5 accuracy")].metric_args == {"top_k": 5}
    # The SHA-256 of every file a server runs, in the export's card and in each repository's
    # (which names the model to call there and the files its models serve).
    served = card["served_files"]
    assert served == {"saved_model": cards.saved_model_sha256(str(export)),
                      "preprocess": cards.saved_model_sha256(str(export / "preprocess")),
                      "model.onnx": cards.file_sha256(str(export / "model.onnx"))}
    in_repo = {"cpu": {"resnet50_preprocess/1/model.savedmodel": served["preprocess"],
                       "resnet50_python/1/model.onnx": served["model.onnx"]},
               "triton": {"resnet50_preprocess/1/model.savedmodel": served["preprocess"],
                          "resnet50_onnx/1/model.onnx": served["model.onnx"]},
               "tensorflow": {"resnet50_savedmodel/1/model.savedmodel": served["saved_model"]}}
    for repo, model in (("cpu", "resnet50"), ("triton", "resnet50"),
                        ("tensorflow", "resnet50_savedmodel")):
        folder = results / "triton" / repo / model
        there = {**card, "triton_model": model, "served_files": in_repo[repo]}
        assert json.loads((folder / "model_card.json").read_text()) == there, folder
        for rel, digest in in_repo[repo].items():
            path = str(folder.parent / rel)
            assert digest == (cards.file_sha256(path) if rel.endswith(".onnx") else
                              cards.saved_model_sha256(path)), rel
        assert (folder / "README.md").read_text() == cards.markdown(there)
