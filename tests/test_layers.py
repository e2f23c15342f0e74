"""The package's import graph, read with ast: no import circles, and layers that point one way
(docs/ARCHITECTURE.md: the CLI calls the build or the server, the server calls the runtime, the
runtime calls a backend and our kernels).

Every import counts: at the top of a module, inside a function (a lazy import is still an arrow)
and under `if TYPE_CHECKING:` (a type that names a module above is a dependency on it).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "orin_llm"

# Top to bottom. A module may import modules of its own group and of any layer below; the groups of
# one layer are siblings that do not import each other. A module matches its longest prefix here.
# Modules that match none are the base (errors, arch, manifest, profile, client,
# policy, placement, trtllm_rules, ...): everyone may import them, and they import none of these.
LAYERS: list[tuple[str, ...]] = [
    ("orin_llm.cli",),
    ("orin_llm.bench", "orin_llm.doctor"),  # applications of the layers below
    ("orin_llm.server", "orin_llm.build"),
    # the planning wing (the planner, goals, the home model) and the backends beside the torch runtime:
    # siblings, so a backend knows nothing of homes and plans, and the planner drives any backend alike
    ("orin_llm.planning", "orin_llm.backends"),
    ("orin_llm.runtime",),
    # our C++ ops' wrappers, the quantized and packed layers that run them, the bf16 attention
    # (and the folder they are moving to): they know nothing of models, requests or engines
    ("orin_llm.kernels.native", "orin_llm.kernels.q8_dot", "orin_llm.kernels.int8_attention",
     "orin_llm.kernels.prefill_attention", "orin_llm.kernels.decode_layer", "orin_llm.kernels.quant",
     "orin_llm.kernels.packed", "orin_llm.kernels.attention", "orin_llm.runtime.kernels", "orin_llm.kernels"),
]
KERNEL_LAYER = len(LAYERS) - 1  # its groups are one group: the kernels import each other freely

# In the base although under server/: the socket path and the binding helpers that the daemon and the
# client (orin_llm/client.py) agree on; it imports nothing of the server.
BASE = ("orin_llm.server.sockets",)

# Circles allowed for now: none. An allowed circle that no longer exists fails below, so an allowance
# cannot outlive its fix.
ALLOWED_CIRCLES: list[set[str]] = []


# ---------------------------------------------------------------------------------- the graph


def modules(root: Path, package: str) -> dict[str, Path]:
    """Dotted name -> file, for every module of the package (a package is its __init__.py)."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _targets(name: str, path: Path, node: ast.Import | ast.ImportFrom, mods: dict[str, Path]) -> Iterable[str]:
    if isinstance(node, ast.Import):
        candidates = [alias.name for alias in node.names]
    else:
        if node.level:  # relative: from the module's package, one level up per extra dot
            package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
            base = package[:len(package) - (node.level - 1)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        # `from pkg import sub` imports the submodule when there is one, else a name of pkg
        candidates = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in mods else prefix for a in node.names]
    for target in candidates:
        while target not in mods and "." in target:  # a name inside a module: the module
            target = target.rsplit(".", 1)[0]
        if target in mods and target != name:
            yield target


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, anywhere in its source."""
    mods = modules(root, package)
    graph = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        graph[name] = {t for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                       for t in _targets(name, path, node, mods)}
    return graph


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components with more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def place(module: str) -> tuple[int, int]:
    """(layer, group) of a module; the base is (len(LAYERS), 0)."""
    if any(module == b or module.startswith(b + ".") for b in BASE):
        return len(LAYERS), 0
    best, where = "", (len(LAYERS), 0)
    for layer, groups in enumerate(LAYERS):
        for group, prefix in enumerate(groups):
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best):
                best, where = prefix, (layer, 0 if layer == KERNEL_LAYER else group)
    return where


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Imports that point up the layers, or across to a sibling group."""
    bad = []
    for module, targets in sorted(graph.items()):
        layer, group = place(module)
        for target in sorted(targets):
            t_layer, t_group = place(target)
            if t_layer < layer or (t_layer == layer and t_group != group):
                bad.append(f"{module} -> {target}")
    return bad


# ---------------------------------------------------------------------------------- the contract


def test_no_import_circles_in_the_package():
    found = circles(import_graph(ROOT, PACKAGE))
    unexpected = [sorted(c) for c in found if c not in ALLOWED_CIRCLES]
    assert not unexpected, f"import circles (break each one: a module of its own, or a Protocol): {unexpected}"
    stale = [sorted(c) for c in ALLOWED_CIRCLES if c not in found]
    assert not stale, f"these allowed circles are gone: remove them from ALLOWED_CIRCLES: {stale}"


def test_imports_point_down_the_layers():
    bad = upward(import_graph(ROOT, PACKAGE))
    assert not bad, "imports that point up the layers (cli > bench, doctor > server | build > " \
                    "runtime > kernels > the base) or across siblings:\n" + "\n".join(bad)


def test_the_checks_catch_a_circle_and_an_upward_import(tmp_path):
    pkg = tmp_path / PACKAGE
    for rel, text in {
        "__init__.py": "",
        "errors.py": "from .server import app\n",  # the base importing a layer
        "server/__init__.py": "",
        "server/app.py": "from ..runtime.engine import Engine\n",
        "runtime/__init__.py": "",
        "runtime/engine.py": "def f():\n    from .generate import g\n",  # lazy: still an arrow
        "runtime/generate.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .engine import f\n",
        "kernels/__init__.py": "",
        "kernels/q8_dot.py": "from ..runtime import engine\n",  # a kernel importing the runtime
        "build/__init__.py": "",
        "build/pipeline.py": "import orin_llm.server.app\n",  # a sibling
    }.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    graph = import_graph(tmp_path, PACKAGE)
    assert circles(graph) == [{"orin_llm.runtime.engine", "orin_llm.runtime.generate"}]
    assert upward(graph) == ["orin_llm.build.pipeline -> orin_llm.server.app",
                             "orin_llm.errors -> orin_llm.server.app",
                             "orin_llm.kernels.q8_dot -> orin_llm.runtime.engine"]


def test_only_the_bindings_module_imports_tensorrt_llm():
    """One import boundary (backends/trtllm/bindings.py): TensorRT-LLM is imported there alone, so the
    tests' fake replaces it in one place and a machine without it fails in one place, with its hint."""
    importers = set()
    for name, path in modules(ROOT, PACKAGE).items():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            if any(n == "tensorrt_llm" or n.startswith("tensorrt_llm.") for n in names):
                importers.add(name)
    assert importers == {"orin_llm.backends.trtllm.bindings"}
