"""The documentation resolves: every relative link of the READMEs, docs/ and the changelog
points at a file that exists (and at a heading that exists, when it names one), and every
command they quote names scripts that exist, modules that import, and main.py flags that the
model defines."""
import dataclasses
import glob
import importlib.util
import os
import re
import shlex
import subprocess
import types

import pytest
from conftest import ROOT

from common import flags, models

pytestmark = pytest.mark.one_stack(
    "pip", "the documents and the commands they quote are the same for both stacks")

DOCS = sorted({os.path.relpath(p, ROOT) for p in
               [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "CHANGELOG.md"),
                *glob.glob(os.path.join(ROOT, "*", "README.md")),
                *glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)]})
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```(\w*)$")


def _text(doc):
    with open(os.path.join(ROOT, doc)) as f:
        return f.read()


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    s = re.sub(r"[`*_]", "", heading.strip().lower())
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def _anchors(path: str) -> set[str]:
    out, code = set(), False
    with open(path) as f:
        for line in f:
            if FENCE.match(line.strip()):
                code = not code
            elif not code and line.startswith("#"):
                out.add(_slug(line.lstrip("#")))
    return out


def test_every_doc_is_found():
    assert {"README.md", "CHANGELOG.md", "resnet50v1.5/README.md", "ssd320/README.md",
            "transformerxl/README.md", "docs/adding_a_model.md"} <= set(DOCS)


@pytest.mark.parametrize("doc", DOCS)
def test_relative_links_resolve(doc):
    here = os.path.dirname(os.path.join(ROOT, doc))
    bad = []
    for target in LINK.findall(_text(doc)):
        if re.match(r"^[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(here, path)) if path else os.path.join(ROOT, doc)
        if not os.path.exists(full):
            bad.append(f"{target}: no such file")
        elif anchor and full.endswith(".md") and anchor not in _anchors(full):
            bad.append(f"{target}: no such heading")
    assert not bad, bad


def _commands(text):
    """Command lines quoted in fenced bash blocks and in inline code (continuations joined)."""
    lines, code, lang = [], False, ""
    for line in text.splitlines():
        m = FENCE.match(line.strip())
        if m:
            code, lang = not code, m.group(1)
            continue
        if code and lang in ("bash", "sh", ""):
            lines.append(line)
        elif not code:
            lines += [c for c in re.findall(r"`([^`]+)`", line)
                      if c.startswith(("python ", "bash ", "mpirun ", "sbatch "))]
    joined = "\n".join(lines).replace("\\\n", " ")
    for line in joined.splitlines():
        line = line.split(" #")[0].strip()
        if line and not line.startswith("#"):
            yield line


def _script_flags(script: str) -> set[str]:
    """The flags an argparse script defines, read from its source, or from the module a
    script started through common/entry.py runs (and prepare_cli's shard flags where it uses
    them): no process, no TensorFlow import."""
    with open(os.path.join(ROOT, script)) as f:
        source = f.read()
    target = re.search(r"""\(__file__, ["']([a-z0-9_.]+):""", source)
    if target:
        with open(importlib.util.find_spec(target.group(1)).origin) as f:
            source += f.read()
    names = set(re.findall(r"""add_argument\(\s*["']--([a-z][a-z0-9_]*)""", source))
    if "add_shards" in source or script.endswith("prepare_dataset.py"):
        names |= {"train_shards", "val_shards"}
    return names | {"help"}


def _model_flags():
    out = {}
    for name in models.MODELS:
        task = models.task_class(name)
        fv = flags.build(task.config.define_flags, task.config.FLAG_DEFAULTS)
        out[name] = set(fv) | {"help", "helpfull"}
    return out


@pytest.mark.parametrize("doc", DOCS)
def test_quoted_commands_name_what_exists(doc):
    model_flags = _model_flags()
    bad = []
    for line in _commands(_text(doc)):
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        words = [w for w in words if not re.match(r"^[A-Z_]+=", w)]  # environment first
        if not words or words[0] not in ("python", "python3", "bash", "mpirun", "sbatch",
                                         "horovodrun", "srun"):
            continue
        if words[0] in ("python", "python3") and len(words) > 2 and words[1] == "-m":
            if importlib.util.find_spec(words[2]) is None:
                bad.append(f"{line}: no module {words[2]}")
            continue  # a tool's own flags, not main.py's
        scripts = [w for w in words if w.endswith((".py", ".sh", ".sbatch")) and "/" in w]
        for s in scripts:
            if not os.path.exists(os.path.join(ROOT, s)):
                bad.append(f"{line}: no file {s}")
        if not scripts or not os.path.exists(os.path.join(ROOT, scripts[0])):
            continue
        script, model = scripts[0], scripts[0].split("/")[0]
        if script.endswith(("main.py", ".sh", ".sbatch")) and model in model_flags:
            known, whose = model_flags[model], f"{model}/main.py"  # launchers pass flags on
        elif script.endswith(".py"):
            known, whose = _script_flags(script), script
        else:
            continue
        for w in words[words.index(script) + 1:]:
            if w in ("|", "&&", ";", "--"):
                break
            if w.startswith("--") and len(w) > 2:
                name = w[2:].split("=")[0]
                if name not in known and not (name.startswith("no") and name[2:] in known):
                    bad.append(f"{line}: {whose} has no flag --{name}")
    assert not bad, bad


# `make test-slow` (the suite's time budget): the diff itself is test_profile's
# (test_training_benchmark_profile_types_the_convolution_time_and_diffs_per_op).
@pytest.mark.slow
def test_the_profile_diff_example_runs_as_written(tmp_path):
    """docs/tools.md's FP32-against-AMP example, pasted: the same commands at the tiny preset's
    size and in a temporary folder."""
    import re
    import sys
    text = open(os.path.join(ROOT, "docs", "tools.md")).read()
    (block,) = [b for b in re.findall(r"```bash\n(.*?)```", text, re.S)
                if "benchtools.profile_diff" in b]
    small = (block.replace("python ", f"{sys.executable} ")
             .replace("--num_iter 40", "--preset tiny --num_iter 8")
             .replace("--warmup_steps 10", "--warmup_steps 2").replace("--profile 20:25",
                                                                        "--profile 5:6")
             .replace("results/", f"{tmp_path}/"))
    assert small.count(str(tmp_path)) == 4 and small.count("--preset tiny") == 2
    proc = subprocess.run(["bash", "-c", "set -euo pipefail\n" + small], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "B / A" in proc.stdout or "B/A" in proc.stdout, proc.stdout[-2000:]


def test_adding_a_model_lists_the_task_interface_as_it_is():
    """docs/adding_a_model.md's table names every member of Task, and the
    class it belongs to: a hook added, removed or moved without the doc fails here."""
    from common import task
    text = open(os.path.join(ROOT, "docs", "adding_a_model.md")).read()
    table = text.split("### The interface, member by member")[1].split("\n## ")[0]
    documented = {}
    for m in re.finditer(r"^\| `(\w+)` \| ([\w, ]+) \|", table, re.M):
        documented[m.group(1)] = {c.strip() for c in m.group(2).split(",")}
    actual = {}
    for cls in (task.Task,):
        for name in vars(cls):
            if not name.startswith("_") or name == "__init__":
                actual.setdefault(name, set()).add(cls.__name__)
    assert documented == actual
    methods = [n for n, v in vars(task.Task).items()
               if n in actual and isinstance(v, (types.FunctionType, classmethod, property))]
    # A narrow interface: fewer than 26 methods (Task and RecordTask had 30; the records are a
    # declared value, RecordData, since).
    assert len(methods) < 26, methods


def test_adding_a_model_lists_the_exports_interface_as_it_is():
    """docs/adding_a_model.md's tables name every member of Exports and every field of its
    ExportSpec, and Exports has at most eight methods: what is the same for every model is
    functions that read them (it had grown to sixteen, five of them moved in from the Task;
    what the model exports moved to the spec)."""
    from common.export import module
    text = open(os.path.join(ROOT, "docs", "adding_a_model.md")).read()
    table = text.split("### The exports object, member by member")[1].split("\n### ")[0]
    documented = set(re.findall(r"^\| `(\w+)` \|", table, re.M))
    actual = {n for n in vars(module.Exports)
              if not n.startswith("_") or n == "__init__"}
    assert documented == actual
    methods = [n for n, v in vars(module.Exports).items()
               if isinstance(v, (types.FunctionType, classmethod, staticmethod, property))]
    assert len(methods) <= 8, methods
    spec = text.split("### The export spec, field by field")[1].split("\n## ")[0]
    assert set(re.findall(r"^\| `(\w+)` \|", spec, re.M)) == {
        f.name for f in dataclasses.fields(module.ExportSpec)}


NGC_SERVING_IMAGE = re.compile(r"nvcr\.io/nvidia/(tritonserver|tensorrt):(\d\d\.\d\d)")


def test_every_documented_serving_line_names_the_one_release():
    """A TensorRT engine loads only under the TensorRT that built it: the engines' TensorRT
    container and the Triton image that serves them must be one NGC release. Every Triton or
    TensorRT image a tracked file names (docs, scripts, Dockerfiles, code), and
    docker/Dockerfile.triton's RELEASE, is common/export/triton/tensorrt.py's NGC_RELEASE (25.02
    engines beside a 25.10 server failed this)."""
    from conftest import tracked_files

    from common.export.triton.tensorrt import NGC_RELEASE
    found = {}
    for rel in tracked_files():
        if rel.startswith("tests/") or not os.path.isfile(os.path.join(ROOT, rel)):
            continue
        try:
            text = _text(rel)
        except UnicodeDecodeError:
            continue
        for image, release in NGC_SERVING_IMAGE.findall(text):
            found.setdefault(release, set()).add(f"{rel} ({image})")
    dockerfile = _text("docker/Dockerfile.triton")
    (release,) = re.findall(r"^ARG RELEASE=(\S+)$", dockerfile, re.M)
    found.setdefault(release, set()).add("docker/Dockerfile.triton (ARG RELEASE)")
    assert "tritonserver:${RELEASE}-py3" in dockerfile
    assert set(found) == {NGC_RELEASE}, {r: sorted(w) for r, w in found.items()}
