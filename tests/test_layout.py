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
