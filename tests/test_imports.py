"""The import graph, read with ``ast`` (no module is executed): no circles, no private names.

Every ``import`` counts, at module level and inside functions: a function-local import that
runs back up the graph is a circle all the same, only postponed to the first call.

Rules checked over ``src/flashlesson``, ``kernels_numba`` (with ``lesson/``) and ``reference``:

(a) no import circle among the modules of one package (the failure names the cycle);
(b) no ``from X import _private`` across files, nor ``module._private`` read off another
    project module (a name one file shares is public);
(c) ``reference/`` imports only numpy, the standard library and itself (it is the oracle);
(d) ``kernels_numba`` imports nothing of ``flashlesson`` outside itself (the kernels sit below
    the library);
(e) nothing in the repository imports ``kernels_numba`` or ``reference`` as top-level names:
    they are installed as ``flashlesson.kernels_numba`` and ``flashlesson.reference``.
"""

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"flashlesson": ROOT / "src" / "flashlesson",
            "flashlesson.kernels_numba": ROOT / "kernels_numba",
            "flashlesson.reference": ROOT / "reference"}


def _package_of(module):
    """The entry of PACKAGES that holds ``module`` (the longest matching prefix), or None."""
    hits = [p for p in PACKAGES if module == p or module.startswith(p + ".")]
    return max(hits, key=len) if hits else None


def _module_name(package, root, path):
    parts = tuple(package.split(".")) + path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1]) if parts[-1] == "__init__" else ".".join(parts)


def _modules():
    """{dotted module name: (path, is_package)} for every module of the three packages."""
    out = {}
    for package, root in PACKAGES.items():
        for path in sorted(root.rglob("*.py")):
            out[_module_name(package, root, path)] = (path, path.name == "__init__.py")
    return out


MODULES = _modules()


def _resolve(current, is_package, node):
    """Yield (target module, imported name or None) for one Import/ImportFrom node.

    ``from pkg import sub`` where ``sub`` is a module gives an edge to ``pkg.sub``; otherwise
    the edge goes to ``pkg`` itself (its ``__init__``), with the name imported from it.
    """
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name, None
        return
    if node.level:
        base = current.split(".") if is_package else current.split(".")[:-1]
        base = base[:len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module
    for alias in node.names:
        sub = f"{source}.{alias.name}"
        if sub in MODULES:
            yield sub, None
        else:
            yield source, alias.name


def _imports():
    """{module: [(target, name, line)]} with every import in the file, at any depth."""
    graph = {}
    for name, (path, is_package) in MODULES.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        graph[name] = [(target, imported, node.lineno)
                       for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                       for target, imported in _resolve(name, is_package, node)]
    return graph


GRAPH = _imports()


def _where(module, line):
    return f"{MODULES[module][0].relative_to(ROOT)}:{line}"


def _cycles(graph):
    """Strongly connected components with more than one module (Tarjan), each as a list."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _one_cycle(graph, component):
    """A shortest closed path inside a strongly connected component, for the failure message."""
    members = set(component)
    start = component[0]
    paths, seen = {start: [start]}, {start}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph.get(v, ())):
                if w == start:
                    return paths[v] + [start]
                if w in members and w not in seen:
                    seen.add(w)
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    return component


def _package_graph(package):
    """Edges between modules of one package; a package's ``__init__`` counts as its own node."""
    graph = {}
    for module, edges in GRAPH.items():
        if _package_of(module) != package:
            continue
        graph[module] = {t for t, _, _ in edges
                         if _package_of(t) == package and t in MODULES and t != module}
    return graph


def test_the_graph_is_read():
    assert "flashlesson.attention_methods" in MODULES
    assert "flashlesson.kernels_numba.lesson.attention" in MODULES
    assert any(t == "flashlesson.kernels_numba.attention"
               for t, _, _ in GRAPH["flashlesson.attention_methods"])


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    (component,) = _cycles(graph)
    assert component == ["a", "b", "c"]
    assert _one_cycle(graph, component) == ["a", "b", "c", "a"]


def test_no_import_circle_in_a_package():
    found = []
    for package in PACKAGES:
        graph = _package_graph(package)
        for component in _cycles(graph):
            found.append(" -> ".join(_one_cycle(graph, component))
                         + f"   (component: {', '.join(component)})")
    assert not found, "import circles:\n" + "\n".join(found)


def test_no_private_name_imported_across_files():
    found = [f"{_where(module, line)}: from {target} import {name}"
             for module, edges in GRAPH.items() for target, name, line in edges
             if name and name.startswith("_") and not name.startswith("__") and target != module]
    assert not found, "private names imported across files:\n" + "\n".join(found)


def _private_attributes(module):
    """(line, "alias._name") for each ``_name`` read off another project module bound by an
    import in ``module`` (``from . import traffic`` … ``traffic._cdiv``)."""
    path, is_package = MODULES[module]
    tree = ast.parse(path.read_text(), filename=str(path))
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULES:
                    aliases[alias.asname or alias.name.split(".")[0]] = \
                        alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                for target, name in _resolve(module, is_package, _one(node, alias)):
                    if name is None and target in MODULES:
                        aliases[alias.asname or alias.name] = target
    return [(node.lineno, f"{node.value.id}.{node.attr}") for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and aliases.get(node.value.id, module) != module
            and node.attr.startswith("_") and not node.attr.startswith("__")]


def _one(node, alias):
    return ast.ImportFrom(module=node.module, names=[alias], level=node.level)


def test_no_private_name_read_off_another_module():
    found = [f"{_where(module, line)}: {text}" for module in MODULES
             for line, text in _private_attributes(module)]
    assert not found, "private names used across files:\n" + "\n".join(found)


def test_reference_imports_only_numpy_and_the_standard_library():
    allowed = set(sys.stdlib_module_names) | {"numpy", "__future__"}
    found = [f"{_where(module, line)}: {target}"
             for module, edges in GRAPH.items() if _package_of(module) == "flashlesson.reference"
             for target, _, line in edges
             if target.split(".")[0] not in allowed
             and _package_of(target) != "flashlesson.reference"]
    assert not found, "reference/ must stay numpy-only:\n" + "\n".join(found)


def test_kernels_never_import_flashlesson():
    found = [f"{_where(module, line)}: {target}"
             for module, edges in GRAPH.items()
             if _package_of(module) == "flashlesson.kernels_numba"
             for target, _, line in edges
             if target.split(".")[0] == "flashlesson"
             and _package_of(target) != "flashlesson.kernels_numba"]
    assert not found, "kernels_numba imports flashlesson:\n" + "\n".join(found)


def test_no_top_level_kernels_numba_or_reference():
    """The wheel has no top-level ``kernels_numba`` or ``reference``: an import of either name
    works only in a checkout, so none may be written anywhere in the repository."""
    found = []
    for folder in ("src", "kernels_numba", "reference", "tests", "examples", "scripts"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [node.module] if isinstance(node, ast.ImportFrom) and not node.level
                         else [])
                found += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names
                          if n and n.split(".")[0] in ("kernels_numba", "reference")]
    assert not found, ("import them as flashlesson.kernels_numba / flashlesson.reference:\n"
                       + "\n".join(found))
