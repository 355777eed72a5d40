"""Which values every thread of a block computes alike (block-uniform), for barrier placement (ThreadSync).

A block barrier inside a branch, or inside a loop, is only correct when every thread of the block takes the branch
(runs the loop's iterations) together: the others would never reach it. :class:`BlockUniformity` decides, for a
kernel body of flat per-thread TIR, which expressions are block-uniform, and which loops run differently in
different threads (a trip count or an early exit that is not uniform).

The rules are sound -- a value is called uniform only when every thread that evaluates it gets the same one --
and decided together, to the greatest fixed point (each fact starts uniform and turns per-thread when a rule
fails, until nothing changes):

* constants, kernel parameters and tensor sizes, block indices;
* a let variable whose value is uniform; the variable of a loop that is not divergent;
* a ``T.alloc_var`` scalar (a local buffer of one element) every write of which stores a uniform value and is
  reached by every thread alike (not under a per-thread condition, not in a divergent loop or a ``while`` whose
  condition is per-thread; never written through a pointer). A scalar updated from itself (``n = n - k``) stays
  uniform when ``k`` is; a scalar read before any write is taken to hold the same garbage in every thread
  (reading it is the program's error);
* a load at a uniform index of a global tensor the kernel never writes (parameters are taken not to alias, as
  the ``__restrict__`` kernels tilex emits assume; under ``T.annotate_restrict_buffers`` no tensor counts as
  read-only once any is written);
* a load at a uniform index of a shared tile whose every access TVM's barrier planning sees (loads, stores,
  ``tvm_access_ptr``; never ``address_of`` or its pointer handed to a call): the planning separates each write
  from every other thread's read of the same memory with a barrier, so the threads that read one element at one
  point read one value (the program's own protocols -- mbarriers between warp-specialized roles -- order their
  accesses the same way, or the program races);
* a pure operation (arithmetic, comparisons, casts, ``if_then_else``, pure extern math) of uniform operands.

Per-thread: the thread index, local arrays and fragments, opaque calls (shuffles, the value an atomic returns,
anything ``call_extern``), loads not covered above. A loop is divergent when its bounds are per-thread or when a
``break`` / ``continue`` inside it sits under a per-thread condition (threads leave it at different iterations).

``BlockUniformity(body, across_blocks=True)`` asks the same about every thread of the grid (for a grid barrier,
tilex.transform.grid_sync): block indices and shared memory (each block's own) are then per-thread too.
"""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx
from tvm.tirx.expr import CallEffectKind

from tilex.ir import intrin
from tilex.ir.visit import BufferLoadNode, walk

__all__ = ["BlockUniformity", "is_shared", "thread_vars", "launch_vars"]

_PURE_KINDS = (int(CallEffectKind.Pure.value), int(CallEffectKind.ExprAnnotation.value))
_EARLY_EXITS = ("tirx.break_loop", "tirx.continue_loop")
_SKIP = tvm_ffi.WalkResult.SKIP


def is_shared(buf) -> bool:
    return str(buf.scope()).startswith("shared")


def _is_global(buf) -> bool:
    return str(buf.scope()) in ("global", "")


def _is_scalar(buf) -> bool:
    if str(buf.scope()) != "local" or len(buf.shape) != 1:
        return False
    extent = buf.shape[0]
    return isinstance(extent, tirx.IntImm) and int(extent.value) == 1


def launch_vars(body, prefix: str) -> set:
    """The launch variables of the kernel body whose tag starts with `prefix` (``threadIdx``, ``blockIdx``)."""
    out = set()

    def on_attr(node):
        if node.attr_key == "thread_extent" and node.node.thread_tag.startswith(prefix):
            out.add(node.node.var)

    walk(body, (tirx.AttrStmt, on_attr))
    return out


def thread_vars(body) -> set:
    """The thread-index variables (``threadIdx.*``) the kernel body launches."""
    return launch_vars(body, "threadIdx")


def _op_name(call) -> str | None:
    return call.op.name if isinstance(call.op, tvm.ir.Op) else None


def _is_pure(call) -> bool:
    op = call.op
    if not isinstance(op, tvm.ir.Op):
        return False
    try:
        kind = op.get_attr("TCallEffectKind")
    except Exception:  # noqa: BLE001 - an op without the attribute is opaque
        return False
    return kind is not None and int(kind) in _PURE_KINDS


def _buffer_vars(expr) -> set:
    out = set()
    walk(expr, (tvm.ir.Var, lambda v: out.add(v) if tirx.is_buffer_var(v) else None))
    return out


def _is_early_exit(stmt) -> bool:
    if isinstance(stmt, (tirx.Break, tirx.Continue)):
        return True
    v = stmt.value if isinstance(stmt, tirx.Evaluate) else None
    return isinstance(v, tvm.ir.Call) and _op_name(v) in _EARLY_EXITS


class _MemoryUse:
    """How the kernel uses its buffers: the global tensors it writes, the shared tiles some access of which TVM's
    barrier planning does not see, and whether some parameters may alias. A buffer declared over another's memory
    (a DeclBuffer view) counts as that buffer."""

    def __init__(self, body):
        self.root = {}
        self.written = set()  # global buffers stored to, or whose address is taken / written through a pointer
        self.hidden = set()  # shared buffers accessed through address_of or a bare pointer
        self.pointed = set()  # local buffers written through a pointer (an access pointer, address_of, a bare one)
        self.may_alias = False

        def on_decl(node):
            bases = [b for b in _buffer_vars(node.data) if not b.same_as(node.buffer)]
            if bases:
                self.root[node.buffer] = bases[0]

        walk(body, (tirx.DeclBuffer, on_decl))

        def pointer_use(buf):
            buf = self.base(buf)
            if is_shared(buf):
                self.hidden.add(buf)
            elif _is_global(buf):
                self.written.add(buf)
            else:
                self.pointed.add(buf)

        def on_load(node, v):
            for i in node.indices:
                v.visit(i)

        def on_store(node, v):
            if _is_global(node.buffer):
                self.written.add(self.base(node.buffer))
            v.visit(node.value)
            for i in node.indices:
                v.visit(i)

        def on_call(node, v):
            name = _op_name(node)
            if name == "tirx.tvm_access_ptr":
                mask = node.args[4]
                m = int(mask.value) if isinstance(mask, tirx.IntImm) else 3
                for buf in _buffer_vars(node.args[1]):
                    if m & 2 and not is_shared(buf):
                        pointer_use(buf)
                for a in node.args[2:4]:
                    v.visit(a)
                return
            if name == "tirx.address_of" and isinstance(node.args[0], BufferLoadNode):
                arg = node.args[0]
                pointer_use(arg.source)
                for i in arg.indices:
                    v.visit(i)
                return
            if intrin.is_call(node, intrin.MAY_ALIAS):
                self.may_alias = True
            v.default_visit(node)

        def on_var(node, v):
            if tirx.is_buffer_var(node):  # a buffer handed on as a pointer (not a load, store or access pointer)
                pointer_use(node)

        def skip(node, v):
            return None  # a declaration is not a use

        tvm_ffi.structural_visit(body, [(BufferLoadNode, on_load), (tirx.BufferStore, on_store),
                                        (tvm.ir.Call, on_call), (tirx.AllocBuffer, skip), (tirx.DeclBuffer, skip),
                                        (tvm.ir.Var, on_var)])

    def base(self, buf):
        """The buffer whose memory `buf` is (itself unless it is a view)."""
        seen = 0
        while buf in self.root and seen < 16:
            buf, seen = self.root[buf], seen + 1
        return buf

    def read_only(self, buf) -> bool:
        if self.base(buf) in self.written:
            return False
        return not (self.may_alias and self.written)

    def visible(self, buf) -> bool:
        """Whether TVM's barrier planning sees every access of the shared tile `buf`."""
        return self.base(buf) not in self.hidden


class BlockUniformity:
    """The block-uniform values and the divergent loops of a kernel body (module docstring for the rules)."""

    def __init__(self, body, across_blocks: bool = False):
        self.body = body
        self.across_blocks = across_blocks
        self.threads = thread_vars(body)
        self.memory = _MemoryUse(body)
        self.variant = set(self.threads)  # variables whose value may differ between threads
        if across_blocks:
            self.variant |= launch_vars(body, "blockIdx")
        self.divergent = set()  # loops (For nodes) whose iterations differ between threads
        # candidates: the scalars the kernel stores to, none written through a pointer
        self.uniform_scalars = {b for b in self._scalars() if self.memory.base(b) not in self.memory.pointed}
        self._solve()

    # ---- queries ------------------------------------------------------------------------------------------------
    def uniform(self, expr) -> bool:
        """Whether every thread that evaluates `expr` gets the same value."""
        bad = []

        def on_var(v):
            if v in self.variant:
                bad.append(v)

        def on_load(node):
            buf = node.source
            if _is_scalar(buf):
                ok = buf in self.uniform_scalars
            elif _is_global(buf):
                ok = self.memory.read_only(buf)
            elif is_shared(buf):
                ok = not self.across_blocks and self.memory.visible(buf)
            else:
                ok = False
            if not ok:
                bad.append(node)
            # the indices are walked next: a per-thread index makes the load per-thread

        def on_call(node):
            if not _is_pure(node):
                bad.append(node)

        def on_let(node):
            if not self.uniform(node.value):
                self.variant.add(node.var)

        walk(expr, [(tirx.Let, on_let), (tvm.ir.Var, on_var), (BufferLoadNode, on_load), (tvm.ir.Call, on_call)],
             order="pre")
        return not bad

    def divergent_loop(self, loop) -> bool:
        """Whether the threads of the block may run different iterations of the For `loop`."""
        return loop in self.divergent

    # ---- the fixed point ----------------------------------------------------------------------------------------
    def _scalars(self) -> set:
        found = set()
        walk(self.body, (tirx.BufferStore, lambda n: found.add(n.buffer) if _is_scalar(n.buffer) else None))
        return found

    def _solve(self):
        while True:
            before = (len(self.variant), len(self.divergent), len(self.uniform_scalars))
            self._visit(self.body, guarded=False)
            if (len(self.variant), len(self.divergent), len(self.uniform_scalars)) == before:
                return

    def _visit(self, stmt, guarded):
        """One pass over `stmt` in program order: let and loop variables, divergent loops, scalars written
        per-thread (`guarded`: some enclosing branch or loop is not taken alike by every thread)."""
        if isinstance(stmt, tirx.SeqStmt):
            for s in stmt.seq:
                self._visit(s, guarded)
        elif isinstance(stmt, tirx.IfThenElse):
            g = guarded or not self.uniform(stmt.condition)
            self._visit(stmt.then_case, g)
            if stmt.else_case is not None:
                self._visit(stmt.else_case, g)
        elif isinstance(stmt, tirx.For):
            step = getattr(stmt, "step", None)
            bounds = [stmt.min, stmt.extent] + ([step] if step is not None else [])
            if stmt not in self.divergent and (not all(self.uniform(b) for b in bounds)
                                               or self.exits_apart(stmt.body)):
                self.divergent.add(stmt)
                self.variant.add(stmt.loop_var)
            self._visit(stmt.body, guarded or stmt in self.divergent)
        elif isinstance(stmt, tirx.While):
            self._visit(stmt.body, guarded or not self.uniform(stmt.condition) or self.exits_apart(stmt.body))
        elif isinstance(stmt, tirx.Bind):
            if stmt.var not in self.variant and not self.uniform(stmt.value):
                self.variant.add(stmt.var)
        elif isinstance(stmt, tirx.AttrStmt):
            self._visit(stmt.body, guarded)
        elif isinstance(stmt, tirx.BufferStore):
            buf = stmt.buffer
            if buf in self.uniform_scalars and (guarded or not self.uniform(stmt.value)):
                self.uniform_scalars.discard(buf)
        elif hasattr(stmt, "body") and isinstance(getattr(stmt, "body"), tirx.Stmt):
            self._visit(stmt.body, guarded)

    def exits_apart(self, body) -> bool:
        """Whether a break / continue of the loop whose body is `body` sits under a per-thread condition (the ones
        of nested loops leave those loops only)."""
        found = []

        def visit(stmt, guarded):
            if isinstance(stmt, tirx.SeqStmt):
                for s in stmt.seq:
                    visit(s, guarded)
            elif isinstance(stmt, tirx.IfThenElse):
                g = guarded or not self.uniform(stmt.condition)
                visit(stmt.then_case, g)
                if stmt.else_case is not None:
                    visit(stmt.else_case, g)
            elif isinstance(stmt, (tirx.For, tirx.While)):
                return  # its own exits
            elif isinstance(stmt, tirx.AttrStmt):
                visit(stmt.body, guarded)
            elif _is_early_exit(stmt) and guarded:
                found.append(stmt)

        visit(body, False)
        return bool(found)
