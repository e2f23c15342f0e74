"""The torch runtime's request path imports one way: the engine imports the scheduler, the model
runner and the decider, they import the request (generate.py), and none of them imports back up,
not even for type checking (a circle there is what made the request drive the engine)."""

from __future__ import annotations

import ast
from pathlib import Path

import orin_llm.runtime

RUNTIME = Path(orin_llm.runtime.__file__).parent
REQUEST_PATH = ("engine", "scheduler", "model_runner", "decider", "generate")


def runtime_imports(module: str) -> set[str]:
    """The runtime modules `module` imports, at any level of its code (TYPE_CHECKING blocks too)."""
    tree = ast.parse((RUNTIME / f"{module}.py").read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            names = [node.module] if node.module else [a.name for a in node.names]
            found |= {n.split(".")[0] for n in names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("orin_llm.runtime."):
            found.add(node.module.split(".")[2])
    return {m for m in found if (RUNTIME / f"{m}.py").is_file()}


def reachable(start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for m in runtime_imports(todo.pop()):
            if m not in seen:
                seen.add(m)
                todo.append(m)
    return seen


def test_no_module_on_the_request_path_imports_one_that_imports_it():
    circles = {m: sorted(m2 for m2 in reachable(m) if m in reachable(m2)) for m in REQUEST_PATH}
    assert circles == {m: [] for m in REQUEST_PATH}


def test_the_request_and_its_changers_do_not_import_the_engine():
    for module in ("scheduler", "model_runner", "decider", "generate"):
        assert "engine" not in reachable(module), module
    assert "scheduler" not in reachable("generate") and "model_runner" not in reachable("generate")
