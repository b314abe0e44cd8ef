"""The house's import rules, read from the source with `ast` (nothing imported): no import circle anywhere in the
tree (module-level and function-level imports alike: src/fic, trainers as fic.trainers, eval as fic.eval, and the
reproduce/ scripts), and the core (src/fic) imports neither fic.trainers nor fic.eval except the entry point that
dispatches (fic.cli)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREES = {"src/fic": "fic", "trainers": "fic.trainers", "eval": "fic.eval", "reproduce": ""}
DISPATCHERS = {"fic.cli"}  # the core's entry point may name every method and evaluation


def modules() -> dict[str, Path]:
    out = {}
    for folder, prefix in TREES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join(([prefix] if prefix else []) + parts)
            if name:
                out[name] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The tree's modules that `name` imports anywhere in its body (a `from pkg import sub` counts as `pkg.sub`
    when that is a module)."""
    targets = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([base] if base else []))
            targets += [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    found = set()
    for target in targets:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    return found


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
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
                found.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_anywhere_in_the_tree():
    known = modules()
    edges = {name: imports(name, path, known) for name, path in known.items()}
    assert len(known) > 100 and edges["fic.cli"]  # the tree was read
    assert cycles(edges) == []


def test_the_cycle_finder_sees_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_core_imports_no_trainer_and_no_evaluation():
    known = modules()
    core = {n: p for n, p in known.items() if n.startswith("fic.") and p.is_relative_to(ROOT / "src" / "fic")}
    upper = ("fic.trainers", "fic.eval")
    bad = {name: sorted(t for t in imports(name, path, known) if t in upper or t.startswith(tuple(f"{u}." for u in upper)))
           for name, path in core.items() if name not in DISPATCHERS}  # fmt: skip
    assert {name: targets for name, targets in bad.items() if targets} == {}
