"""The import structure: no circle among the repository's modules, sub-packages included
(``common.export``'s modules) and counting the imports inside functions (which hid the circles
there were: common.tools.profiling <-> common.tools.op_table, txl.config <-> txl.model, and the
export package's ``__init__`` <-> ``onnx_convert`` and ``tftrt``)."""
import ast
import os

from conftest import ROOT, setup_py

# The top-level packages (name -> folder), as the wheel has them: setup.py's, from
# common/models.py's table.
PACKAGES = setup_py().TOP_LEVEL


def _modules(root: str, packages: dict[str, str]) -> dict[str, str]:
    """Every module of ``packages`` (name -> folder under ``root``), sub-packages included:
    dotted name -> file."""
    paths = {}
    for package, folder in packages.items():
        base = os.path.join(root, folder)
        for d, _, names in os.walk(base):
            if "__init__.py" not in names:
                continue
            rel = os.path.relpath(d, base)
            prefix = ".".join([package, *([] if rel == "." else rel.split(os.sep))])
            for f in sorted(names):
                if f.endswith(".py"):
                    paths[prefix if f == "__init__.py" else f"{prefix}.{f[:-3]}"] = \
                        os.path.join(d, f)
    return paths


def _imports(root: str = ROOT, packages: dict[str, str] = PACKAGES) -> dict[str, set[str]]:
    """Module -> the repository modules it imports anywhere in its source (inside functions
    too): every name of ``from a.b import c, d`` that is a module, else the module ``a.b``."""
    paths = _modules(root, packages)
    edges = {m: set() for m in paths}
    for module, path in paths.items():
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                edges[module] |= {a.name for a in node.names if a.name in paths}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = {f"{node.module}.{a.name}" for a in node.names} & set(paths)
                edges[module] |= names or ({node.module} & set(paths))
    for module in edges:
        edges[module].discard(module)
    return edges


def _cycles(edges):
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    edges = _imports()
    assert "common.tools.op_table" in edges["common.tools.profiling"]  # the checker sees imports
    assert "common.export.module" in edges["common.export.onnx_convert"]  # in a function,
    assert "common.export.writer" in edges["common.export"]  # in a sub-package
    assert _cycles(edges) == []
    # A circle is found where there is one.
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_a_circle_inside_a_sub_package_through_a_function_level_import_is_found(tmp_path):
    """The shape the export package had: its ``__init__`` imports a module that imports the
    package back inside a function."""
    pkg = tmp_path / "top" / "sub"
    pkg.mkdir(parents=True)
    (tmp_path / "top" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from top.sub import convert\n")
    (pkg / "convert.py").write_text("def f():\n    from top import sub\n    return sub\n")
    (pkg / "leaf.py").write_text("import os\n")
    edges = _imports(str(tmp_path), {"top": "top"})
    assert sorted(edges) == ["top", "top.sub", "top.sub.convert", "top.sub.leaf"]
    assert _cycles(edges) == [["top.sub", "top.sub.convert"]]


def _script_imports() -> dict[str, set[str]]:
    """Each model script (``*/scripts/*.py``, ``main.py``, ...) -> the top-level packages it
    imports."""
    out = {}
    for folder in ("resnet50v1.5", "ssd320", "transformerxl"):
        for d, _, names in os.walk(os.path.join(ROOT, folder)):
            for f in names:
                if f.endswith(".py"):
                    path = os.path.join(d, f)
                    with open(path, encoding="utf-8") as fh:
                        tree = ast.parse(fh.read())
                    found = set()
                    for node in ast.walk(tree):
                        if isinstance(node, ast.Import):
                            found |= {a.name.split(".")[0] for a in node.names}
                        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                            found.add(node.module.split(".")[0])
                    out[os.path.relpath(path, ROOT)] = found
    return out


def test_benchtools_stands_above_the_models():
    """benchtools measures the models through the model table (common/models.py: each model's
    ``benchmarks`` module), never naming a model package; the models never import benchtools."""
    edges = _imports()
    named = {m: sorted(e for e in es if e.split(".")[0] in ("rn50", "ssd", "txl"))
             for m, es in edges.items() if m.startswith("benchtools")}
    assert {m: e for m, e in named.items() if e} == {}
    scripts = _script_imports()
    assert {p: "benchtools" for p, found in scripts.items() if "benchtools" in found} == {}
    assert len(scripts) > 30  # every model file was read


def _definitions(source: str) -> dict[str, str]:
    """Each top-level function and class of ``source``: its name -> its arguments and body
    without the docstring, as the parser reads them (comments, formatting and the name do not
    count)."""
    out = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            body = node.body[1:] if (node.body and isinstance(node.body[0], ast.Expr) and
                                     isinstance(node.body[0].value, ast.Constant)) else node.body
            args = ast.dump(node.args) if isinstance(node, ast.FunctionDef) else ""
            out[node.name] = args + ast.dump(ast.Module(body=body, type_ignores=[]))
    return out


def _copies(modules: dict[str, str]) -> list[str]:
    """``a.f = b.g`` for each function or class of one module written again in another (the
    same arguments and body), or a private helper's name defined in two."""
    seen: dict[str, str] = {}
    names: dict[str, str] = {}
    copies = []
    for module, source in sorted(modules.items()):
        for name, body in _definitions(source).items():
            where = f"{module}.{name}"
            if body in seen:
                copies.append(f"{seen[body]} = {where}")
            seen.setdefault(body, where)
            if name.startswith("_") and name in names and names[name] != module:
                copies.append(f"{names[name]}.{name} = {where}")
            names.setdefault(name, module)
    return copies


def test_serving_is_a_package_of_its_own():
    """serving/ (the clients, the server launchers, the load generator) runs in environments
    that hold tritonclient or PyTriton and not this project (Triton's SDK container,
    scripts/triton_env.sh's): it imports nothing of common/, benchtools or the models, and its
    modules share one connection module instead of writing its helpers again (the text client
    loaded the image client by path; free_ports, _positive and the error class were
    written twice)."""
    edges = _imports()
    serving = {m: es for m, es in edges.items() if m.split(".")[0] == "serving"}
    assert len(serving) >= 7, sorted(serving)
    outside = {m: sorted(e for e in es if e.split(".")[0] != "serving")
               for m, es in serving.items()}
    assert {m: e for m, e in outside.items() if e} == {}
    assert "serving.connection" in edges["serving.image_client"] & edges["serving.text_client"]
    sources = {m: open(path, encoding="utf-8").read()
               for m, path in _modules(ROOT, {"serving": "serving"}).items()}
    assert _copies(sources) == []
    # A copy is found where there is one: a helper written again under another name, or a
    # private helper's name defined twice.
    helper = 'def {}(text):\n    """{}"""\n    value = int(text)\n    return value\n'
    assert _copies({"a": helper.format("_positive", "doc"), "b": helper.format("pos", "other"),
                    "c": "def _positive(x):\n    return x\n"}) == [
        "a._positive = b.pos", "a._positive = c._positive"]


# common/'s rooms, lowest first: a module imports only from its own room or a lower one.
# Errors at the bottom; the runtime around a run; the flat modules everything uses (files,
# flags, precision, the stack's versions, the models' table, how code is traced); the building
# blocks (layers,
# data, measurement tools, checkpoints); the Task, the contract a model fills; the export;
# the step and loop core; then the Trainer, the runner and the entry point, where the models
# meet them.
LEVELS = [["common.errors"], ["common.runtime"],
          ["common.files", "common.flags", "common.precision", "common.versions",
           "common.models", "common.main_py", "common.ranks", "common.graph"],
          ["common.layers", "common.data", "common.tools", "common.checkpoint"],
          ["common.task"], ["common.export"], ["common.core"], ["common.trainer"],
          ["common.runner"], ["common.entry", "common.api"]]
FLAT_LIMIT = 15  # modules directly in common/ (its __init__ counted)


def _room(module: str) -> str:
    """The room of a common module: its sub-package, else itself."""
    parts = module.split(".")
    return ".".join(parts[:2])


def test_common_is_grouped_into_rooms_whose_imports_run_one_way():
    """common/ holds at most FLAT_LIMIT modules of its own (it was a flat floor of 47); every
    other module is in a sub-package (core, runtime, layers, data, tools, checkpoint, export),
    and no module imports a higher room: the sub-packages never reach the trainer or the
    runner, the runtime never the loop."""
    flat = [f for f in os.listdir(os.path.join(ROOT, "common")) if f.endswith(".py")]
    assert len(flat) <= FLAT_LIMIT, sorted(flat)
    rank = {room: n for n, rooms in enumerate(LEVELS) for room in rooms}
    edges = _imports()
    rooms = {_room(m) for m in edges if m.startswith("common.")}
    assert rooms == set(rank), sorted(rooms ^ set(rank))  # every room placed, none stale
    upward = sorted(f"{m} -> {d}" for m, deps in edges.items() if m.startswith("common.")
                    for d in deps if d.startswith("common.") and _room(d) != _room(m)
                    and rank[_room(d)] > rank[_room(m)])
    assert upward == []
    # The check sees an upward import where there is one.
    assert rank[_room("common.core.loop")] > rank[_room("common.runtime.devices")]


def test_imagenets_statistics_are_defined_once():
    """ImageNet's mean and standard deviation, in each convention (NVIDIA's and torchvision's
    on the 0..255 scale, torchvision's on 0..1 as it writes them), are written out in
    common/data/imagenet_stats.py alone and imported everywhere else: any three of their
    numbers in a row, in any spelling (a tuple, a list, ``a/b/c``, ``x 255`` products
    written out), found anywhere else outside the tests fails."""
    import re

    from conftest import tracked_files

    from common.data import imagenet_stats as stats
    triples = [stats.MEAN, stats.STD, stats.UNIT_MEAN, stats.UNIT_STD, stats.TORCH_MEAN]

    def spelled(values):  # 0.485 or .485, 57.12 or 57.120, with any separator between
        nums = [re.escape(f"{v:g}").replace(r"0\.", r"0?\.", 1) + "0*" for v in values]
        return re.compile(r"(?<![\d.])" + r"\s*[,/ ]\s*".join(nums) + r"(?!\d)")
    patterns = [spelled(t) for t in triples]
    found = sorted({rel for rel in tracked_files() if rel.endswith(".py")
                    and not rel.startswith("tests/") for p in patterns
                    if p.search(open(os.path.join(ROOT, rel), encoding="utf-8").read())})
    assert found == ["common/data/imagenet_stats.py"]
    # The patterns catch the spellings they are for.
    for text in ("(0.485, 0.456, 0.406)", "[.229,.224,.225]", "mean:123.675/116.28/103.53",
                 "58.395, 57.120, 57.375"):
        assert any(p.search(text) for p in patterns), text


def test_only_the_entry_point_edits_the_import_path():
    """``sys.path`` is changed in one place outside the tests, ``common/entry.py`` (every
    script's start: its own checkout first); the scripts run by path call it."""
    from conftest import tracked_files
    editing = []
    for rel in tracked_files():
        if not rel.endswith(".py") or rel.startswith("tests/"):
            continue
        tree = ast.parse(open(os.path.join(ROOT, rel), encoding="utf-8").read())
        for node in ast.walk(tree):
            target = (node.func.value if isinstance(node, ast.Call) and isinstance(
                node.func, ast.Attribute) else node.targets[0].value if isinstance(
                node, ast.Assign) and isinstance(node.targets[0], ast.Subscript) else None)
            if (isinstance(target, ast.Attribute) and target.attr == "path"
                    and isinstance(target.value, ast.Name) and target.value.id == "sys"):
                editing.append(f"{rel}:{node.lineno}")
    assert {e.split(":")[0] for e in editing} == {"common/entry.py"}, editing


def _bare_traces(source: str) -> list[int]:
    """The lines of ``source`` that make a ``tf.function`` or map a dataset themselves (a
    ``.map``/``.filter`` call) instead of through ``common.graph``, which traces them without
    AutoGraph."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef):  # a bare @tf.function (a call is visited below)
            lines += [d.lineno for d in node.decorator_list if ast.unparse(d) == "tf.function"]
        if not isinstance(node, ast.Call):
            continue
        if ast.unparse(node.func) == "tf.function" or (
                isinstance(node.func, ast.Attribute) and node.func.attr in ("map", "filter")):
            lines.append(node.lineno)
    return sorted(set(lines))


def test_no_bare_tf_function_or_dataset_map():
    """AutoGraph rewrote every function the training step, the evaluation, the input pipelines
    and the exports trace (87 of them over the three models) in every process: about 4 s of
    CPU in a tiny run (docs/performance/startup.md). This code is written with tf.cond and Python
    values, so it traces through ``common.graph`` (``function``, ``dataset_map``: without
    AutoGraph) and nowhere else; a new bare one fails here."""
    from conftest import tracked_files
    found = []
    for rel in tracked_files():
        if rel.endswith(".py") and not rel.startswith("tests/") and rel != "common/graph.py":
            source = open(os.path.join(ROOT, rel), encoding="utf-8").read()
            if "tf.function" in source or ".map(" in source or ".filter(" in source:
                found += [f"{rel}:{n}" for n in _bare_traces(source)]
    assert found == []
    # The check finds each kind where it is.
    assert _bare_traces(
        "@tf.function\ndef f(): pass\n"
        "g = tf.function(h, jit_compile=True, autograph=False)\n"
        "k = graph.function(h, jit_compile=True)\n"
        "ds = ds.map(parse)\n"
        "ds = graph.dataset_map(ds, parse)\n") == [1, 3, 5]


def test_every_model_has_every_touch_point_docs_adding_a_model_lists():
    """docs/adding_a_model.md's table of touch points, read as the checklist it is: for each
    model of common/models.py, every path the table names under NEWMODEL/ exists (the files its
    package row lists too), and the shared files it names mention the model."""
    import glob
    import re

    from common.models import MODELS
    text = open(os.path.join(ROOT, "docs", "adding_a_model.md"), encoding="utf-8").read()
    table = text.split("## The touch points", 1)[1].split("\n\n", 2)[1]
    rows = [ln.split(" | ", 1) for ln in table.splitlines()[2:] if ln.startswith("| `")]
    assert len(rows) >= 15, rows
    missing = []
    for model in MODELS.values():
        def here(path, model=model):
            return path.replace("NEWMODEL", model.directory).replace("newpkg", model.package)
        for where, what in rows:
            paths = re.findall(r"`([^`]+)`", where)
            for path in map(here, paths):
                if "{" in path:  # NEWMODEL/scripts/*_{1,8}GPU.sh
                    head, alts, tail = re.match(r"(.*)\{(.*)\}(.*)", path).groups()
                    found = [glob.glob(os.path.join(ROOT, head + a + tail)) for a in
                             alts.split(",")]
                    missing += [f"{head}{a}{tail}" for a, f in zip(alts.split(","), found)
                                if not f]
                elif model.directory in path or model.package in path or path in (
                        "slurm.sbatch",):
                    full = os.path.join(ROOT, model.directory, "scripts", path) \
                        if "/" not in path else os.path.join(ROOT, path)
                    if not os.path.exists(full):
                        missing.append(path)
                elif path in ("README.md", "scripts/gpu_smoke.sh"):
                    if model.directory not in open(os.path.join(ROOT, path)).read():
                        missing.append(f"{path} (no {model.directory})")
            if paths and paths[0].endswith("/newpkg/"):  # the package's files
                for f in re.findall(r"`(\w+\.py)`", what):
                    if not os.path.isfile(os.path.join(ROOT, model.folder, f)):
                        missing.append(f"{model.folder}/{f}")
            if paths and paths[0] == "tests/":  # its row in each of these tests
                for f in re.findall(r"`(?:tests/)?(test_\w+\.py)`", what):
                    body = open(os.path.join(ROOT, "tests", f)).read()
                    if model.package not in body and model.directory not in body:
                        missing.append(f"tests/{f} (no {model.package})")
    assert missing == []
