"""What a compiled kernel's parameters are (ParamSpec) and the checks of a call's arguments (ArgChecker): count,
type, dtype, shape, strides, device; symbolic dimensions bound consistently; outputs named by `out_idx`.

Sub-byte parameters (``T.Tensor((M, K), "int4")``, uint4, float4_e2m1fn, the 1- and 2-bit types) take their values
packed as TileLang passes them: a contiguous 8-bit torch tensor (int8 or uint8; torch.float4_e2m1fn_x2 for
float4_e2m1fn) whose last dimension holds ``8 // bits`` values a byte, lowest bits first, so an (M, K) int4
parameter is an (M, K // 2) int8 tensor. The call hands the kernel a view of it under the logical dtype and shape
(:func:`logical_view`); outputs of such a type are allocated packed the same way.
"""
from __future__ import annotations

from typing import Any, Sequence

from tilex.jit.dtypes import tvm_to_torch_dtype
from tilex.jit.launcher import caller_factory, dtype_triple, encode_recipe

__all__ = ["ParamSpec", "ArgChecker", "normalize_out_idx", "first_bindings", "recipe_shape", "DATA_ALIGNMENT",
           "packing_of", "packed_storage_dtypes", "logical_view"]

#: Bytes every tensor argument's data pointer must be a multiple of: the widest access a tilex kernel makes
#: (16-byte vector loads / stores, cp.async and TMA boxes all need it).
DATA_ALIGNMENT = 16


def packing_of(dtype) -> int:
    """How many values of `dtype` one byte of its torch storage holds: ``8 // bits`` for the 1-, 2- and 4-bit
    types (int4: 2), 1 for every type of a byte or more. TypeError for a sub-byte type whose values do not fill a
    byte exactly (3, 5, 6, 7 bits): it has no packed torch storage."""
    import tvm_ffi

    t = tvm_ffi.core.DataType(str(dtype))
    bits = t.bits * t.lanes
    if bits >= 8 or str(dtype) == "bool":
        return 1
    if 8 % bits:
        raise TypeError(f"tilex: a {dtype} tensor parameter has no torch storage ({bits}-bit values do not fill a "
                        f"byte); pass the codes packed in a uint8 / int32 tensor parameter instead")
    return 8 // bits


def packed_storage_dtypes(dtype) -> tuple:
    """The torch dtypes a packed `dtype` parameter accepts, the one its outputs are allocated with first: int8 for
    signed types (as TileLang's int4), uint8 for unsigned ones, torch.float4_e2m1fn_x2 (where torch has it) or
    int8 for float4_e2m1fn; each accepts int8 and uint8."""
    import torch

    name = str(dtype)
    first = torch.uint8 if name.startswith("uint") else torch.int8
    if name.startswith("float4_e2m1fn"):
        fp4 = getattr(torch, "float4_e2m1fn_x2", None)
        if isinstance(fp4, torch.dtype):
            return (fp4, torch.int8, torch.uint8)
    return tuple(dict.fromkeys((first, torch.int8, torch.uint8)))


def logical_view(tensor, shape, dtype):
    """A tvm-ffi tensor over `tensor`'s memory (a contiguous packed torch tensor) with the logical `shape` and
    sub-byte `dtype` the kernel declares (no copy; it keeps `tensor` alive)."""
    import tvm_ffi

    create_view = tvm_ffi.get_global_func("runtime.TVMTensorCreateView")
    return create_view(tvm_ffi.from_dlpack(tensor), tvm_ffi.Shape([int(d) for d in shape]), str(dtype), 0)

class ParamSpec:
    """What the PrimFunc declares for one parameter.

    ``kind`` is ``"buffer"`` or ``"scalar"``. For buffers ``shape``/``strides`` hold, per dimension, an
    ``int`` (static), ``("sym", slot, name)`` (a symbolic variable, bound on first use) or ``None``
    (an expression that is not checked here; TVM's generated host code still checks it).
    ``strides`` is ``None`` for a compact (contiguous) buffer. ``pack`` is the number of values one byte of the
    torch tensor holds (:func:`packing_of`: 2 for int4, 1 for a type of a byte or more); a packed parameter has no
    ``torch_dtype`` (torch has no such element type) and takes one of ``storage`` (:func:`packed_storage_dtypes`)
    with its last dimension divided by ``pack``.
    """

    __slots__ = ("index", "name", "kind", "dtype", "torch_dtype", "shape", "strides", "is_output", "var", "pack",
                 "storage")

    def __init__(self, index, name, kind, dtype, torch_dtype, shape, strides, is_output, var, pack=1, storage=()):
        self.index = index
        self.name = name
        self.kind = kind
        self.dtype = dtype
        self.torch_dtype = torch_dtype
        self.shape = shape
        self.strides = strides
        self.is_output = is_output
        self.var = var
        self.pack = pack
        self.storage = storage

    def __repr__(self):
        def fmt(dims):
            return "(" + ", ".join(d[2] if isinstance(d, tuple) else ("?" if d is None else str(d))
                                   for d in dims) + ("," if len(dims) == 1 else "") + ")"
        if self.kind == "scalar":
            return f"ParamSpec({self.name}: {self.dtype})"
        s = f"ParamSpec({self.name}: {self.dtype}{fmt(self.shape)}"
        if self.strides is not None:
            s += f", strides={fmt(self.strides)}"
        return s + (", output)" if self.is_output else ")")


def normalize_out_idx(out_idx, nparams: int) -> list[int]:
    if out_idx is None:
        return []
    if isinstance(out_idx, int):
        out_idx = [out_idx]
    res = []
    for i in out_idx:
        if not isinstance(i, int) or isinstance(i, bool):
            raise TypeError(f"tilex: out_idx entries must be ints, got {i!r}")
        j = i + nparams if i < 0 else i
        if not 0 <= j < nparams:
            raise ValueError(f"tilex: out_idx {i} is out of range for a function with {nparams} parameters")
        if j in res:
            raise ValueError(f"tilex: out_idx lists parameter {j} twice")
        res.append(j)
    return res


def first_bindings(inputs) -> dict:
    """Where each symbolic size of a kernel is first bound by its inputs (ParamSpecs, in call order): slot ->
    (input position, dimension, name), the dimension None for a scalar input that is the size itself."""
    out: dict = {}
    for pos, s in enumerate(inputs):
        for k, d in enumerate(s.shape):
            if isinstance(d, tuple) and d[1] not in out:
                out[d[1]] = (pos, None if s.kind == "scalar" else k, d[2])
    return out


def recipe_shape(args, recipe) -> list:
    """The extents of an output recipe (:meth:`ArgChecker.output_recipes`) for the call arguments `args`."""
    return [d if d.__class__ is int else (args[d[0]] if d[1] is None else args[d[0]].shape[d[1]]) for d in recipe]


class ArgChecker:
    """Checks call arguments against a PrimFunc's parameters and allocates its outputs.

    Built once per kernel; :meth:`prepare` is the per-call fast path. It raises ``TypeError`` /
    ``ValueError`` naming the parameter, e.g.
    ``argument 'B' (index 1): expected dtype float16, got torch.float32``; the index is the position in
    the caller's argument list (outputs excluded). Checks run in order: count, type, dtype, rank/shape,
    strides/contiguity, device -- so dtype/shape errors are reported even for CPU tensors.
    """

    def __init__(self, func, out_idx=None):
        from tvm import tirx

        params = list(func.params)
        self.func = func
        self.out_idx = normalize_out_idx(out_idx, len(params))
        self._slots: list[Any] = []  # symbolic Vars, by slot
        self._slot_names: list[str] = []
        specs: list[ParamSpec] = []
        # scalar params first get slots, so that shapes using them bind to the same slot
        for i, p in enumerate(params):
            is_out = i in self.out_idx
            if tirx.is_buffer_var(p):
                dtype = str(p.dtype)
                try:
                    tdt = tvm_to_torch_dtype(dtype)
                except TypeError:
                    tdt = None
                shape = tuple(self._dim(d) for d in p.shape)
                strides = tuple(self._dim(d) for d in p.strides) if len(p.strides) else None
                try:
                    pack = packing_of(dtype) if tdt is None else 1
                except TypeError:
                    pack = 1  # refused at the call (no torch storage), as before
                storage = packed_storage_dtypes(dtype) if pack > 1 else ()
                if pack > 1 and not shape:
                    raise TypeError(f"tilex: parameter '{p.name}' is a 0-d {dtype} tensor; a {dtype} tensor is "
                                    f"passed packed along its last dimension, so it needs at least one")
                specs.append(ParamSpec(i, p.name, "buffer", dtype, tdt, shape, strides, is_out, p, pack, storage))
            else:
                if is_out:
                    raise ValueError(f"tilex: out_idx {i} names scalar parameter '{p.name}'; "
                                     "only buffers can be outputs")
                dtype = str(p.ty.dtype) if hasattr(p.ty, "dtype") else "handle"
                slot = self._slot_of(p)
                specs.append(ParamSpec(i, p.name, "scalar", dtype, None, (("sym", slot, p.name),),
                                       None, False, p))
        self.params = specs
        self.inputs = [s for s in specs if not s.is_output]
        self.outputs = [specs[i] for i in self.out_idx]
        self.nparams = len(specs)
        self._known_before_outputs = set()
        for s in self.inputs:
            for d in s.shape + (s.strides or ()):
                if isinstance(d, tuple):
                    self._known_before_outputs.add(d[1])
        for s in self.outputs:
            if s.torch_dtype is None and s.pack == 1:
                raise TypeError(f"tilex: output '{s.name}' has dtype {s.dtype}, which torch cannot allocate")
            if s.pack > 1 and not (s.shape[-1].__class__ is int and s.shape[-1] % s.pack == 0):
                raise ValueError(f"tilex: cannot allocate output '{s.name}' ({s.dtype}, shape "
                                 f"{self._fmt_shape(s.shape)}) packed {s.pack} values a byte: its last dimension "
                                 f"must be a constant multiple of {s.pack}; pass it as an input instead")
            for d in s.shape:
                if d is None or (isinstance(d, tuple) and d[1] not in self._known_before_outputs):
                    name = "an expression" if d is None else f"'{d[2]}'"
                    raise ValueError(f"tilex: cannot allocate output '{s.name}': its shape uses {name} "
                                     "that no input determines; pass it as an input instead")
        # slots that size a buffer: a scalar bound to one must not be negative
        self._size_slots = {d[1] for s in specs if s.kind == "buffer" for d in s.shape if isinstance(d, tuple)}
        # precomputed fast-path tables
        self._in_plan = [(s, pos) for pos, s in enumerate(self.inputs)]
        self._buf_plan = [(s, pos) for s, pos in self._in_plan if s.kind == "buffer"]
        self._static_shapes = [tuple(s.shape) if s.kind == "buffer" and all(d.__class__ is int for d in s.shape)
                               else None for s in specs]
        import torch

        self._torch = torch
        self._single_output = len(self.outputs) == 1

    # -- the fast path
    def fast_call(self, fn):
        """A function ``call(*args) -> outputs`` that allocates the outputs and calls `fn` (the compiled module's
        function) without this class's Python checks: TVM's generated host code checks the argument count, types,
        dtypes, shapes, compactness, devices and symbolic bindings itself, so only what it does not check is done
        here (data pointer alignment). ``call`` raises on bad arguments, with TVM's message or any other
        exception; :meth:`prepare` then names the problem (``JITKernel.__call__`` falls back to it). Kernels with
        no output or one output go through the C++ caller (:mod:`tilex.jit.launcher`) where it could be built.
        ``None`` when the outputs have no input tensor to take their device from (such kernels always take the
        checked path)."""
        tensor_pos = tuple(pos for s, pos in self._buf_plan)
        first = tensor_pos[0] if tensor_pos else None
        place = {s.index: pos for s, pos in self._in_plan}
        if any(s.pack > 1 for s, _ in self._buf_plan) or any(s.pack > 1 for s in self.outputs):
            return None  # packed sub-byte tensors are passed as logical views: the checked path makes them
        outs = [(recipe, s.torch_dtype) for recipe, s in zip(self.output_recipes(), self.outputs)]
        if outs and first is None:
            return None
        caller = self._cpp_caller(fn, outs)
        if caller is not None:
            return caller
        trailing = self.out_idx == list(range(self.nparams - len(self.outputs), self.nparams))
        order = tuple(("in", place[i]) if i in place else ("out", self.out_idx.index(i)) for i in range(self.nparams))
        single = self._single_output

        def misaligned(args):
            for p in tensor_pos:
                if args[p].data_ptr() & (DATA_ALIGNMENT - 1):
                    return True
            return False

        if not outs:
            def call(*args):
                if misaligned(args):
                    raise ValueError("misaligned")
                fn(*args)
            return call

        def call(*args):
            if misaligned(args):
                raise ValueError("misaligned")
            t0 = args[first]
            made = [t0.new_empty(recipe_shape(args, recipe), dtype=dt) for recipe, dt in outs]
            if trailing:
                fn(*args, *made)
            else:
                fn(*[args[j] if kind == "in" else made[j] for kind, j in order])
            return made[0] if single else tuple(made)
        return call

    def output_recipes(self) -> list:
        """Per output, its shape as static extents and ``(input position, axis)`` pairs, the input dimension each
        symbolic size is read from (axis None: a scalar input that is the size); :func:`recipe_shape` evaluates
        one for a call's arguments."""
        source = {slot: (pos, axis) for slot, (pos, axis, _) in first_bindings(self.inputs).items()}
        return [tuple(d if d.__class__ is int else source[d[1]] for d in s.shape) for s in self.outputs]

    def _cpp_caller(self, fn, outs):
        """The C++ caller of `fn` (no output, or one whose dtype it allocates), or None."""
        if len(outs) > 1:
            return None
        if outs:
            triple = dtype_triple(self.outputs[0].dtype)
            recipe = encode_recipe(outs[0][0])
            if triple is None or recipe is None:
                return None
            header = (self.out_idx[0], len(recipe), *recipe, *triple)
        else:
            header = (-1, 0, 0, 0, 0)
        factory = caller_factory()
        if factory is None:
            return None
        return factory(fn, len(self.inputs), *header)

    # -- construction helpers
    def _slot_of(self, var) -> int:
        for k, v in enumerate(self._slots):
            if v.same_as(var):
                return k
        self._slots.append(var)
        self._slot_names.append(var.name)
        return len(self._slots) - 1

    def _dim(self, d):
        from tvm import tirx
        import tvm

        if isinstance(d, int):
            return d
        if isinstance(d, tvm.tirx.IntImm):
            return int(d)
        if isinstance(d, tirx.Var) and not tirx.is_buffer_var(d):
            return ("sym", self._slot_of(d), d.name)
        return None

    # -- errors
    @staticmethod
    def _err(cls, s: ParamSpec, pos: int, msg: str):
        return cls(f"argument '{s.name}' (index {pos}): {msg}")

    # -- per call
    def prepare(self, args: Sequence[Any]):
        """Check ``args`` (the non-output parameters, in order) and allocate the outputs.

        Returns ``(full_args, outputs)`` where ``full_args`` is the complete argument list for the
        compiled function and ``outputs`` is ``None``, one tensor, or a tuple of tensors.
        """
        torch = self._torch

        if len(args) != len(self.inputs):
            names = ", ".join(s.name for s in self.inputs)
            raise TypeError(f"tilex kernel '{self.func_name}' takes {len(self.inputs)} argument(s) ({names}), "
                            f"got {len(args)}" + (f"; outputs {[s.name for s in self.outputs]} are allocated "
                                                  "and returned" if self.outputs else ""))
        bound: list = [None] * len(self._slots)
        device = None
        full: list = [None] * self.nparams
        Tensor = torch.Tensor
        for s, pos in self._in_plan:
            a = args[pos]
            if s.kind == "scalar":
                self._check_scalar(s, pos, a, bound)
                full[s.index] = a
                continue
            if not isinstance(a, Tensor):
                raise self._err(TypeError, s, pos, f"expected a torch.Tensor, got {type(a).__name__}")
            if s.pack > 1:
                full[s.index] = self._packed(s, pos, a, bound)
                continue
            if a.dtype != s.torch_dtype:
                if s.torch_dtype is None:
                    raise self._err(TypeError, s, pos, f"a {s.dtype} tensor parameter cannot be passed from torch "
                                    f"(got {a.dtype}): torch has no such dtype and its values do not pack whole "
                                    f"into bytes; pass them packed in a uint8 / int32 tensor parameter instead")
                raise self._err(TypeError, s, pos, f"expected dtype {s.dtype}, got {a.dtype}")
            shp = a.shape
            static = self._static_shapes[s.index]
            if static is not None and shp == static:
                pass  # fast path: fully static shape matches
            elif len(shp) != len(s.shape):
                raise self._err(ValueError, s, pos, f"expected a {len(s.shape)}-d tensor of shape "
                                f"{self._fmt_shape(s.shape)}, got shape {tuple(shp)}")
            else:
                self._check_dims(s, pos, shp, bound)
            if s.strides is None:
                if not a.is_contiguous():
                    raise self._err(ValueError, s, pos, f"expected a contiguous tensor, got strides {a.stride()} "
                                    f"for shape {tuple(shp)} (call .contiguous())")
            else:
                st = a.stride()
                for k, d in enumerate(s.strides):
                    if shp[k] == 1:
                        continue
                    if d.__class__ is int:
                        if st[k] != d:
                            raise self._err(ValueError, s, pos, f"expected strides "
                                            f"{self._fmt_shape(s.strides)}, got {st}")
                    elif d is not None:
                        self._bind(s, pos, d, st[k], bound, f"stride {k}")
            full[s.index] = a
        # devices and alignment last, so that dtype/shape errors are reported first (also for CPU tensors)
        for s, pos in self._buf_plan:
            ptr = args[pos].data_ptr()
            if ptr % DATA_ALIGNMENT:
                raise self._err(ValueError, s, pos, f"data pointer {ptr:#x} is not {DATA_ALIGNMENT}-byte aligned "
                                f"(it is {ptr % DATA_ALIGNMENT} bytes past a boundary); tilex kernels read and "
                                f"write with 16-byte vectors and TMA, which need aligned addresses: pass a tensor "
                                f"that starts on a {DATA_ALIGNMENT}-byte boundary (a view at an offset is not; "
                                f".clone() one)")
            dev = args[pos].device
            if device is None:
                if dev.type != "cuda":
                    raise self._err(ValueError, s, pos, f"expected a CUDA tensor, got device {dev}")
                device = dev
            elif dev != device:
                what = "a tensor" if dev.type == "cuda" else "a CUDA tensor"
                raise self._err(ValueError, s, pos, f"expected {what} on {device} (like the previous "
                                f"arguments), got device {dev}")
        if not self.outputs:
            return full, None
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device())
        outs = []
        for s in self.outputs:
            shape = [d if d.__class__ is int else bound[d[1]] for d in s.shape]
            if s.pack > 1:
                t = torch.empty(shape[:-1] + [shape[-1] // s.pack], dtype=s.storage[0], device=device)
                full[s.index] = logical_view(t, shape, s.dtype)
            else:
                t = torch.empty(shape, dtype=s.torch_dtype, device=device)
                full[s.index] = t
            outs.append(t)
        return full, (outs[0] if self._single_output else tuple(outs))

    def _packed(self, s, pos, a, bound):
        """Check the packed torch tensor `a` of sub-byte parameter `s` (see the module docstring) and return the
        logical view the kernel takes."""
        want = self._fmt_shape(s.shape[:-1] + (self._packed_dim(s.shape[-1], s.pack),))
        if a.dtype not in s.storage:
            raise self._err(TypeError, s, pos, f"expected {s.dtype} values packed {s.pack} a byte (TileLang's "
                            f"storage): a {' / '.join(str(d) for d in s.storage)} tensor of shape {want}, "
                            f"got {a.dtype}")
        shp = tuple(a.shape)
        if len(shp) != len(s.shape):
            raise self._err(ValueError, s, pos, f"expected a {len(s.shape)}-d tensor of packed shape {want} "
                            f"({s.dtype} {self._fmt_shape(s.shape)}, {s.pack} values a byte), got shape {shp}")
        logical = list(shp[:-1]) + [shp[-1] * s.pack]
        last = s.shape[-1]
        if last.__class__ is int and last % s.pack:
            raise self._err(ValueError, s, pos, f"a {s.dtype} tensor of shape {self._fmt_shape(s.shape)} cannot be "
                            f"passed packed: its last dimension is not a multiple of {s.pack} values a byte")
        for k, d in enumerate(s.shape):
            if d.__class__ is int:
                if logical[k] != d:
                    raise self._err(ValueError, s, pos, f"expected packed shape {want} ({s.dtype} "
                                    f"{self._fmt_shape(s.shape)}, {s.pack} values a byte along the last "
                                    f"dimension), got {shp}")
            elif d is not None:
                self._bind(s, pos, d, logical[k], bound, f"dimension {k}" +
                           (f" (packed: {shp[k]} bytes of {s.pack} values)" if k == len(shp) - 1 else ""))
        if s.strides is not None or not a.is_contiguous():
            if s.strides is not None:
                raise self._err(ValueError, s, pos, f"a strided {s.dtype} parameter is not supported: packed "
                                f"sub-byte tensors are passed contiguous")
            raise self._err(ValueError, s, pos, f"expected a contiguous packed tensor, got strides {a.stride()} "
                            f"for shape {shp} (call .contiguous())")
        return logical_view(a, logical, s.dtype)

    @staticmethod
    def _packed_dim(d, pack):
        """The packed extent of a last dimension `d` (a spec dimension) as it prints."""
        if d.__class__ is int:
            return d // pack if d % pack == 0 else f"{d}/{pack}"
        return f"{d[2]}/{pack}" if isinstance(d, tuple) else "?"

    def _check_dims(self, s, pos, shp, bound):
        for k, d in enumerate(s.shape):
            if d.__class__ is int:
                if shp[k] != d:
                    raise self._err(ValueError, s, pos, f"expected shape {self._fmt_shape(s.shape)}, "
                                    f"got {tuple(shp)} (dimension {k}: expected {d}, got {shp[k]})")
            elif d is not None:
                self._bind(s, pos, d, shp[k], bound, f"dimension {k}")

    def _bind(self, s, pos, d, value, bound, what):
        slot = d[1]
        prev = bound[slot]
        if prev is None:
            bound[slot] = value
        elif prev != value:
            raise self._err(ValueError, s, pos, f"{what} is '{d[2]}'={value}, but '{d[2]}' was already bound "
                            f"to {prev} by an earlier argument")

    def _check_scalar(self, s, pos, a, bound):
        dt = s.dtype
        if dt.startswith(("int", "uint")):
            if isinstance(a, bool) or not isinstance(a, int):
                raise self._err(TypeError, s, pos, f"expected a Python int for scalar {dt}, got {type(a).__name__}")
        elif dt == "bool":
            if not isinstance(a, (bool, int)):
                raise self._err(TypeError, s, pos, f"expected a bool, got {type(a).__name__}")
        elif dt.startswith(("float", "bfloat")):
            if isinstance(a, bool) or not isinstance(a, (int, float)):
                raise self._err(TypeError, s, pos, f"expected a Python float for scalar {dt}, "
                                f"got {type(a).__name__}")
        d = s.shape[0]
        if isinstance(a, int) and not isinstance(a, bool):
            if a < 0 and d[1] in self._size_slots:
                raise self._err(ValueError, s, pos, f"'{s.name}' sizes a tensor and must not be negative, got {a}")
            self._bind(s, pos, d, a, bound, "value")

    @staticmethod
    def _fmt_shape(dims) -> str:
        parts = [d[2] if isinstance(d, tuple) else ("?" if d is None else str(d)) for d in dims]
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"

    @property
    def func_name(self) -> str:
        attrs = self.func.attrs
        if attrs is not None and "global_symbol" in attrs:
            return str(attrs["global_symbol"])
        return "main"
