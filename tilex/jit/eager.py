"""The eager style of ``@tilex.jit`` (TileLang's eager mode): the decorated function is the program itself.

::

    @tilex.jit
    def matmul(A, B, block_M, block_N, block_K, dtype="float16", accum_dtype="float32"):
        M, N, K = T.const("M, N, K")
        A: T.Tensor((M, K), dtype)
        B: T.Tensor((K, N), dtype)
        C = T.empty((M, N), dtype)
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            ...
        return C

    kernel = matmul.compile(M=1024, N=1024, K=1024, block_M=128, block_N=128, block_K=32)   # a JITKernel
    c = kernel(a, b)                      # C is allocated and returned
    c = matmul(a, b, 128, 128, 32)        # compiled once per (T.const values, other arguments), then run

**Which functions are eager** (:func:`is_eager`, read from the source once, at decoration): one that defines no
nested ``T.prim_func`` and whose body calls ``T.const`` or ``T.empty``, annotates a parameter
(``A: T.Tensor(...)``) or opens ``with T.Kernel(...)`` at its top level, or whose signature annotates a parameter
with a ``T.Tensor``. Any other function is a kernel factory that returns its ``T.prim_func`` (the lazy style,
:mod:`tilex.jit.decorator`).

**Parameters.** Tensor parameters are those annotated with a tensor type (``T.Tensor(...)`` / ``T.Buffer(...)``),
in the body (an annotation statement without a value) or in the signature. They are the kernel's inputs: at a
call they are the tensors, and they are not part of the cache key. Every other parameter is a compile-time value
(tile sizes, dtypes, flags): each distinct combination (compared by value and type) is its own program.

**The body** has two parts. The *declarations* are the statements before the first top-level ``with`` (or call of
a ``T.macro``, which opens the kernel itself; the body is split on first use, so the macro may be defined later in
the module). They run as Python, compiled with the user's file and line numbers (their errors point at the user's
lines), with the compile-time arguments bound, ``T.const`` answering the sizes and ``T.empty`` recording outputs
(:mod:`tilex.language.eager`); an ``assert`` among them on a symbolic size is checked once the size is bound.
The *kernel* is the rest up to the final ``return``: it is parsed by TVMScript, exactly like the body of a
``T.prim_func``, as a function whose parameters are the tensor parameters (typed by their annotations) followed by
the ``T.empty`` outputs in declaration order, and whose closure holds the function's globals, its closure cells
and every name the declarations bound. TVMScript's source locations are the user's file and lines, so a body error
shows the user's line and caret (:func:`tilex.language.parser.program_error`). The returned outputs become the
kernel's ``out_idx``, in the order of the ``return``; every ``T.empty`` must be returned.

**Sizes.** ``T.const`` names are found in two steps (the first cached per compile-time arguments). First the
declarations run with a placeholder variable per name, which shows the tensor dimensions that are exactly that name
(direct uses: ``T.Tensor((M, K))``, or the strides of ``T.StridedTensor((M, K), (ld, 1))``; ``M * 2`` does not
bind ``M``). Then each name takes its value from a keyword of the same name (``.compile(M=1024)``) or from the
first given tensor that has it as a dimension or stride; all given tensors that have it must agree. A
``T.dynamic`` size in an annotation stays symbolic: one kernel serves every value.

**Calls.** ``f(*args, **kwargs)`` with the tensors: binds the sizes, looks the kernel up by ``(compile-time
arguments, T.const values)``, compiles on a miss, and returns what the kernel returns (the outputs: one tensor, a
tuple, or ``None``). ``f.compile(...)`` compiles (not memoized) from tensors and/or size keywords,
``f.get_tir(...)`` returns the ``T.prim_func``; ``f.get_kernel_source(...)`` the CUDA of the memoized kernel.
Errors: a tensor whose rank or dtype differs from its annotation, two tensors that disagree on a size, a size
nothing binds, a keyword that is neither a parameter nor a ``T.const`` name, ``out_idx`` given to ``@tilex.jit``
(the outputs are the returned ``T.empty`` tensors).

**Autotuning.** :class:`EagerFactory` is the function seen as a kernel factory: called with the compile-time
arguments and the ``T.const`` sizes by keyword, it builds the ``T.prim_func``. ``@tilex.autotune`` tunes it
(:mod:`tilex.autotuner.decorator`): a call's tensors and size keywords become sizes (:meth:`EagerFunction.arguments`,
the first configuration standing in for the tuned parameters while the declarations are read), the configurations
set compile-time parameters, and the best kernel runs on the call's tensors (:meth:`EagerFunction.launch`).
"""
from __future__ import annotations

import ast
import builtins
import copy
import inspect
import threading
import types

import tvm
from tvm.error import DiagnosticError
from tvm.script import tirx as _tvm_T
from tvm.script.ir_builder import IRBuilder
from tvm.script.parser.core import doc
from tvm.script.parser.core.diagnostics import Source
from tvm.script.parser.core.error import ParserError
from tvm.script.parser.core.parser import Parser, ScriptMacro

from tilex.ir.source import backtrace_requested
from tilex.language import eager as _lang
from tilex.language.canonicalize import canonicalize
from tilex.language.kernel import Kernel
from tilex.language.parser import program_error

from .dtypes import tvm_to_torch_dtype
from .kernel import compile as compile_kernel

__all__ = ["is_eager", "EagerFunction", "EagerFactory"]

_MISSING = object()
#: compile-time argument types whose values key the kernel cache as they are, tagged with their type (str
#: subclasses too: dtype objects)
_PLAIN = frozenset({int, float, str, bool, type(None)})
_EMPTY_CELL = object()
# names of the helpers handed to the declarations' code (no user name starts like this)
_ANNOTATE = "_tilex_annotate_"
_ASSERT = "_tilex_assert_"
_LOCALS = "_tilex_locals_"
_PRIM_FUNC = "_tilex_prim_func_"
_PARAM_TYPE = "_tilex_param_type_"
_SIZES = "_tilex_sizes_"  # the **sizes of an EagerFactory's signature


# ------------------------------------------------------------------------------------------------
# which functions are eager
# ------------------------------------------------------------------------------------------------
def _source(func) -> Source:
    """TVMScript's view of `func`'s source (file, first line, indentation, dedented text, the file's text)."""
    return Source(func)


def _function_def(source: Source) -> ast.FunctionDef:
    tree = ast.parse(source.source)
    fdef = tree.body[0] if tree.body else None
    if not isinstance(fdef, ast.FunctionDef):
        raise TypeError("tilex.jit: an eager function must be a plain `def` function")
    return fdef


def _nonlocals(func) -> dict:
    """The current values of `func`'s closure cells (cells not yet assigned are left out)."""
    cells = zip(func.__code__.co_freevars, func.__closure__ or ())
    return {name: cell.cell_contents for name, cell in cells if _cell_value(cell) is not _EMPTY_CELL}


def _dotted(node):
    """The names of a dotted expression (``T.const`` -> ["T", "const"]), or None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


def _resolve(node, namespace):
    """The object a dotted expression names in `namespace` (globals, closure, builtins), or _MISSING. Only
    attribute lookups run: nothing the program wrote is called."""
    parts = _dotted(node)
    if parts is None:
        return _MISSING
    obj = namespace.get(parts[0], getattr(builtins, parts[0], _MISSING))
    for p in parts[1:]:
        if obj is _MISSING:
            break
        try:
            obj = getattr(obj, p, _MISSING)
        except Exception:  # noqa: BLE001 - a property that raises: not one of ours
            return _MISSING
    return obj


def _walk_statement(node):
    """The nodes of a statement, not entering nested functions, lambdas or classes."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        for child in ast.iter_child_nodes(n):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                todo.append(child)


def _is_macro(obj) -> bool:
    """A ``T.macro`` / ``T.inline`` (TVMScript wraps its macro object in a plain function)."""
    if isinstance(obj, ScriptMacro):
        return True
    cells = getattr(obj, "__closure__", None) or ()
    return inspect.isfunction(obj) and any(isinstance(_cell_value(c), ScriptMacro) for c in cells)


def _cell_value(cell):
    try:
        return cell.cell_contents
    except ValueError:  # a closure variable not assigned yet
        return _EMPTY_CELL


def _macro_defs(stmts) -> set:
    """Names of the functions `stmts` define with a ``@T.macro`` / ``@T.inline`` decorator."""
    names = set()
    for stmt in stmts:
        if isinstance(stmt, ast.FunctionDef):
            for dec in stmt.decorator_list:
                parts = _dotted(dec.func if isinstance(dec, ast.Call) else dec)
                if parts and parts[-1] in ("macro", "inline"):
                    names.add(stmt.name)
    return names


def _defines_prim_func(fdef: ast.FunctionDef) -> bool:
    for node in ast.walk(fdef):
        if node is fdef or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for dec in node.decorator_list:
            parts = _dotted(dec.func if isinstance(dec, ast.Call) else dec)
            if parts and parts[-1] == "prim_func":
                return True
    return False


def _param_names(fdef: ast.FunctionDef) -> list[str]:
    a = fdef.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
    return names


def _signature_types(func) -> dict:
    """Parameters whose signature annotation is a tensor type (a tirx.Buffer), evaluated once."""
    out = {}
    namespace = None
    for name, ann in getattr(func, "__annotations__", {}).items():
        if name == "return":
            continue
        if isinstance(ann, str):  # `from __future__ import annotations`
            if namespace is None:
                namespace = {**func.__globals__, **_nonlocals(func)}
            try:
                ann = eval(ann, namespace)  # noqa: S307 - the user's own annotation text
            except Exception:
                continue
        if isinstance(ann, tvm.tirx.Buffer):
            out[name] = ann
    return out


def _is_tensor_annotation(stmt, params) -> bool:
    """``A: T.Tensor(...)`` (or ``T.Tensor[...]``) on a parameter, without a value."""
    return (isinstance(stmt, ast.AnnAssign) and stmt.value is None and isinstance(stmt.target, ast.Name)
            and stmt.target.id in params and isinstance(stmt.annotation, (ast.Call, ast.Subscript)))


def is_eager(func) -> bool:
    """Whether `func` is written in the eager style (see the module docstring); False when its source cannot be
    read, or when it defines a nested ``T.prim_func`` (a lazy kernel factory)."""
    if not inspect.isfunction(func):
        return False
    try:
        fdef = _function_def(_source(func))
    except (OSError, TypeError, SyntaxError, IndexError):
        return False
    if _defines_prim_func(fdef):
        return False
    params = set(_param_names(fdef))
    namespace = {**func.__globals__, **_nonlocals(func)}
    markers = (_lang.const, _lang.empty)
    for stmt in fdef.body:
        if _is_tensor_annotation(stmt, params):
            return True
        if isinstance(stmt, ast.With) and any(
                isinstance(item.context_expr, ast.Call) and _resolve(item.context_expr.func, namespace) is Kernel
                for item in stmt.items):
            return True
        for node in _walk_statement(stmt):
            if isinstance(node, ast.Call) and _resolve(node.func, namespace) in markers:
                return True
    return bool(_signature_types(func))


# ------------------------------------------------------------------------------------------------
# the function, read once
# ------------------------------------------------------------------------------------------------
def _where(source: Source, node) -> str:
    return f"{source.source_name}:{node.lineno + source.start_line - 1}"


class _Shape:
    """What reading the declarations once with placeholder sizes tells (per compile-time arguments): the
    T.const names in order, where each is declared, the tensor dimensions that are exactly each name, and the
    rank of each tensor parameter's annotation."""

    def __init__(self, names, lines, sources, ranks, types_):
        self.names = names          # [name]
        self.lines = lines          # name -> (file, line)
        self.sources = sources      # name -> [(param, dim)]
        self.ranks = ranks          # param -> rank
        self.types = types_         # param -> annotation (for messages)
        self.bindings = [(n, sources[n]) for n in names]


class _Declarations:
    """The result of running the declarations with bound sizes: the tensor parameters' types, the outputs in
    declaration order, the names the declarations bound, the scope."""

    def __init__(self, types_, outputs, names, scope):
        self.types = types_
        self.outputs = outputs
        self.names = names
        self.scope = scope


class EagerFunction:
    """An eager ``@tilex.jit`` function (see the module docstring). `owner` is the
    :class:`~tilex.jit.decorator.JitFactory` whose compile options (``__tilex_compile_args__``) and
    ``debug_root_path`` apply."""

    def __init__(self, func, owner):
        self.func = func
        self.owner = owner
        self.name = func.__name__
        if owner.out_idx is not None:
            raise ValueError(f"tilex.jit: out_idx={owner.out_idx!r} is for functions that return a T.prim_func; the "
                             f"eager function '{self.name}' returns its outputs (declare them with T.empty and "
                             "return them)")
        self.source = _source(func)
        fdef = _function_def(self.source)
        self._fdef = fdef
        self._check_parameters(fdef)
        self.params = [p for p in inspect.signature(func).parameters]
        self._index = {p: i for i, p in enumerate(self.params)}
        self._defaults = [p.default if p.default is not inspect.Parameter.empty else _MISSING
                          for p in inspect.signature(func).parameters.values()]
        self._signature_types = _signature_types(func)
        self._head = None  # the body is split on first use: a T.macro it calls may be defined after it
        self._shapes: dict = {}
        self._memo: dict = {}
        self._lock = threading.Lock()
        self._prepare_lock = threading.Lock()
        self.factory = EagerFactory(self)  # the function as a kernel factory, for @tilex.autotune

    def _prepare(self):
        """Split the body into declarations and kernel, find the tensor parameters, compile the declarations."""
        if self._head is not None:
            return
        with self._prepare_lock:
            if self._head is not None:
                return
            head, kernel, returns = self._split_body(self._fdef)
            self._kernel = kernel
            self._returns = returns
            annotated = {s.target.id for stmt in head for s in _walk_statement(stmt)
                         if _is_tensor_annotation(s, self._index)}
            self.tensor_params = [p for p in self.params if p in annotated or p in self._signature_types]
            self._tensor_set = frozenset(self.tensor_params)
            self._static_idx = [i for i, p in enumerate(self.params) if p not in self._tensor_set]
            self._head = self._compile_declarations(self._fdef, head)

    # -- reading the function
    def _error(self, node, message, cls=ValueError):
        return cls(f"tilex.jit: {message} ({_where(self.source, node)}, in eager function '{self.name}')")

    def _check_parameters(self, fdef):
        a = fdef.args
        if a.posonlyargs:
            raise self._error(fdef, "positional-only parameters are not supported in an eager function",
                              NotImplementedError)
        if a.vararg is not None or a.kwarg is not None:
            raise self._error(fdef, "*args / **kwargs are not supported in an eager function", NotImplementedError)

    def _split_body(self, fdef):
        body = list(fdef.body)
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]  # the docstring
        namespace = {**self.func.__globals__, **_nonlocals(self.func)}
        first = next((i for i, s in enumerate(body) if self._starts_kernel(s, namespace, _macro_defs(body[:i]))),
                     None)
        if first is None:
            raise self._error(fdef, "an eager function needs a `with T.Kernel(...)` block (or a T.macro call that "
                                    "opens one) after its declarations")
        head, rest = body[:first], body[first:]
        returns = []
        if rest and isinstance(rest[-1], ast.Return):
            returns = self._returned_names(rest[-1])
            rest = rest[:-1]
        for stmt in head + rest:
            if isinstance(stmt, ast.Return):
                raise self._error(stmt, "`return` ends an eager function: return its T.empty outputs last")
        params = set(_param_names(fdef))
        for stmt in rest:
            if _is_tensor_annotation(stmt, params):
                raise self._error(stmt, f"annotate parameter '{stmt.target.id}' before the first `with` block "
                                        "(annotations are declarations)")
        return head, rest, returns

    @staticmethod
    def _starts_kernel(stmt, namespace, local_macros) -> bool:
        """The first statement of the kernel: a `with` block, or a call of a T.macro (which emits IR); every
        statement before it is a declaration, run as Python."""
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            return True
        if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
            return False
        callee = stmt.value.func
        if isinstance(callee, ast.Name) and callee.id in local_macros:
            return True
        return _is_macro(_resolve(callee, namespace))

    def _returned_names(self, ret):
        value = ret.value
        if value is None or (isinstance(value, ast.Constant) and value.value is None):
            return []
        if isinstance(value, ast.Call):
            raise self._error(ret, "returning what a call gives (a T.macro's T.empty) is not supported: declare the "
                                   "outputs with T.empty in the function, pass them to the macro and return them",
                              NotImplementedError)
        elts = value.elts if isinstance(value, ast.Tuple) else [value]
        if not all(isinstance(e, ast.Name) for e in elts):
            raise self._error(ret, "an eager function returns its T.empty outputs by name (return C / return C, D)",
                              TypeError)
        names = [e.id for e in elts]
        if len(set(names)) != len(names):
            raise self._error(ret, f"an output is returned twice: {', '.join(names)}")
        return names

    def _compile_declarations(self, fdef, head):
        """The declarations as a Python function of the parameters (+ the helpers), compiled with the user's
        file and line numbers; its closure is the function's own closure cells."""
        params = _param_names(fdef)
        freevars = list(self.func.__code__.co_freevars)
        stmts = [_Declare(set(self.tensor_params)).visit(copy.deepcopy(s)) for s in head]
        ret = ast.Return(value=ast.Call(func=ast.Name(id=_LOCALS, ctx=ast.Load()), args=[], keywords=[]))
        inner = ast.FunctionDef(name=self.name, args=_plain_args(params + [_ANNOTATE, _ASSERT, _LOCALS]),
                                body=[ast.Pass(), *stmts, ret], decorator_list=[], returns=None, type_params=[])
        outer = ast.FunctionDef(name="_tilex_declarations_", args=_plain_args(freevars),
                                body=[inner, ast.Return(value=ast.Name(id=self.name, ctx=ast.Load()))],
                                decorator_list=[], returns=None, type_params=[])
        module = ast.Module(body=[ast.copy_location(outer, fdef)], type_ignores=[])
        ast.copy_location(inner, fdef)
        ast.fix_missing_locations(module)  # generated nodes take the `def` line; the statements keep theirs
        _shift(module, self.source.start_line - 1, self.source.start_column)
        code = compile(module, self.source.source_name, "exec")
        outer_code = next(c for c in code.co_consts if isinstance(c, types.CodeType))
        inner_code = next(c for c in outer_code.co_consts if isinstance(c, types.CodeType))
        cells = dict(zip(self.func.__code__.co_freevars, self.func.__closure__ or ()))
        closure = tuple(cells[n] for n in inner_code.co_freevars)
        return types.FunctionType(inner_code, self.func.__globals__, self.name, None, closure or None)

    # -- arguments
    def _split(self, args, kwargs, assumed=None):
        """(compile-time values by name, tensors by name, size keywords) of a call. A compile-time parameter the
        call does not give takes its value from `assumed` (a dict), else its default."""
        n = len(self.params)
        if len(args) > n:
            raise TypeError(f"{self.name}() takes {n} positional arguments but {len(args)} were given")
        values = list(args) + [_MISSING] * (n - len(args))
        sizes = {}
        for k, v in kwargs.items():
            i = self._index.get(k)
            if i is None:
                sizes[k] = v
            elif i < len(args):
                raise TypeError(f"{self.name}() got multiple values for argument '{k}'")
            else:
                values[i] = v
        static = {}
        for i in self._static_idx:
            v = values[i]
            if v is _MISSING:
                v = assumed.get(self.params[i], self._defaults[i]) if assumed else self._defaults[i]
                if v is _MISSING:
                    raise TypeError(f"{self.name}() missing required argument: '{self.params[i]}'")
            static[self.params[i]] = v
        tensors = {}
        for p in self.tensor_params:
            v = values[self._index[p]]
            if v is _MISSING:
                continue
            if not hasattr(v, "shape"):
                raise TypeError(f"{self.name}: argument '{p}' is a tensor parameter, got {type(v).__name__}")
            tensors[p] = v
        for k, v in sizes.items():
            if isinstance(v, bool) or not hasattr(v, "__index__") or v.__index__() < 0:
                raise TypeError(f"{self.name}: size keyword {k}={v!r} must be a non-negative int")
            sizes[k] = v.__index__()
        return static, tensors, sizes

    def _static_key(self, static):
        values = tuple(static.values())
        types_ = tuple(map(type, values))
        if all(t in _PLAIN or issubclass(t, str) for t in types_):
            return types_, values  # the common case: ints, floats, strings, dtypes, None
        try:
            return tuple(_key_part(v) for v in values)
        except TypeError:
            bad = [p for p, v in static.items() if not _hashable(v)]
            raise TypeError(f"{self.name}: compile-time argument(s) {', '.join(bad)} cannot be hashed; an eager "
                            "function compiles once per distinct compile-time arguments, which must be hashable "
                            "(lists, tuples, dicts and sets of hashable values are)") from None

    # -- the declarations
    def _declare(self, static, values):
        """Run the declarations with compile-time values `static` and sizes `values` (None: placeholders)."""
        scope = _lang.EagerScope(values)
        recorded = {}

        def annotate(name, value):
            if not isinstance(value, tvm.tirx.Buffer):
                raise TypeError(f"tilex.jit: the annotation of tensor parameter '{name}' must be a tensor type "
                                f"(T.Tensor(shape, dtype)), got {value!r}")
            recorded[name] = value
            return value

        def check(cond, msg=None):
            if hasattr(cond, "asobject"):  # `a == b` of expressions (TVM's EqualOp / NotEqualOp)
                cond = cond.asobject()
            if tvm.ir.is_prim_expr(cond) and not isinstance(cond, tvm.tirx.IntImm):
                if values is None:
                    return  # a T.const placeholder: checked once the sizes are bound
                raise NotImplementedError(f"tilex.jit: an assert in the declarations of '{self.name}' on a "
                                          f"T.dynamic size ({cond}) would be a run-time check, which tilex does not "
                                          "emit; check the size before the call")
            if not cond:
                raise AssertionError(msg) if msg is not None else AssertionError()

        args = dict(static)
        for p in self.tensor_params:
            args[p] = self._signature_types.get(p)
        with _lang.eager_scope(scope):
            names = self._head(**args, **{_ANNOTATE: annotate, _ASSERT: check, _LOCALS: builtins.locals})
        for helper in (_ANNOTATE, _ASSERT, _LOCALS):
            names.pop(helper, None)
        types_ = {}
        for p in self.tensor_params:
            t = recorded.get(p, self._signature_types.get(p))
            if t is None:
                raise TypeError(f"tilex.jit: tensor parameter '{p}' of '{self.name}' was not annotated (its "
                                "annotation statement did not run)")
            types_[p] = t
        return _Declarations(types_, list(scope.outputs), names, scope)

    def _shape(self, static, key):
        shape = self._shapes.get(key)
        if shape is None:
            decl = self._declare(static, None)
            sources = {}
            for name, var in decl.scope.consts.items():
                sources[name] = [(p, kind, i) for p in self.tensor_params
                                 for kind in ("shape", "strides")
                                 for i, d in enumerate(getattr(decl.types[p], kind) or ()) if d.same_as(var)]
            shape = _Shape(list(decl.scope.consts), decl.scope.const_lines, sources,
                           {p: len(t.shape) for p, t in decl.types.items()}, decl.types)
            self._shapes[key] = shape
        return shape

    def _bind_sizes(self, shape, tensors, sizes):
        """The T.const values, in declaration order: from the size keywords and the tensors' dimensions (checked
        to agree)."""
        if sizes:
            unknown = [k for k in sizes if k not in shape.lines]
            if unknown:
                raise TypeError(f"{self.name}() got unexpected keyword argument(s) {', '.join(unknown)} (neither a "
                                f"parameter nor a T.const name: {', '.join(shape.names) or 'none declared'})")
        ranks = shape.ranks
        for p, t in tensors.items():
            if len(t.shape) != ranks[p]:
                raise ValueError(f"{self.name}: argument '{p}' has {len(t.shape)} dimension(s), its annotation "
                                 f"{_fmt_type(shape.types[p])} has {ranks[p]} (got shape {tuple(t.shape)})")
        values = []
        for name, sources in shape.bindings:
            value = sizes.get(name, _MISSING) if sizes else _MISSING
            origin = None  # where the value came from: None for the keyword
            for src in sources:
                t = tensors.get(src[0])
                if t is None:
                    continue
                d = int(t.shape[src[2]]) if src[1] == "shape" else _stride(t, src[2])
                if value is _MISSING:
                    value, origin = d, src
                elif d != value:
                    first = f"{name}={value}" if origin is None else _spell(*origin)
                    raise ValueError(f"{self.name}: T.const '{name}' is {value} from {first} but {d} from "
                                     f"{_spell(*src)}")
            if value is _MISSING:
                where = " (declared at {}:{})".format(*shape.lines[name]) if shape.lines[name] else ""
                dims = ", ".join(_spell(p, kind, i) for p, kind, i in shape.sources[name])
                why = (f"no tensor that has it ({dims}) was given" if dims
                       else "no tensor parameter's annotation has it as a dimension")
                raise ValueError(f"{self.name}: T.const '{name}'{where} has no value: {why}; pass {name}=... as a "
                                 "keyword")
            values.append(value)
        return values

    # -- building the program
    def _program(self, args, kwargs):
        """(PrimFunc, out_idx) for a call's arguments (the tensors' ranks and dtypes checked)."""
        self._prepare()
        static, tensors, sizes = self._split(args, kwargs)
        skey = self._static_key(static)
        if tensors or not sizes:
            shape = self._shape(static, skey)
            values = dict(zip(shape.names, self._bind_sizes(shape, tensors, sizes)))
        else:
            values = sizes  # sizes only: no need for the placeholder reading (unknown names are caught below)
        func, out_idx, decl = self._build(static, values)
        unknown = [k for k in sizes if k not in decl.scope.consts]
        if unknown:
            raise TypeError(f"{self.name}() got unexpected keyword argument(s) {', '.join(unknown)} (neither a "
                            f"parameter nor a T.const name: {', '.join(decl.scope.consts) or 'none declared'})")
        self._check_dtypes(decl, tensors)
        return func, out_idx

    def _build(self, static, values):
        decl = self._declare(static, values)
        outs = self._outputs(decl)
        params = list(self.tensor_params) + [name for name, _ in outs]
        position = {name: i for i, name in enumerate(params)}
        out_idx = [position[name] for name in self._returns]
        closure = {**self.func.__globals__, **_nonlocals(self.func)}
        closure.update({k: v for k, v in decl.names.items() if k not in position})
        closure[_PRIM_FUNC] = _tvm_T.prim_func
        types_ = {**decl.types, **{name: out.as_buffer() for name, out in outs}}
        for name in params:
            closure[_PARAM_TYPE + name] = types_[name]
        func = self._parse(params, closure)
        return func, out_idx, decl

    def _outputs(self, decl):
        """[(name, OutTensor)] in declaration order, named by the return statement."""
        by_id = {id(o): o for o in decl.outputs}
        named = {}
        for name in self._returns:
            value = decl.names.get(name, _MISSING)
            if id(value) not in by_id:
                what = "not defined by the declarations" if value is _MISSING else f"a {type(value).__name__}"
                raise TypeError(f"tilex.jit: '{self.name}' returns '{name}', which is {what}; an eager function "
                                "returns the tensors it declared with T.empty")
            named[id(value)] = name
        missing = [o for o in decl.outputs if id(o) not in named]
        if missing:
            where = ", ".join(f"{f}:{ln}" for f, ln in (o.line for o in missing if o.line))
            raise ValueError(f"tilex.jit: '{self.name}' does not return every T.empty output ({len(missing)} not "
                             f"returned{', declared at ' + where if where else ''}); return them all")
        return [(named[id(o)], o) for o in decl.outputs]

    def _parse(self, params, closure):
        """TVMScript's parse of the kernel statements as the body of a function of `params`."""
        fdef = self._fdef
        args = _plain_args(params, annotations=[ast.Name(id=_PARAM_TYPE + p, ctx=ast.Load()) for p in params])
        node = ast.FunctionDef(name=self.name, args=args, body=self._kernel,
                               decorator_list=[ast.Name(id=_PRIM_FUNC, ctx=ast.Load())], returns=None,
                               type_params=[])
        ast.copy_location(node, fdef)
        for n in (*ast.walk(args), *node.decorator_list):
            ast.copy_location(n, fdef)
        source = _ProgramSource(self.source, doc.to_doc(ast.Module(body=[node], type_ignores=[])))
        parser = Parser(source, {})
        try:
            with IRBuilder() as builder:
                try:
                    parser.parse(extra_vars=closure)
                except ParserError as err:
                    parser.report_error(err.node, err.args[0])
            func = builder.get()
        except DiagnosticError as err:
            user_error = program_error(err)
            if backtrace_requested():
                raise user_error from err
            raise user_error.with_traceback(None) from None
        return canonicalize(func)

    def _check_dtypes(self, decl, tensors):
        """A tensor whose dtype differs from its annotation's is refused before anything is compiled."""
        for p, t in tensors.items():
            want = decl.types[p]
            try:
                torch_dtype = tvm_to_torch_dtype(str(want.dtype))
            except TypeError:
                continue  # no torch equivalent (packed low-bit types): the kernel's own check applies
            got = getattr(t, "dtype", None)
            if got is not None and type(got) is type(torch_dtype) and got != torch_dtype:
                raise TypeError(f"{self.name}: argument '{p}' has dtype {got}, its annotation {_fmt_type(want)} "
                                f"wants {want.dtype}")

    # -- the API (JitFactory forwards here)
    def get_tir(self, *args, **kwargs):
        """The ``T.prim_func`` for these arguments: tensors and/or size keywords, and the compile-time values."""
        return self._program(args, kwargs)[0]

    def compile(self, *args, **kwargs):  # noqa: A003
        """A new :class:`~tilex.jit.JITKernel` for these arguments (not memoized); its outputs are the returned
        ``T.empty`` tensors."""
        return self._compile(*self._program(args, kwargs))

    def _compile(self, func, out_idx):
        options = dict(self.owner.__tilex_compile_args__)
        options["out_idx"] = out_idx
        kernel = compile_kernel(func, **options)
        if self.owner.debug_root_path is not None:
            self.owner._dump(func, kernel)
        return kernel

    def kernel(self, *args, **kwargs):
        """The memoized kernel for a call with these arguments (compiled on the first such call)."""
        return self._lookup(args, kwargs)[0]

    def _lookup(self, args, kwargs):
        self._prepare()
        static, tensors, sizes = self._split(args, kwargs)
        skey = self._static_key(static)
        shape = self._shape(static, skey)
        key = (skey, tuple(self._bind_sizes(shape, tensors, sizes)))
        with self._lock:
            kernel = self._memo.get(key)
        if kernel is None:
            kernel = self._compile(*self._program(args, kwargs))
            with self._lock:  # two threads may have compiled the same kernel; keep the first
                kernel = self._memo.setdefault(key, kernel)
        return kernel, tensors

    def __call__(self, *args, **kwargs):
        """Compile for these tensors and arguments (once per cache key), run, return the outputs."""
        self._prepare()
        missing = [p for p in self.tensor_params if p not in kwargs and self._index[p] >= len(args)]
        if missing:
            raise TypeError(f"{self.name}() missing tensor argument(s): {', '.join(missing)}")
        kernel, tensors = self._lookup(args, kwargs)
        return self.launch(kernel, tensors)

    def launch(self, kernel, tensors):
        """Run `kernel` (compiled from this function) on a call's tensors (by parameter name); its outputs."""
        missing = [p for p in self.tensor_params if p not in tensors]
        if missing:
            raise TypeError(f"{self.name}() missing tensor argument(s): {', '.join(missing)}")
        return kernel(*(tensors[p] for p in self.tensor_params))

    def arguments(self, args, kwargs, assumed=None, omit=()):
        """(program arguments, tensors by name) of a call: the compile-time arguments by name (those in `omit` left
        out) and every T.const size, bound from the size keywords and the tensors as a call binds them. `assumed`
        gives compile-time values the call leaves out while the declarations are read (the autotuner's first
        configuration, so that the sizes can be found before its parameters are chosen)."""
        self._prepare()
        static, tensors, sizes = self._split(args, kwargs, assumed)
        shape = self._shape(static, self._static_key(static))
        program = {k: v for k, v in static.items() if k not in omit}
        program.update(zip(shape.names, self._bind_sizes(shape, tensors, sizes)))
        return program, tensors

    def cache_clear(self):
        with self._lock:
            self._memo.clear()
            self._shapes.clear()


class EagerFactory:
    """An eager function seen as a kernel factory: what ``@tilex.autotune`` tunes (the ``__tilex_factory__`` of an
    eager :class:`~tilex.jit.decorator.JitFactory`). Called with the compile-time arguments and the ``T.const``
    sizes, all by keyword (compile-time ones also by position, in the order of the signature without the tensor
    parameters), it returns the ``T.prim_func``; its module and qualified name are the function's, so a worker
    process finds it through the module attribute.

    What the autotuner reads besides: :attr:`sizes_by_keyword` (its ``**sizes`` takes T.const sizes, never a
    configuration key), :meth:`out_idx_of` (the outputs of a program it built: the returned ``T.empty`` tensors),
    :attr:`returns_outputs`, :meth:`arguments` (a call's program arguments and tensors) and :meth:`launch` (run a
    kernel on a call's tensors)."""

    #: the ``**sizes`` of the signature take T.const sizes only (configuration keys are compile-time parameters)
    sizes_by_keyword = True

    def __init__(self, eager: EagerFunction):
        self.eager = eager
        func = eager.func
        self.__module__ = func.__module__
        self.__qualname__ = func.__qualname__
        self.__name__ = func.__name__
        self.__doc__ = func.__doc__
        self.__wrapped__ = func  # its source (the autotune cache key reads it through inspect.unwrap)
        self._signature = None

    @property
    def __signature__(self) -> inspect.Signature:  # noqa: PLW3201 - what inspect.signature reads
        """The function's signature without its tensor parameters, plus ``**sizes`` (the T.const names)."""
        if self._signature is None:
            self.eager._prepare()
            tensors = set(self.eager.tensor_params)
            params = [p for p in inspect.signature(self.eager.func).parameters.values() if p.name not in tensors]
            params.append(inspect.Parameter(_SIZES, inspect.Parameter.VAR_KEYWORD))
            self._signature = inspect.Signature(params)
        return self._signature

    def __call__(self, *args, **kwargs):
        """The ``T.prim_func`` for these compile-time arguments and T.const sizes."""
        bound = self.__signature__.bind(*args, **kwargs)
        arguments = dict(bound.arguments)
        sizes = arguments.pop(_SIZES, {})
        return self.eager.get_tir(**arguments, **sizes)

    def out_idx_of(self, func) -> list[int]:
        """The positions of the outputs (the returned ``T.empty`` tensors, in the order of the ``return``) among the
        parameters of a program this factory built."""
        self.eager._prepare()
        names = [p.name for p in func.params]
        return [names.index(n) for n in self.eager._returns]

    @property
    def returns_outputs(self) -> bool:
        """Whether the function returns outputs (a kernel whose outputs can be compared with a reference)."""
        self.eager._prepare()
        return bool(self.eager._returns)

    @property
    def tensor_params(self) -> list[str]:
        self.eager._prepare()
        return list(self.eager.tensor_params)

    def arguments(self, args, kwargs, assumed=None, omit=()):
        """:meth:`EagerFunction.arguments`."""
        return self.eager.arguments(args, kwargs, assumed=assumed, omit=omit)

    def launch(self, kernel, tensors):
        """:meth:`EagerFunction.launch`."""
        return self.eager.launch(kernel, tensors)

    def __repr__(self):
        return f"<tilex.jit eager factory {self.__qualname__}>"


# ------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------
class _Declare(ast.NodeTransformer):
    """The declarations' statements for Python: ``A: T.Tensor(...)`` on a tensor parameter records the type
    (``A = _tilex_annotate_("A", T.Tensor(...))``); ``assert c, m`` becomes ``_tilex_assert_(c, m)`` (a symbolic
    condition waits for the sizes). Nested functions are left alone."""

    def __init__(self, tensor_params):
        self.tensor_params = tensor_params

    def visit_AnnAssign(self, node):  # noqa: N802
        if node.value is None and isinstance(node.target, ast.Name) and node.target.id in self.tensor_params \
                and isinstance(node.annotation, (ast.Call, ast.Subscript)):
            call = ast.Call(func=ast.Name(id=_ANNOTATE, ctx=ast.Load()),
                            args=[ast.Constant(value=node.target.id), node.annotation], keywords=[])
            new = ast.Assign(targets=[ast.Name(id=node.target.id, ctx=ast.Store())], value=call)
            for n in (new, call, call.func, call.args[0], new.targets[0]):
                ast.copy_location(n, node)
            return new
        return node

    def visit_Assert(self, node):  # noqa: N802
        node = self.generic_visit(node)
        call = ast.Call(func=ast.Name(id=_ASSERT, ctx=ast.Load()),
                        args=[node.test] + ([node.msg] if node.msg is not None else []), keywords=[])
        new = ast.Expr(value=call)
        for n in (new, call, call.func):
            ast.copy_location(n, node)
        return new

    def visit_FunctionDef(self, node):  # noqa: N802
        return node

    visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = visit_FunctionDef


class _ProgramSource(Source):
    """The user's function's source for TVMScript's parser and diagnostics (file, first line, indentation, the
    file's text), with the AST replaced by the kernel program built from it."""

    def __init__(self, base: Source, program):  # noqa: D107 - Source.__init__ reads a function; copy instead
        self.source_name = base.source_name
        self.start_line = base.start_line
        self.start_column = base.start_column
        self.source = base.source
        self.full_source = base.full_source
        self._program = program

    def as_ast(self):
        return self._program


def _plain_args(names, annotations=None):
    annotations = annotations or [None] * len(names)
    return ast.arguments(posonlyargs=[], args=[ast.arg(arg=n, annotation=a) for n, a in zip(names, annotations)],
                         vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])


def _shift(tree, lines, columns):
    """Move every location of `tree` by `lines` lines and `columns` columns (dedented source -> the file)."""
    for node in ast.walk(tree):
        for attr, by in (("lineno", lines), ("end_lineno", lines), ("col_offset", columns),
                         ("end_col_offset", columns)):
            if getattr(node, attr, None) is not None:
                setattr(node, attr, getattr(node, attr) + by)


def _key_part(value):
    """A hashable stand-in for a compile-time argument (containers by content, every value tagged with its type so
    that 1, 1.0 and True stay apart). Raises TypeError for an unhashable value."""
    if isinstance(value, (list, tuple)):
        return (type(value), tuple(_key_part(v) for v in value))
    if isinstance(value, dict):
        return (dict, frozenset((_key_part(k), _key_part(v)) for k, v in value.items()))
    if isinstance(value, (set, frozenset)):
        return (type(value), frozenset(_key_part(v) for v in value))
    hash(value)
    return (type(value), value)


def _stride(tensor, i) -> int:
    """Stride `i` (in elements) of a torch tensor, or of anything with ``strides`` in elements (a TVM buffer)."""
    stride = getattr(tensor, "stride", None)
    return int(stride(i)) if callable(stride) else int(tensor.strides[i])


def _spell(param, kind, i) -> str:
    return f"{param}.shape[{i}]" if kind == "shape" else f"{param}.stride({i})"


def _hashable(value) -> bool:
    try:
        _key_part(value)
    except TypeError:
        return False
    return True


def _fmt_type(buf) -> str:
    dims = ", ".join(str(d) for d in buf.shape)
    return f"T.Tensor(({dims}{',' if len(buf.shape) == 1 else ''}), {buf.dtype})"
