"""The Python API (``common/api.py``): README.md's example run as written (a checkpoint trained
here, a photograph for cat.jpg), a Transformer-XL checkpoint scored through it as its export
scores, and what it refuses."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import OWN_HANDLING, ROOT, TINY, photographs

from common import api
from common.errors import DataError


def _readme_python() -> str:
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    section = text.split("\n### From Python\n", 1)[1]
    return re.findall(r"```python\n(.*?)```", section, re.S)[0]


@pytest.mark.both_stacks
def test_the_readmes_python_example_runs(tmp_path, digits_records):
    """A checkpoint's predictions equal its export's (the README asserts it); the model card
    travels with both: the checkpoint's, scored by the evaluation recorded for its step."""
    results = tmp_path / "results"
    subprocess.run([sys.executable, os.path.join(ROOT, "resnet50v1.5", "main.py"), *TINY,
                    "--data_dir", digits_records, "--mode", "train_and_evaluate",
                    "--iter_unit", "batch", "--num_iter", "1", "--results_dir", str(results),
                    "--model_dir", str(results / "checkpoints")],
                   check=True, capture_output=True, timeout=600)
    code = _readme_python().replace("/results", str(results)).replace(
        "cat.jpg", photographs()[2])
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    labels = (results / "export_py" / "assets" / "labels.txt").read_text().split()
    assert last.split(" ")[0] in labels
    card = json.loads((results / "export_py" / "model_card.json").read_text())
    assert card["scored"]["step"] == 1 and card["scored"]["split"] == "validation"
    assert "'source': 'trained'" in last and "'split': 'validation'" in last


def test_load_with_amp_is_what_main_py_amp_runs_with(tmp_path, digits_records, monkeypatch):
    """``api.load(checkpoint, amp=True)`` builds from values what ``main.py --amp`` builds from
    its command line: every setting of main.py's PARAMETER record and its precision the same,
    without an argv, a captured stdout or a results directory (``./results``, the default,
    is not made by the load)."""
    from common import flags
    from common.runtime.dllogger import read_records
    main_py = os.path.join(ROOT, "resnet50v1.5", "main.py")
    trained, ran, loaded = (tmp_path / d for d in ("trained", "ran", "loaded"))
    for d in (ran, loaded):
        d.mkdir()
    ck = str(trained / "checkpoints")
    subprocess.run([sys.executable, main_py, *TINY, "--data_dir", digits_records, "--mode",
                    "train", "--iter_unit", "batch", "--num_iter", "1", "--results_dir",
                    str(trained)], check=True, capture_output=True, timeout=600)
    subprocess.run([sys.executable, main_py, "--mode", "evaluate", "--model_dir", ck,
                    "--data_dir", digits_records, "--amp"], cwd=ran, check=True,
                   capture_output=True, timeout=600)
    logged = next(r["data"] for r in read_records(str(ran / "results" / "log.json"))
                  if r.get("step") == "PARAMETER")
    monkeypatch.chdir(loaded)
    model = api.load(ck, amp=True, data_dir=digits_records)
    assert os.listdir(loaded) == []  # no ./results for a load
    ctx = model._trainer.ctx
    mine = json.loads(json.dumps({**flags.as_dict(model.task.flags),
                                  **ctx.precision.describe()}, default=str))
    assert {k: logged.get(k) for k in mine} == mine
    policy = ctx.precision.policy
    assert mine["amp"] is True and policy.startswith("mixed_") and logged["dtype_policy"] == policy
    assert any(line.startswith(f"precision: policy {policy}") for line in model.messages)


@pytest.mark.one_stack("pip", "the API's own calls; the SavedModel's scores on each stack are "
                        "test_txl_main's")
def test_a_transformerxl_checkpoint_scores_as_its_export(tmp_path, corpus):
    """Transformer-XL through the API: the checkpoint's ``score`` signature and its export's
    agree; its flags over the recorded ones (``eval_mem_len``) reach the model."""
    results = tmp_path / "r"
    subprocess.run([sys.executable, os.path.join(ROOT, "transformerxl", "main.py"), *TINY,
                    "--data_dir", corpus, "--mode", "train", "--iter_unit", "batch",
                    "--num_iter", "2", "--results_dir", str(results), "--model_dir",
                    str(results / "ck")], check=True, capture_output=True, timeout=600)
    model = api.load(str(results / "ck"), data_dir=corpus, eval_mem_len=8)  # its vocabulary
    assert model.task.flags.eval_mem_len == 8 and model.card["scored"] is None
    # Weights trained here: no licence unless one is given (--weights_license).
    assert (model.card["license"], model.card["weights"].get("license")) == ("unknown", None)
    assert api.load(str(results / "ck"), data_dir=corpus, weights_license="Apache-2.0"
                    ).card["license"] == "apache-2.0"
    tokens = np.load(os.path.join(corpus, "test.npy"))[:20].reshape(2, 10).astype(np.int32)
    info = model.exports.client_info()  # the start memory: none, (layers, batch, 0, d_model)
    inputs = {"tokens": tokens[:, :-1], "targets": tokens[:, 1:],
              "mems": np.zeros((info["n_layer"], 2, 0, info["d_model"]), np.float32)}
    assert "score" in model.signatures
    mine = model.predict("score", **inputs)
    served = api.load(model.export(str(tmp_path / "export")))
    theirs = served.predict("score", **inputs)
    np.testing.assert_allclose(mine["nll"], theirs["nll"], rtol=1e-5)
    with pytest.raises(DataError, match="^score takes mems, targets, tokens; missing targets"):
        served.predict("score", tokens=tokens, mems=inputs["mems"])
    with pytest.raises(DataError, match="^no signature 'scores': this model has "):
        model.predict("scores", tokens=tokens)
    wrapped = tokens[:, :-1].astype(np.int64)
    wrapped[0, -1] = 2**32 + 5  # as int32: 5
    with pytest.raises(DataError, match=r"^tokens: id 4294967301 is outside \[0, "):
        model.predict("score", **{**inputs, "tokens": wrapped})


def test_a_transformerxl_checkpoint_scores_text_as_evaluate_does_without_its_corpus(
        tmp_path, corpus):
    """The checkpoint keeps its vocabulary (it needed --data_dir: "give --vocab_size"), and
    ``score(text)`` on the test split's words is ``main.py --mode evaluate``'s perplexity on
    that split (one stream, token-weighted), from the checkpoint and from its export alike;
    ``generate`` continues a prompt the same from both; a model of images refuses both."""
    from common.runtime.dllogger import last_summary, read_records
    results = tmp_path / "r"
    common = [sys.executable, os.path.join(ROOT, "transformerxl", "main.py"), *TINY,
              "--model_dir", str(results / "ck")]
    subprocess.run([*common, "--data_dir", corpus, "--mode", "train", "--iter_unit", "batch",
                    "--num_iter", "2", "--results_dir", str(results)], check=True,
                   capture_output=True, timeout=600)
    proc = subprocess.run([*common, "--data_dir", corpus, "--mode", "evaluate",
                           "--eval_batch_size", "1", "--results_dir", str(tmp_path / "e")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    evaluated = last_summary(read_records(str(tmp_path / "e" / "log.json")))
    model = api.load(str(results / "ck"))  # no data_dir: the checkpoint's own vocab.txt
    vocab = open(os.path.join(corpus, "vocab.txt"), encoding="utf-8").read().splitlines()
    assert model.task.vocab == vocab
    ids = np.load(os.path.join(corpus, "test.npy")).tolist()
    assert vocab[ids[-1]] == "<eos>"
    text = " ".join(vocab[i] for i in ids).replace(" <eos>", "\n").replace("<eos>", "\n")
    assert model.encode(text) == ids
    scored = model.score(text)
    assert scored["tokens"] == evaluated["eval_tokens"]
    assert scored["perplexity"] == pytest.approx(evaluated["eval_ppl_token_weighted"], rel=1e-5)
    served = api.load(model.export(str(tmp_path / "export")))
    assert served.score(text)["perplexity"] == pytest.approx(scored["perplexity"], rel=1e-5)
    for protocol in ("served", "evaluation"):
        assert served.score(text, protocol=protocol, segment=7)["nll"] == pytest.approx(
            model.score(text, protocol=protocol, segment=7)["nll"], rel=1e-5)
    prompt = " ".join(vocab[i] for i in ids[:30])
    words = model.generate(prompt, words=6)
    assert len(words.split()) == 6 and served.generate(prompt, words=6) == words
    assert served.generate(prompt, words=6, sample=True, seed=3) == \
        model.generate(prompt, words=6, sample=True, seed=3)
    with pytest.raises(DataError, match="^'zebra' is not in the vocabulary, which has no"):
        model.score("the zebra sees the sea .")


@OWN_HANDLING
def test_what_is_no_checkpoint_or_export_is_refused_with_one_line(tmp_path):
    with pytest.raises(DataError, match=f"^{tmp_path} holds no checkpoint of this repository"):
        api.load(str(tmp_path))
    (tmp_path / "saved_model.pb").write_bytes(b"")
    with pytest.raises(DataError, match="is an export: its flags were fixed when it was "
                                        r"written \(amp given\)"):
        api.load(str(tmp_path), amp=True)
    with pytest.raises(DataError, match="has no readable assets/client.json"):
        api.load(str(tmp_path))


@pytest.fixture(scope="module")
def served_resnet(exported_resnet):
    """The shared ResNet-50 export, loaded once for the tests that only call it."""
    return api.load(str(exported_resnet[1]))


@pytest.fixture(scope="module")
def served_txl(exported_txl):
    """The shared Transformer-XL export, loaded once for the tests that only call it."""
    return api.load(str(exported_txl[1]))


@OWN_HANDLING
def test_predict_takes_paths_pil_images_arrays_and_bytes_alike(served_resnet, tmp_path):
    """An image is a file's path (``str`` or ``os.PathLike``), its bytes, a PIL image or uint8
    pixels, one or a list: each gives what the list of encoded bytes gives (the same pixels,
    PNG-encoded, so that no decoder's rounding differs). A file that is no image is one line
    naming it (its class would be -1, which indexes a label list); ``mask=True`` answers the
    others."""
    import pathlib

    from PIL import Image
    served = served_resnet
    pixels = [np.asarray(Image.open(p).convert("RGB"))[:96, :128] for p in photographs()]
    paths = []
    for i, a in enumerate(pixels):
        Image.fromarray(a).save(tmp_path / f"{i}.png")
        paths.append(str(tmp_path / f"{i}.png"))
    encoded = [open(p, "rb").read() for p in paths]
    want = served.predict(images=encoded)
    assert want["valid"].all()
    for given in (paths, [pathlib.Path(p) for p in paths], [Image.open(p) for p in paths],
                  pixels, np.stack(pixels)):
        got = served.predict(images=given)
        np.testing.assert_array_equal(got["probabilities"], want["probabilities"])
    for one in (paths[1], encoded[1], Image.open(paths[1]), pixels[1]):  # a batch of one
        np.testing.assert_allclose(served.predict(images=one)["probabilities"],
                                   want["probabilities"][1:2], rtol=1e-5)
    gray = served.predict(images=pixels[0][:, :, 0])  # (height, width): one grey image
    assert gray["valid"].tolist() == [True]

    bad = tmp_path / "notes.jpg"
    bad.write_bytes(b"not an image")
    with pytest.raises(DataError, match=f"^{re.escape(str(bad))}: not an image this model "
                                        r"decodes \(predict\(..., mask=True\)"):
        served.predict(images=[paths[0], str(bad)])
    masked = served.predict(images=[paths[0], bad], mask=True)
    assert masked["valid"].tolist() == [True, False]
    assert masked["classes"][0] == want["classes"][0]
    for given, line in (
            ([str(tmp_path / "missing.jpg")], r"^images\[0\]: cannot read .*missing\.jpg"),
            ([encoded[0], pixels[0].astype(np.float32)],
             r"^images\[1\]: an array of float32 \(96, 128, 3\); an image is uint8 pixels"),
            ([], "^images: an empty list"), (3, "^images: a int; give an image"),
            ([encoded[0], 7], r"^images\[1\]: a int; an image is a file's path")):
        with pytest.raises(DataError, match=line):
            served.predict(images=given)


@OWN_HANDLING
def test_a_pil_image_is_answered_as_its_file_or_refused_naming_its_mode(served_resnet,
                                                                         tmp_path):
    """A PIL image answers what its file answers, whatever its mode: 16-bit grey was clipped at
    255 by convert("RGB") (a white picture) and float truncated to 0. Modes the export's decoder
    has no pixels for are one line naming the mode."""
    from PIL import Image
    served = served_resnet
    rgb = np.asarray(Image.open(photographs()[0]).convert("RGB"))[:64, :80]
    grey16 = (rgb[..., 0].astype(np.uint16) * 257 + np.arange(80, dtype=np.uint16)).astype(
        np.uint16)
    files = {}
    for name, image, fmt in (
            ("grey16.png", Image.fromarray(grey16), "PNG"),
            ("palette.png", Image.fromarray(rgb).convert("P"), "PNG"),
            ("grey_alpha.png", Image.fromarray(rgb).convert("LA"), "PNG"),
            ("rgba.png", Image.fromarray(rgb).convert("RGBA"), "PNG"),
            ("bits.png", Image.fromarray(rgb).convert("1"), "PNG"),
            ("cmyk.jpg", Image.fromarray(rgb).convert("CMYK"), "JPEG")):
        image.save(tmp_path / name, format=fmt)
        files[name] = str(tmp_path / name)
    for name, path in files.items():
        opened = Image.open(path)
        want = served.predict(images=path)["probabilities"]
        # A JPEG's pixels as Pillow decodes them differ from TensorFlow's decoder by a unit or
        # so: its CMYK is turned to RGB as TensorFlow turns it, the rest is the decoders'.
        np.testing.assert_allclose(served.predict(images=opened)["probabilities"], want,
                                   rtol=0, atol=1e-4 if name.endswith(".jpg") else 0,
                                   err_msg=f"{name} ({opened.mode})")
    opened = Image.open(files["grey16.png"])
    assert opened.mode == "I;16"
    np.testing.assert_array_equal(served.predict(images=opened.convert("I"))["probabilities"],
                                  served.predict(images=files["grey16.png"])["probabilities"])
    with pytest.raises(DataError, match=r"^images\[0\]: a PIL image of mode F, which is not "
                                        "pixels this model decodes"):
        served.predict(images=opened.convert("F"))
    with pytest.raises(DataError, match=r"^images\[0\]: a PIL image of mode I with values -5 "):
        served.predict(images=Image.fromarray(np.full((8, 8), -5, np.int32)))


@OWN_HANDLING
@pytest.mark.parametrize("shape, dtype, line", [
    ((64, 80, 2), np.uint8, r"^images: a uint8 array of shape \(64, 80, 2\); images are uint8 "
                            r"pixels: .* \(a channels-first or a two-channel array is not guessed"),
    ((3, 64, 80), np.uint8, r"^images: a uint8 array of shape \(3, 64, 80\)"),
    ((2, 3, 64, 80), np.uint8, r"^images: a uint8 array of shape \(2, 3, 64, 80\)"),
    ((64, 80, 3), np.float32, r"^images: an array of float32 \(64, 80, 3\); images are uint8"),
    ((64, 80, 3), np.uint16, r"^images: an array of uint16 \(64, 80, 3\)")])
def test_an_array_that_is_not_an_image_or_a_batch_of_them_is_refused(served_resnet, shape,
                                                                    dtype, line):
    """(height, width, 2) was read as a batch of height grey images (427 answers), (3, height,
    width) as 3: an array is taken by its shape alone, and one it does not fit is refused."""
    served = served_resnet
    with pytest.raises(DataError, match=line):
        served.predict(images=np.zeros(shape, dtype))


@OWN_HANDLING
def test_an_exports_vocabulary_is_checked_against_its_recorded_hash(exported_txl, tmp_path):
    """client.json records the vocabulary's SHA-256 (the text client checks it): a vocab.txt
    shuffled or cut since scored 46.5 where the export scores 32.2, and decoded through the
    wrong words, without a sign. Now one line naming the file."""
    import shutil
    copy = tmp_path / "export"
    shutil.copytree(exported_txl[1], copy)
    text = "the king sees the sea . " * 8
    assert np.isfinite(api.load(str(copy)).score(text)["perplexity"])
    vocab = copy / "assets" / "vocab.txt"
    words = vocab.read_text().splitlines()
    for changed in (words[::-1], words[:2]):
        vocab.write_text("".join(w + "\n" for w in changed))
        with pytest.raises(DataError, match=f"^{re.escape(str(vocab))} \\({len(changed):,} "
                                            "words\\) is not the vocabulary this export was "
                                            "written with"):
            api.load(str(copy)).score(text)


@OWN_HANDLING
def test_text_calls_take_the_exports_segment_and_refuse_what_is_not_text_or_a_count(
        served_txl):
    """score(protocol="served") sent segments of 64 tokens to any export and failed where
    max_segment is smaller; arguments of the wrong kind were Python's or TensorFlow's errors.
    Both perplexities are named: every token alike, every segment alike."""
    served = served_txl
    longest = served.info["max_segment"]
    assert longest < 64
    text = "the king sees the sea . a fool follows the night . " * 12
    got = served.score(text, protocol="served")
    tokens = got["tokens"]
    assert len(got["segments"]) == -(-tokens // longest)  # segments of max_segment tokens
    assert got["perplexity_per_segment"] == pytest.approx(
        np.exp(np.mean(got["segments"])), rel=1e-9)
    assert got["perplexity"] == pytest.approx(np.exp(got["nll"]), rel=1e-9)
    for call, line in (
            (lambda: served.score(b"the king"), "^text: a bytes; give a str"),
            (lambda: served.score(text, segment=0), r"^segment: 0; give a whole number of at "
                                                    "least 1"),
            (lambda: served.score(text, segment=2.5), r"^segment: 2\.5; give a whole number"),
            (lambda: served.generate("the king", words=-1), r"^words: -1; give a whole number of "
                                                           "at least 0"),
            (lambda: served.generate("the king", words=1.5), r"^words: 1\.5; give a whole"),
            (lambda: served.sequence(start=-2), r"^start: -2; give a whole number of at least 0"),
            (lambda: served.sequence().send([]), "^tokens: an empty segment"),
            (lambda: served.sequence().send("the king"), "^tokens: a str; give a segment's ids")):
        with pytest.raises(DataError, match=line):
            call()
    info = served.info
    mems = np.zeros((info["n_layer"], 2, 3, info["d_model"]), np.float32)  # two rows
    with pytest.raises(DataError, match=r"^mems: 2 row\(s\) \(axis 1 of shape .*\), tokens 1: "
                                        "one for each row of tokens"):
        served.predict("score", tokens=[[1, 2]], targets=[[2, 3]], mems=mems)
    with pytest.raises(DataError, match="^tokens: an empty segment"):
        served.predict("score", tokens=np.zeros((1, 0), np.int32),
                       targets=np.zeros((1, 0), np.int32), mems=mems[:, :1])


@OWN_HANDLING
def test_steps_memory_length_is_bounded_by_the_memory_not_the_vocabulary(served_txl):
    """``step``'s memory_length was checked as a token id: chaining step's own
    new_memory_length was refused past the vocabulary's size, and a length past ``mem_len`` was
    answered with a mask that let queries see more than ``same_length`` allows. Now [0, mem_len]
    in the API and in the signature itself."""
    import tensorflow as tf
    served = served_txl
    info = served.info
    mem_len = info["mem_len"]
    memory = np.zeros((1, info["n_layer"], mem_len, info["d_model"]), np.float32)
    tokens = np.ones((1, 3), np.int32)
    inputs = {"tokens": tokens, "targets": tokens, "memory": memory}
    out = served.predict("step", **inputs, memory_length=[[mem_len - 2]])
    assert out["new_memory_length"].tolist() == [[mem_len]]  # chained: taken back as it is
    again = served.predict("step", **{**inputs, "memory": out["new_memory"]},
                           memory_length=out["new_memory_length"])
    assert again["new_memory_length"].tolist() == [[mem_len]]
    for length in (mem_len + 1, -1):
        with pytest.raises(DataError, match=rf"^memory_length: a length of {length} is outside "
                                            rf"\[0, {mem_len}\] \(mem_len {mem_len}\)"):
            served.predict("step", **inputs, memory_length=[[length]])
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=rf"memory_length: must be in \[0, {mem_len}\]"):
            served._signatures["step"](**{k: tf.constant(v) for k, v in inputs.items()},
                                       memory_length=tf.constant([[length]]))


@OWN_HANDLING
def test_predict_refuses_ids_the_server_refuses_before_any_cast(served_txl):
    """Transformer-XL's ids checked against the signature's dtype and the vocabulary before
    they become int32 (a cast wrapped 2**32 + 5 to 5 and cut 5.9 to 5: the answer for ids
    nobody gave); a segment over ``max_segment`` refused as the server refuses it; the
    signature's own errors (lengths that differ) in one line."""
    served = served_txl
    info = served.info
    vocab, layers, width = info["vocab_size"], info["n_layer"], info["d_model"]
    mems = np.zeros((layers, 1, 0, width), np.float32)
    good = served.predict("score", tokens=[[2, 5]], targets=[[3, 4]], mems=mems)
    np.testing.assert_array_equal(
        served.predict("score", tokens=np.array([[2, 5]], np.int64), targets=[[3.0, 4.0]],
                       mems=mems)["nll"], good["nll"])
    for tokens, targets, line in (
            ([[2, 2**32 + 5]], [[3, 4]], rf"^tokens: id 4294967301 is outside \[0, {vocab - 1}\] "
                                         rf"\(vocab_size {vocab}\)$"),
            ([[2, -(2**32) + 5]], [[3, 4]], r"^tokens: id -4294967291 is outside "),
            ([[2, 5.9]], [[3, 4]], r"^tokens: 5\.9 is not an integer id$"),
            ([[2, 5]], [[3, 2**32 + 4]], r"^targets: id 4294967300 is outside "),
            ([[2, 5]], [[3, vocab]], rf"^targets: id {vocab} is outside "),
            ([[2, 5]], [["a", "b"]], r"^targets: <U1 values; give integer ids$"),
            ([[2, 5], [1]], [[3, 4]], r"^tokens: not a rectangular array of ids"),
            ([[2, 5, 6]], [[3, 4]], r"^targets: shape \(1, 2\), tokens \(1, 3\): a target for "
                                    "each token$"),
            (np.zeros((0, 2), np.int32), np.zeros((0, 2), np.int32), r"^tokens: an empty batch$"),
            ([[1] * (int(info["max_segment"]) + 1)], [[1] * (int(info["max_segment"]) + 1)],
             rf"^tokens: a segment of {int(info['max_segment']) + 1} positions; this model "
             rf"takes at most {info['max_segment']} a call")):
        with pytest.raises(DataError, match=line) as e:
            served.predict("score", tokens=tokens, targets=targets, mems=mems)
        assert "\n" not in str(e.value), str(e.value)
    with pytest.raises(DataError, match=rf"^mems: 2 row\(s\) \(axis 1 of shape \({layers}, 2, 0, "
                                        rf"{width}\)\), tokens 1: one for each row of tokens$"):
        served.predict("score", tokens=[[2, 5]], targets=[[3, 4]],
                       mems=np.zeros((layers, 2, 0, width), np.float32))
    with pytest.raises(DataError, match=rf"^mems: shape \(1, 0, {width}\); the signature takes "
                                        rf"\({layers}, any, any, {width}\)$"):
        served.predict("score", tokens=[[2, 5]], targets=[[3, 4]], mems=mems[0])


@OWN_HANDLING
def test_a_damaged_export_is_one_line_naming_what_is_wrong(exported_resnet, tmp_path):
    """Half a variables file (an IndexError without a path), labels.txt of random bytes (a
    UnicodeDecodeError), a client.json holding a list (an AttributeError): one line each."""
    import shutil
    export = exported_resnet[1]
    cut, labels, listed = (shutil.copytree(export, tmp_path / n) for n in ("cut", "lb", "ls"))
    data = next(cut.glob("variables/variables.data-*"))
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    with pytest.raises(DataError, match=f"^{re.escape(str(cut))}: the SavedModel does not load "
                                        r"\(.*\): its files are damaged or incomplete"):
        api.load(str(cut))
    (labels / "assets" / "labels.txt").write_bytes(bytes(range(128, 256)) * 4)
    with pytest.raises(DataError, match=f"^{re.escape(str(labels / 'assets' / 'labels.txt'))} "
                                        "is not the export's class names"):
        api.load(str(labels))
    (listed / "assets" / "client.json").write_text("[]")
    with pytest.raises(DataError, match=re.escape(
            f"{listed / 'assets' / 'client.json'} is not an export's client.json")):
        api.load(str(listed))


@OWN_HANDLING
def test_the_cards_model_index_publishes_no_cocos_minus_one(tmp_path):
    """pycocotools' -1 (no object of that size in the split) stays in ``scored``, what was
    computed, and out of the model-index, which the Hub reads as results; the rest are there
    with the Hub's metric types, read back by ``huggingface_hub``; weights with a licence keep
    it as the Hub's id, and another is 'other' with its name."""
    from huggingface_hub import ModelCard

    from common.export import card as cards
    logged = {f"DetectionBoxes_{v}": k for k, v in (
        ("AP", "Precision/mAP"), ("APs", "Precision/mAP (small)"),
        ("ARs", "Recall/AR@100 (small)"), ("ARl", "Recall/AR@100 (large)"))}
    values = {"AP": 0.25, "APs": -1.0, "ARs": -1.0, "ARl": 0.5}
    for licence, hub in (("BSD-3-Clause", ("bsd-3-clause", None)),
                         ("Some-Terms-1.0", ("other", "Some-Terms-1.0"))):
        card = cards.build(model="ssd320", pipeline_tag="object-detection",
                           data={"dataset": None, "description": "generated shapes"},
                           weights={"license": licence}, recipe=None,
                           scored={"split": "validation", "step": 3, "metrics": {
                               name: values[short] for name, short in logged.items()}},
                           parameter_count=10, exported_weights_sha256="0" * 64,
                           triton_model="ssd320")
        cards.write(str(tmp_path), card)
        front = ModelCard.load(tmp_path / cards.CARD_README).data
        assert (front.license, front.license_name) == hub
        assert {(r.metric_type, r.metric_name, r.metric_value, r.dataset_type, r.dataset_name)
                for r in front.eval_results} == {
            ("mean_average_precision", "COCO box AP", 0.25, "custom", "generated shapes"),
            ("mean_average_recall", "COCO box AR large", 0.5, "custom", "generated shapes")}
        assert card["scored"]["metrics"]["DetectionBoxes_Precision/mAP (small)"] == -1.0
        assert front.to_dict()["model-index"] == card["model-index"]


@OWN_HANDLING
def test_the_card_names_the_canonical_dataset_only_for_its_own_files(tmp_path):
    """ImageNet-1k for a labels.txt of 1,000 WordNet ids, COCO 2017 for COCO's 80 categories,
    WikiText-103 for its 267,735 words; anything else by what it holds; no data: synthetic."""
    from common.export.module import data_read
    from rn50 import exports as rn50_exports
    from ssd import exports as ssd_exports
    from txl import exports as txl_exports

    def read(module, name, files):
        folder = tmp_path / name
        folder.mkdir()
        for file, text in files.items():
            (folder / file).write_text(text)
        data_dir = str(folder) if files else None
        return data_read({"data": module._data_read(data_dir, name)}, data_dir)
    synsets = "".join(f"n{i:08d}\n" for i in range(1000))
    assert read(rn50_exports, "resnet50v1.5", {"labels.txt": synsets}) == {
        "dataset": "ILSVRC/imagenet-1k", "description": "ImageNet-1k (ILSVRC2012)"}
    assert read(rn50_exports, "a", {"labels.txt": synsets.replace("n00000007", "cat")}) == {
        "dataset": None, "description": "an image dataset of 1000 classes (n00000000, "
                                        "n00000001, n00000002, ...)"}
    assert read(rn50_exports, "b", {}) == {"dataset": None, "description": "synthetic data"}
    coco = [{"id": i, "name": "person" if i == 1 else "toothbrush" if i == 90 else f"c{i}"}
            for i in [*range(1, 80), 90]]
    assert read(ssd_exports, "ssd320", {"label_map.json": json.dumps({"categories": coco})}) == {
        "dataset": "detection-datasets/coco", "description": "COCO 2017"}
    assert read(ssd_exports, "c", {"label_map.json": json.dumps({"categories": coco[:2]})}) == {
        "dataset": None, "description": "a detection dataset of 2 categories (person, c2)"}
    assert read(txl_exports, "transformerxl", {"corpus-info.json": json.dumps({
        "vocab_size": 267735, "tokens": {"train": 103227021}})}) == {
        "dataset": "Salesforce/wikitext", "description": "WikiText-103"}
    assert read(txl_exports, "d", {"corpus-info.json": json.dumps({
        "vocab_size": 29, "tokens": {"train": 9043}})}) == {
        "dataset": None, "description": "a text corpus of 29 words (9,043 training tokens)"}


@OWN_HANDLING
def test_a_checkpoints_paths_and_records_are_checked_as_main_py_checks_them(tmp_path,
                                                                           exported_resnet):
    """A prefix with no such step said "train first"; a garbage scores.json dropped the card's
    scores without a word; an export into, inside or above the checkpoints (main.py refuses all
    three), through a file, or with its Triton repository inside it was written or was a raw
    Python error; an export's labels.txt was left open."""
    import gc
    import warnings
    ck = tmp_path / "ck"
    subprocess.run([sys.executable, os.path.join(ROOT, "resnet50v1.5", "main.py"), *TINY,
                    "--mode", "train", "--iter_unit", "batch", "--num_iter", "1",
                    "--results_dir", str(tmp_path / "r"), "--model_dir", str(ck)],
                   check=True, capture_output=True, timeout=600)
    with pytest.raises(DataError, match=f"^{re.escape(str(ck))}/ckpt-99: no such checkpoint in "
                                        f"{re.escape(str(ck))} \\(it holds ckpt-1\\)"):
        api.load(str(ck / "ckpt-99"))
    model = api.load(str(ck))
    for inside in (ck, ck / "export", tmp_path):
        with pytest.raises(DataError, match=f"^export_dir {re.escape(str(inside))} and the "
                                            "checkpoints' directory .* need directories of "
                                            "their own"):
            model.export(str(inside))
    (tmp_path / "file").write_text("")
    with pytest.raises(DataError, match="cannot write the export there"):
        model.export(str(tmp_path / "file" / "sub"))
    out = tmp_path / "out"
    with pytest.raises(DataError, match=f"^triton {re.escape(str(out))}/triton is inside "
                                        f"export_dir {re.escape(str(out))}"):
        model.export(str(out), triton=str(out / "triton"))
    (ck / "scores.json").write_text("{not json")
    with pytest.raises(DataError, match=f"^{re.escape(str(ck))}/scores.json is not what "
                                        "evaluation recorded"):
        api.load(str(ck))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        served = api.load(str(exported_resnet[1]))
        assert served.labels
        del served
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
