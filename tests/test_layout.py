"""The import structure: no circle among the repository's modules, counting the imports inside
functions (which hid the two there were: common.profiling <-> common.op_table and txl.config
<-> txl.model)."""
import ast
import os

from conftest import ROOT

PACKAGES = {"common": "common", "benchtools": "benchtools", "rn50": "resnet50v1.5/rn50",
            "ssd": "ssd320/ssd", "txl": "transformerxl/txl"}


def _imports() -> dict[str, set[str]]:
    """Module -> the repository modules it imports anywhere in its source."""
    paths = {}
    for package, folder in PACKAGES.items():
        for f in sorted(os.listdir(os.path.join(ROOT, folder))):
            if f.endswith(".py"):
                name = package if f == "__init__.py" else f"{package}.{f[:-3]}"
                paths[name] = os.path.join(ROOT, folder, f)
    edges = {m: set() for m in paths}
    for module, path in paths.items():
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
            found = [n for n in names if n in paths]
            if found:
                edges[module].add(found[0])
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
    assert "common.op_table" in edges["common.profiling"]  # the checker sees imports
    assert _cycles(edges) == []
    # A circle is found where there is one.
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


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
    """benchtools measures the models through the model table (common/presets.py: each model's
    ``benchmarks`` module), never naming a model package; the models never import benchtools."""
    edges = _imports()
    named = {m: sorted(e for e in es if e.split(".")[0] in ("rn50", "ssd", "txl"))
             for m, es in edges.items() if m.startswith("benchtools")}
    assert {m: e for m, e in named.items() if e} == {}
    scripts = _script_imports()
    assert {p: "benchtools" for p, found in scripts.items() if "benchtools" in found} == {}
    assert len(scripts) > 30  # every model file was read
