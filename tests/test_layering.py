"""The package's import graph keeps its layers (read from the sources with `ast`, nothing is imported).

    ops -> kernels -> autotuner -> jit -> engine -> {language, transform} -> op -> layout -> ir -> {config, env}
    quant -> {ir, dtypes}   (the low-bit types sit beside config and env; their torch helpers beside layout)

A module imports only from its own package or from layers below it (language and transform, peers, not from
each other), the graph of imports has no cycle, no name starting with ``_`` is imported from another module,
tilex modules are imported at module level, and every ``tilex::`` device-function name is spelled in
``tilex/ir/intrin.py`` alone.
"""
import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "tilex"

LAYERS = {  # package -> rank (higher may import lower)
    "pass_config": -1,  # TileLang's pass-config keys, read by config
    "config": 0, "env": 0, "dtypes": 0, "math": 0, "log": 0,
    "ir": 1,
    "quant": 2,
    "layout": 2,
    "utils": 2,  # TileLang's torch and target helpers (tilex.utils.tensor / .target)
    "op": 3,
    "language": 4, "transform": 4,
    "engine": 5, "cuda": 5,  # cuda: TileLang's tilelang.cuda names (swizzle layouts over the language)
    "jit": 6, "contrib": 6,
    "autotuner": 7, "profiler": 7, "testing": 7, "carver": 7, "tools": 7,
    "kernels": 8,
    "ops": 9,
    "relax": 10,
}


def _module_name(path):
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules():
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


MODULES = _modules()


def _resolve(module, node):
    """Absolute name of the module a `from ... import` / `import` statement refers to."""
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = module.split(".")
            is_pkg = MODULES[module].name == "__init__.py"
            base = base[:len(base) - node.level + (1 if is_pkg else 0)]
            return ".".join(base + ([node.module] if node.module else []))
        return node.module or ""
    return None


def _imports(module):
    """[(target module, names imported, at module level, line)] of the tilex modules `module` imports."""
    tree = ast.parse(MODULES[module].read_text())
    top = set(id(n) for n in tree.body)
    for n in tree.body:  # `if TYPE_CHECKING:` / `try:` blocks at module level count as module level
        if isinstance(n, (ast.If, ast.Try)):
            top.update(id(c) for c in ast.walk(n))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "tilex" or alias.name.startswith("tilex."):
                    out.append((alias.name, [], id(node) in top, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            if target == "tilex" or target.startswith("tilex."):
                names = [a.name for a in node.names]
                subs = [f"{target}.{a}" for a in names if f"{target}.{a}" in MODULES]
                if subs:  # `from tilex.ir import intrin`: an import of the submodule
                    out += [(s, [], id(node) in top, node.lineno) for s in subs]
                    names = [a for a in names if f"{target}.{a}" not in MODULES]
                if names:
                    out.append((target, names, id(node) in top, node.lineno))
    return out


def _layer(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None  # None: the package face `tilex` itself


def _owner(target):
    """The module a dotted target names (a package's __init__ when it is one)."""
    while target and target not in MODULES:
        target = target.rsplit(".", 1)[0]
    return target


def test_no_wrong_way_imports():
    wrong = []
    for module in MODULES:
        src = _layer(module)
        if src is None:
            continue
        for target, _, _, line in _imports(module):
            dst = _layer(_owner(target))
            if dst is None:
                wrong.append(f"{module}:{line} imports the package face tilex")
                continue
            if dst == src:
                continue
            if LAYERS[dst] > LAYERS[src] or (LAYERS[dst] == LAYERS[src]):
                wrong.append(f"{module}:{line} -> {target} ({src} may not import {dst})")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles():
    graph = {m: sorted({_owner(t) for t, _, _, _ in _imports(m)} - {m}) for m in MODULES}
    index, low, stack, on_stack, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 and not _package_face_only(comp, graph):
                cycles.append(sorted(comp))

    for m in MODULES:
        if m not in index:
            visit(m)
    assert not cycles, cycles


def _package_face_only(comp, graph):
    """A package __init__ re-exporting its submodules forms a cycle with them by construction (the submodule
    imports its sibling through the package): that is not a dependency cycle between modules."""
    inits = [m for m in comp if MODULES[m].name == "__init__.py"]
    rest = [m for m in comp if m not in inits]
    # no two non-__init__ modules may depend on each other through the component
    for a in rest:
        for b in graph[a]:
            if b in rest:
                return False
    return True


def test_no_private_names_across_modules():
    bad = []
    for module in MODULES:
        for target, names, _, line in _imports(module):
            if _owner(target) != module:
                bad += [f"{module}:{line} imports {n} from {target}" for n in names if n.startswith("_")]
    assert not bad, "\n".join(bad)


def test_tilex_modules_imported_at_module_level():
    lazy = [f"{m}:{line} imports {t} inside a function" for m in MODULES for t, _, top, line in _imports(m) if not top]
    assert not lazy, "\n".join(lazy)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_device_function_names_only_in_intrin(module):
    if module == "tilex.ir.intrin":
        return
    assert '"tilex::' not in MODULES[module].read_text(), f"{module} spells a device-function name"
