"""What a launch of a tile program looks like to the wave model: its grid size G (thread blocks) and main-loop
count L (iterations of its pipelined loop), as functions of the program's symbolic sizes.

Read from the program as the frontend writes it: G is the product of the ``blockIdx`` extents of its T.Kernel,
L the product of the extents of its T.Pipelined loops (1 without one). A persistent or stream-K lowering later
changes the grid the GPU sees, not the tiles to compute, which is what G counts here.
"""
from __future__ import annotations

import numpy as np
from tvm import tirx

from tilex.ir.names import NUM_STAGES
from tilex.ir.visit import dtype_of, walk

__all__ = ["LaunchShape", "launch_shape", "expr_to_json", "expr_from_json"]


class LaunchShape:
    """G and L of one program as expressions of its symbolic sizes; :meth:`at` evaluates them."""

    def __init__(self, grid_extents, loop_extents, variables, threads=1):
        self.threads = int(threads)  # threads per block as the program declares them (T.Kernel's threads=)
        self.grid_extents = list(grid_extents)
        self.loop_extents = list(loop_extents)
        self.variables = {v.name: v for v in variables}
        self._eval = None

    def at(self, **sizes) -> tuple[int, int]:
        """(G, L) for the given values of the symbolic sizes (by name); every size the extents use is needed."""
        grid, loops = self._evaluate(sizes)
        return int(grid), int(loops)

    def at_many(self, **sizes):
        """(G, L) as int64 numpy arrays for arrays of size values (broadcast together)."""
        arrays = {k: np.asarray(v, dtype=np.int64) for k, v in sizes.items()}
        grid, loops = self._evaluate(arrays)
        shape = np.broadcast_shapes(*(a.shape for a in arrays.values())) if arrays else ()
        return np.broadcast_to(grid, shape).astype(np.int64), np.broadcast_to(loops, shape).astype(np.int64)

    def to_json(self) -> dict:
        """The extents as JSON (:func:`expr_to_json`), for an exported DynamicKernel."""
        return {"threads": self.threads, "grid": [expr_to_json(e) for e in self.grid_extents],
                "loops": [expr_to_json(e) for e in self.loop_extents],
                "variables": [[v.name, dtype_of(v)] for v in self.variables.values()]}

    @classmethod
    def from_json(cls, data: dict) -> "LaunchShape":
        variables = {name: tirx.Var(name, dtype) for name, dtype in data["variables"]}
        return cls([expr_from_json(e, variables) for e in data["grid"]],
                   [expr_from_json(e, variables) for e in data["loops"]], variables.values(), data["threads"])

    def _evaluate(self, sizes):
        unknown = set(sizes) - set(self.variables)
        if unknown:
            raise ValueError(f"launch_shape: the program has no symbolic size(s) {sorted(unknown)}; it has "
                             f"{sorted(self.variables)}")
        if self._eval is None:
            self._eval = ([_evaluator(e) for e in self.grid_extents], [_evaluator(e) for e in self.loop_extents])
        grid = 1
        for f in self._eval[0]:
            grid = grid * f(sizes)
        loops = 1
        for f in self._eval[1]:
            loops = loops * f(sizes)
        return grid, loops


def _trunc_div(a, b):
    return np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))


_BINARY = {tirx.Add: lambda a, b: a + b, tirx.Sub: lambda a, b: a - b, tirx.Mul: lambda a, b: a * b,
           tirx.FloorDiv: lambda a, b: a // b, tirx.FloorMod: lambda a, b: a % b, tirx.Div: _trunc_div,
           tirx.Mod: lambda a, b: a - _trunc_div(a, b) * b, tirx.Min: np.minimum, tirx.Max: np.maximum}


def expr_to_json(expr):
    """An integer extent (IntImm, size Var, Cast and the arithmetic of `_BINARY`) as nested JSON lists."""
    if isinstance(expr, tirx.IntImm):
        return ["int", int(expr), dtype_of(expr)]
    if isinstance(expr, tirx.Var):
        return ["var", expr.name]
    if isinstance(expr, tirx.Cast):
        return ["cast", dtype_of(expr), expr_to_json(expr.value)]
    if type(expr) in _BINARY:
        return [type(expr).__name__, expr_to_json(expr.a), expr_to_json(expr.b)]
    raise ValueError(f"launch_shape: cannot write {expr} ({type(expr).__name__}) as JSON")


def expr_from_json(data, variables):
    """The expression :func:`expr_to_json` wrote, its size variables taken from `variables` (name -> Var)."""
    kind = data[0]
    if kind == "int":
        return tirx.IntImm(data[2], data[1])
    if kind == "var":
        return variables[data[1]]
    if kind == "cast":
        return tirx.Cast(data[1], expr_from_json(data[2], variables))
    node = getattr(tirx, kind, None)
    if node not in _BINARY:
        raise ValueError(f"launch_shape: unknown expression kind {kind!r} in JSON")
    return node(expr_from_json(data[1], variables), expr_from_json(data[2], variables))


def _evaluator(expr):
    """`expr` (integer arithmetic of size variables) as a Python function of {name: value}: it is evaluated for
    every size a dispatch table covers, where TVM's simplifier would take a hundred microseconds a point."""
    if isinstance(expr, tirx.IntImm):
        v = int(expr)
        return lambda sizes: v
    if isinstance(expr, tirx.Var):
        name = expr.name

        def var(sizes):
            if name not in sizes:
                raise ValueError(f"launch_shape: the launch depends on '{name}', which was not given")
            return sizes[name]
        return var
    if isinstance(expr, tirx.Cast):
        return _evaluator(expr.value)
    op = _BINARY.get(type(expr))
    if op is None:
        raise ValueError(f"launch_shape: cannot evaluate {expr} ({type(expr).__name__}) on the host")
    fa, fb = _evaluator(expr.a), _evaluator(expr.b)
    return lambda sizes: op(fa(sizes), fb(sizes))


def launch_shape(func) -> LaunchShape:
    """The :class:`LaunchShape` of a tile program (a PrimFunc straight from the frontend)."""
    grid, loops, threads = [], [], []

    def on_attr(node):
        if node.attr_key == "thread_extent" and node.node.thread_tag.startswith("blockIdx"):
            grid.append(node.value)
        elif node.attr_key == "thread_extent" and node.node.thread_tag.startswith("threadIdx"):
            threads.append(int(node.value) if isinstance(node.value, tirx.IntImm) else 1)

    def on_for(node):
        if node.annotations is not None and NUM_STAGES in node.annotations:
            loops.append(node.extent)

    walk(func.body, [(tirx.AttrStmt, on_attr), (tirx.For, on_for)])
    sym = {}
    for p in func.params:
        if tirx.is_buffer_var(p):
            sym.update((d.name, d) for d in p.shape if isinstance(d, tirx.Var))
        elif dtype_of(p).startswith(("int", "uint")):
            sym[p.name] = p
    return LaunchShape(grid, loops, sym.values(), threads=int(np.prod(threads)) if threads else 1)
