"""Transformer-XL served as a sequence by a real ``tritonserver`` (PyTriton's, Triton's default
flags, the ``cpu`` repository as exported): what one client can do to the others. A bad
request is refused alone, with one line naming its input and the limit, and leaves every
sequence's memory as it was (its own included); ids outside the vocabulary, empty segments,
segments longer than the model's maximum and sequences beyond its limit are refused, and the
model stays ready and answers; many sequences open at once are each scored right; the model's
process ends with its server."""
import json
import os
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest
import tensorflow as tf
from conftest import ROOT
from triton_servers import (
    BUSY,
    FLOOD,
    TRITON_ENV,
    Repositories,
    sequence_rounds,
    sequence_steps,
)

pytestmark = TRITON_ENV


@pytest.fixture(scope="module")
def server(exported_txl, triton_python, tmp_path_factory):
    s = Repositories(triton_python, [exported_txl[2] / "cpu"], tmp_path_factory.mktemp("served"))
    yield s
    s.close()


@pytest.fixture(scope="module")
def signatures(exported_txl):
    return tf.saved_model.load(str(exported_txl[1])).signatures


@pytest.fixture(scope="module")
def ids(exported_txl):
    trainer = exported_txl[0]
    return np.load(os.path.join(trainer.flags.data_dir, "valid.npy")).tolist()


def _chained(fns, cfg, segments, score=True):
    """The SavedModel's answers (``fns``: its signatures) to ``segments`` (token lists; with
    ``score``, each holding its targets too: tokens ``s[:-1]``, targets ``s[1:]``) with the
    memory carried from one to the next, as a served sequence must give them."""
    mems, out = tf.zeros([cfg.n_layer, 1, 0, cfg.d_model]), []
    for s in segments:
        if score:
            r = fns["score"](tokens=tf.constant([s[:-1]], tf.int32),
                             targets=tf.constant([s[1:]], tf.int32), mems=mems)
        else:
            r = fns["serving_default"](tokens=tf.constant([s], tf.int32), mems=mems)
        out.append(r["nll" if score else "log_probs"].numpy()[0])
        mems = r["new_mems"]
    return out


def _score(seq, piece, start=False, end=False):
    return [seq, piece[:-1], piece[1:], start, end]


def _close(got, want):
    assert "error" not in got, got
    np.testing.assert_allclose(got["nll" if "nll" in got else "log_probs"], want, atol=1e-4)


def test_a_bad_request_beside_fifteen_good_ones_fails_alone_and_moves_no_memory(
        server, exported_txl, ids, signatures, triton_python):
    """Sixteen sequences in lock-step, one of them sending an out-of-vocabulary token, then
    targets of another length, then an empty segment: each bad request is refused with its
    own line, the fifteen others are answered each time with the chained NLL (their memory
    moved once per answered request), and the bad sequence's memory is what its one answered
    request left. Its requests were batched with the others' (Triton's metrics)."""
    trainer, export, _ = exported_txl
    cfg, vocab = trainer.task.cfg, trainer.task.cfg.vocab_size
    seqs = list(range(100, 116))
    bad = 107
    pieces = {s: [ids[o:o + 5] for o in (n * 7, n * 7 + 120, n * 7 + 240, n * 7 + 360)]
              for n, s in enumerate(seqs)}
    tokens_bad = [pieces[bad][1][0], vocab, pieces[bad][1][2], pieces[bad][1][3]]
    bad_requests = [
        [bad, tokens_bad, pieces[bad][1][1:], False, False],  # out of the vocabulary
        [bad, pieces[bad][2][:-1], pieces[bad][2][1:3], False, False],  # lengths differ
        [bad, [], [], False, False],  # an empty segment
    ]
    rounds = [[_score(s, pieces[s][0], start=True) for s in seqs]]
    for r in range(3):  # the good sequences end in the last round
        rounds.append([bad_requests[r] if s == bad else _score(s, pieces[s][r + 1], end=r == 2)
                       for s in seqs])
    rounds.append([_score(s, pieces[s][1], end=True) for s in [bad]])
    before = server.metric("nv_inference_exec_count", "transformerxl")
    answers = sequence_rounds(triton_python, server, rounds)
    batches = server.metric("nv_inference_exec_count", "transformerxl") - before
    assert batches < sum(map(len, rounds)), "no request was batched with another"
    errors = [answers[r][seqs.index(bad)].get("error", "") for r in (1, 2, 3)]
    assert f"tokens: id {vocab} at position 1 is not in [0, {vocab})" in errors[0], errors[0]
    assert "targets and tokens differ in length (2, 4)" in errors[1], errors[1]
    assert "is empty: a segment holds at least one token" in errors[2], errors[2]
    for s in seqs:
        if s == bad:
            want = _chained(signatures, cfg, [pieces[s][0], pieces[s][1]])
            _close(answers[0][seqs.index(s)], want[0])
            _close(answers[4][0], want[1])  # its memory: the first segment's only
            continue
        for r, w in enumerate(_chained(signatures, cfg, pieces[s])):
            _close(answers[r][seqs.index(s)], w)


def test_ids_outside_the_vocabulary_are_refused_by_the_server_and_the_savedmodel(
        server, exported_txl, ids, signatures, triton_python):
    """Targets at or beyond the vocabulary (or negative) were scored (XLA's gather clamps
    them: an NLL of another word) and tokens out of range were a bare 500; both are refused
    with the range, in the served model and in the SavedModel's signatures, and the sequence
    goes on from the memory it had."""
    trainer, export, _ = exported_txl
    cfg, vocab = trainer.task.cfg, trainer.task.cfg.vocab_size
    a, b = ids[0:5], ids[5:10]
    steps = [_score(41, a, start=True), [41, b[:-1], [b[1], vocab, b[3], b[4]], False, False],
             [41, b[:-1], [b[1], -1, b[3], b[4]], False, False],
             [41, [b[0], b[1], vocab + 5, b[3]], b[1:], False, False],
             [41, [vocab], None, False, False], _score(41, b, end=True)]
    got = sequence_steps(triton_python, server, steps)
    assert f"targets: id {vocab} at position 1 is not in [0, {vocab})" in got[1]["error"]
    assert f"targets: id -1 at position 1 is not in [0, {vocab})" in got[2]["error"]
    assert f"tokens: id {vocab + 5} at position 2 is not in [0, {vocab})" in got[3]["error"]
    assert f"tokens: id {vocab} at position 0" in got[4]["error"]
    for g, w in zip([got[0], got[5]], _chained(signatures, cfg, [a, b])):
        _close(g, w)
    mems = tf.zeros([cfg.n_layer, 1, 0, cfg.d_model])
    for name, kwargs in (
            ("score", dict(tokens=tf.constant([b[:-1]]), targets=tf.constant([[1, vocab, 2, 3]]))),
            ("score", dict(tokens=tf.constant([b[:-1]]), targets=tf.constant([[1, -2, 2, 3]]))),
            ("serving_default", dict(tokens=tf.constant([[vocab, 1]])))):
        with pytest.raises(tf.errors.InvalidArgumentError, match=rf"ids must be in \[0, {vocab}\)"):
            signatures[name](mems=mems, **kwargs)


def test_an_over_long_segment_is_refused_and_the_model_stays_ready_and_answers(
        server, exported_txl, ids, signatures, triton_python, tmp_path):
    """A segment longer than the config's max_segment (--tgt_len + the served memory,
    --eval_mem_len: 8 + 16 here) is
    refused with the limit and the model stays ready and answers (a request of 16,000 tokens
    got its process killed, while ready said 200); the text client refuses such a --segment
    and sends a longer prompt in segments the model takes, as the chained steps do; the
    serving figures refuse such --tokens."""
    trainer, export, repo = exported_txl
    cfg = trainer.task.cfg
    longest = trainer.flags.tgt_len + trainer.flags.eval_mem_len
    config = (repo / "cpu" / "transformerxl" / "config.pbtxt").read_text()
    assert f'key: "max_segment"\n    value {{\n      string_value: "{longest}"' in config
    got = sequence_steps(triton_python, server, [
        _score(51, ids[:longest + 2], start=True), _score(51, ids[:longest + 1], end=True)])
    assert f"a segment of {longest + 1} tokens is longer than transformerxl's maximum of " \
           f"{longest} (max_segment in config.pbtxt)" in got[0]["error"], got[0]
    # Its start was refused, which ended it in Triton (the end the model sends itself, most
    # often before this request arrives; else the model says it holds nothing for it).
    assert "for sequence 51 to model 'transformerxl' must specify the START flag" in \
        got[1]["error"] or "sequence 51 has no state here" in got[1]["error"], got[1]
    assert server.health("ready") == 200 and server.health("live") == 200
    (ok,) = sequence_steps(triton_python, server, [_score(52, ids[40:40 + longest + 1],
                                                          start=True, end=True)])
    _close(ok, _chained(signatures, cfg, [ids[40:40 + longest + 1]])[0])
    client = [triton_python, "-m", "serving.text_client", "--vocab",
              str(export / "assets" / "vocab.txt"), "--url", f"localhost:{server.grpc}",
              "--protocol", "grpc", "--json"]
    text = tmp_path / "text.txt"
    text.write_text("the king sees the castle .\n")
    proc = subprocess.run([*client, "score", str(text), "--segment", str(longest + 1)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"text_client.py: error: --segment {longest + 1} is longer than transformerxl "
        f"takes ({longest} tokens a request, max_segment in its config)"]
    vocab = trainer.task.vocab
    prompt = [vocab[i] for i in ids[:longest + 5]]
    proc = subprocess.run([*client, "continue", " ".join(prompt), "--words", "2"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    step = signatures["serving_default"]
    mems, want = tf.zeros([cfg.n_layer, 1, 0, cfg.d_model]), []
    for segment in (ids[:longest], ids[longest:longest + 5]):
        r = step(tokens=tf.constant([segment]), mems=mems)
        mems = r["new_mems"]
    for _ in range(2):
        want.append(int(np.argmax(r["log_probs"].numpy()[0])))
        r = step(tokens=tf.constant([[want[-1]]]), mems=mems)
        mems = r["new_mems"]
    assert json.loads(proc.stdout)["ids"] == want
    proc = subprocess.run([triton_python, "-m", "serving.load", "--url",
                           f"localhost:{server.grpc}", "--model", "transformerxl", "--tokens",
                           str(longest + 1), "--out", str(tmp_path / "figures")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 1 and proc.stderr.splitlines() == [
        f"load.py: error: --tokens {longest + 1} is longer than transformerxl takes "
        f"({longest} tokens a request, max_segment in its config)"], proc.stderr


def test_seventeen_interleaved_documents_are_each_scored_right(
        server, exported_txl, ids, signatures, triton_python):
    """Seventeen sequences open at once, their segments interleaved (each document's first,
    then each one's second...): with 16 candidate slots the seventeenth waited for the idle
    timeout and the first sixteen were then gone; now each is scored as its chained steps."""
    trainer, export, _ = exported_txl
    cfg = trainer.task.cfg
    docs = {60 + n: [ids[n * 9 + o:n * 9 + o + 4] for o in (0, 150, 300)] for n in range(17)}
    steps = [_score(s, docs[s][r], start=r == 0, end=r == 2) for r in range(3) for s in docs]
    start = time.monotonic()
    got = sequence_steps(triton_python, server, steps)
    assert time.monotonic() - start < 50  # no wait for a slot to idle out (60 s)
    for s, pieces in docs.items():
        for r, w in enumerate(_chained(signatures, cfg, pieces)):
            _close(got[r * 17 + list(docs).index(s)], w)


def test_a_start_beyond_the_sequence_limit_is_refused_and_the_model_ends_with_its_server(
        exported_txl, ids, signatures, triton_python, tmp_path):
    """With max_sequences 2 in the config: a third sequence's start is refused with a line
    naming the limit, the two open ones go on, and once one has ended the third starts.
    Refused starts free their slot in Triton's sequence batcher at once: after 1,024 of them
    (as many as its candidate slots), a new sequence is answered within a second (it waited
    for the 60 s idle timeout while they held the slots). Then the server is killed with
    SIGKILL while requests run: the model's process (which holds the memories) ends too (it
    outlived the server when its main thread was waiting on it)."""
    trainer, export, repo = exported_txl
    cfg = trainer.task.cfg
    limited = tmp_path / "cpu"
    shutil.copytree(repo / "cpu", limited)
    config = limited / "transformerxl" / "config.pbtxt"
    text = config.read_text()
    assert 'key: "max_sequences"\n    value {\n      string_value: "256"' in text
    assert "max_candidate_sequences: 1024" in text
    config.write_text(text.replace('string_value: "256"', 'string_value: "2"'))
    s = Repositories(triton_python, [limited], tmp_path)
    busy = None
    try:
        a, b, c = ids[0:5], ids[5:10], ids[10:15]
        got = sequence_steps(triton_python, s, [
            _score(1, a, start=True), _score(2, a, start=True), _score(3, a, start=True),
            _score(1, b), _score(2, b, end=True), _score(3, a, start=True), _score(3, b),
            _score(1, c, end=True), _score(3, c, end=True)])
        assert "transformerxl holds 2 open sequences, its limit (max_sequences 2 in " \
               "config.pbtxt)" in got[2]["error"], got[2]
        want = _chained(signatures, cfg, [a, b, c])
        for n, w in ((0, want[0]), (1, want[0]), (3, want[1]), (4, want[1]), (5, want[0]),
                     (6, want[1]), (7, want[2]), (8, want[2])):
            _close(got[n], w)

        sequence_steps(triton_python, s, [_score(1, a, start=True), _score(2, a, start=True)])
        proc = subprocess.run([triton_python, "-c", FLOOD, f"localhost:{s.grpc}", "10000",
                               "1024", str(cfg.vocab_size)],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        flood = json.loads(proc.stdout)
        refusals = " | ".join(flood["errors"])
        assert len(flood["errors"]) == 2 and "holds 2 open sequences, its limit" in refusals \
            and f"tokens: id {cfg.vocab_size} at position 0 is not in" in refusals, flood
        assert flood["refused_s"] < 30, flood  # none waited for a slot to idle out (60 s)
        assert "end_error" not in flood and "new_error" not in flood and flood["new_s"] < 1, \
            flood

        stubs = _children(s.proc.pid)
        assert stubs, "the Python model runs in a process of its own"
        longest = trainer.flags.tgt_len + trainer.flags.eval_mem_len
        busy = subprocess.Popen([triton_python, "-c", BUSY, f"localhost:{s.grpc}",
                                 str(longest)], stdout=subprocess.PIPE, text=True)
        for _ in range(20):  # answered, and still sending
            assert busy.stdout.readline(), "the busy client got no answer"
    finally:
        s.proc.send_signal(signal.SIGKILL)
        s.close()
        if busy:
            busy.kill()
            busy.wait()
    deadline = time.monotonic() + 30
    while [p for p in stubs if _alive(p)] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not [p for p in stubs if _alive(p)], "the model's process outlived its server"


def test_the_text_client_refuses_a_vocabulary_that_is_not_the_models(server, exported_txl,
                                                                      triton_python, tmp_path):
    trainer, export, _ = exported_txl
    words = (export / "assets" / "vocab.txt").read_text().splitlines()
    other = tmp_path / "vocab.txt"
    other.write_text("\n".join([words[0], words[2], words[1], *words[3:]]) + "\n")
    text = tmp_path / "text.txt"
    text.write_text("the king sees the castle .\n")
    proc = subprocess.run([triton_python, "-m", "serving.text_client",
                           "--vocab", str(other), "--url", f"localhost:{server.grpc}",
                           "--protocol", "grpc", "score", str(text)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"text_client.py: error: --vocab {other} ({len(words):,} words) is not the "
        f"vocabulary of transformerxl ({len(words):,} words): give the assets/vocab.txt of "
        "the export it serves"]


def test_the_image_client_points_to_the_text_client_for_the_sequence_model(server,
                                                                           triton_python,
                                                                           tmp_path):
    image = tmp_path / "x.jpg"
    image.write_bytes(b"\xff\xd8")
    proc = subprocess.run([triton_python, "-m", "serving.image_client",
                           "--model", "transformerxl", "--url", f"localhost:{server.http}",
                           str(image)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "image_client.py: error: transformerxl is a sequence model of token ids "
        "(Transformer-XL), not an image model: score or continue a text with "
        "python -m serving.text_client"]


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    if int(fh.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_the_serving_figures_refuse_what_would_never_end_or_measure_nothing(
        exported_txl, triton_python, tmp_path):
    """serving.load: --seconds nan ran forever, --seconds -1 and --tokens 0 ran and
    exited 0, and a server that did not start was a traceback; each is one line now."""
    _, _, repo = exported_txl

    def run(*args):
        proc = subprocess.run([triton_python, "-m", "serving.load", "--repository",
                               str(repo / "cpu"), "--model", "transformerxl", "--out",
                               str(tmp_path / "out"), *args],
                              capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert proc.returncode in (1, 2) and "Traceback" not in proc.stderr, proc.stderr
        return proc.stderr.strip().splitlines()[-1]
    for flag, value, why in (("--seconds", "nan", "above 0"), ("--seconds", "-1", "above 0"),
                             ("--seconds", "0", "above 0"), ("--warmup_s", "inf", "0 or more")):
        assert run(flag, value).endswith(
            f"argument {flag}: give a finite number of seconds {why}: {value}")
    assert run("--tokens", "0").endswith("argument --tokens: must be at least 1, not 0")
    assert run("--server", "/bin/false", "--instances", "1", "--batching", "on",
               "--tokens", "8") == (
        "load.py: error: instances 1, batching as shipped: tritonserver stopped (exit code 1): "
        f"see {tmp_path / 'out' / 'tritonserver.log'}")
    # Its files are checked before a server starts (they were tracebacks after it), the
    # concurrency bounded (each client a thread); a table of errors alone exits 1 (it was 0).
    assert run("--concurrency", "1,100000").endswith(
        "argument --concurrency: at most 256 (each a client thread with its own connection): "
        "1,100000")
    assert run("--image", str(tmp_path / "cat.jpg")).endswith(
        f"--image {tmp_path / 'cat.jpg'}: no such file")
    assert run("--image", str(tmp_path)).endswith(f"--image {tmp_path}: a directory, not a JPEG")
    (tmp_path / "file").write_text("")
    proc = subprocess.run([triton_python, "-m", "serving.load", "--repository", str(repo / "cpu"),
                           "--model", "transformerxl", "--out", str(tmp_path / "file")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].endswith(
        f"--out {tmp_path / 'file'} is a file: give a directory (serving.md and serving.json "
        "are written there)"), proc.stderr
    every_row_failed = (
        "import sys\nimport serving.load as load\n"
        "def run(args):\n    open(args.out + '/serving.md', 'w').write('| error |\\n')\n"
        "    return [{'concurrency': 1, 'error': 'the server went away'}]\n"
        "load.run = run\nsys.exit(load.main(sys.argv[1:]))\n")
    (tmp_path / "errors").mkdir()
    proc = subprocess.run([triton_python, "-c", every_row_failed, "--repository", str(repo),
                           "--model", "m", "--out", str(tmp_path / "errors")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 1 and proc.stderr.strip() == (
        f"load.py: error: no setting was answered (every row of "
        f"{tmp_path / 'errors' / 'serving.md'} is an error)"), proc.stderr


# `make test-slow` (the suite's time budget): the served sequence model is the other tests' of this
# file.
@pytest.mark.slow
def test_triton_perf_measures_its_own_server_not_the_one_on_port_8000(exported_txl, triton_python,
                                                                      tmp_path):
    """serving/triton_perf.sh starting a server (PyTriton's tritonserver as the one on PATH)
    took whatever answered on localhost:8000 as its own and measured it; it now starts its
    own on free ports and hands perf_analyzer that server's gRPC port. perf_analyzer (Triton's
    SDK container only) stands in as a script that asks that address whether the model is
    ready and records its arguments."""
    import http.server
    import socket
    import threading
    _, _, repo = exported_txl
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "tritonserver").write_text(
        f'#!/bin/sh\nexec "{triton_python}" "{ROOT}/serving/tritonserver.py" "$@"\n')
    (bin_dir / "perf_analyzer").write_text(
        f'#!/bin/sh\necho "$@" > "{tmp_path}/perf_args"\n'
        f'"{triton_python}" -c "import sys, tritonclient.grpc as g; '
        f'print(g.InferenceServerClient(sys.argv[1]).is_model_ready(sys.argv[2]))" '
        f'"$(echo "$@" | sed "s/.*-u \\([^ ]*\\).*/\\1/")" transformerxl '
        f'> "{tmp_path}/perf_ready"\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)

    class Decoy(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802  (another server, ready for anything)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass
    try:
        decoy = http.server.HTTPServer(("127.0.0.1", 8000), Decoy)
    except OSError:
        decoy = None  # 8000 is taken already: another server is there anyway
    if decoy:
        threading.Thread(target=decoy.serve_forever, daemon=True).start()
    try:
        inputs = tmp_path / "inputs"
        inputs.mkdir()
        proc = subprocess.run(
            ["bash", os.path.join(ROOT, "serving", "triton_perf.sh"), str(repo / "cpu"),
             "transformerxl", str(inputs), str(tmp_path / "out")], capture_output=True,
            text=True, timeout=300, env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    finally:
        if decoy:
            decoy.shutdown()
            decoy.server_close()
    assert proc.returncode == 0, proc.stderr[-2000:]
    args = (tmp_path / "perf_args").read_text().split()
    url = args[args.index("-u") + 1]
    assert url.startswith("localhost:") and url != "localhost:8001", url
    assert (tmp_path / "perf_ready").read_text().strip() == "True"
    with socket.socket() as s:  # the server is gone with the script
        assert s.connect_ex(("127.0.0.1", int(url.split(":")[1]))) != 0
