"""Typed builders for the device functions of ``src/tilex/*.h``, grouped by header, and their readers.

Every ``tilex::`` device function the generated code calls is named here once, as a constant, and built by one
function: a void function becomes a statement (``Evaluate`` of a ``call_extern``), a value-returning one an
expression. Template arguments are part of the emitted name (``tilex::cp_async_wait<1>``); passes that look for
a call compare base names with :func:`is_call` and read template arguments with :func:`template_args`.

Launch facts a pass decides and the CUDA post-processor applies (the minimum blocks per multiprocessor of a
warp-specialized kernel, the cluster shape) travel as marker calls: :func:`min_blocks_per_sm` and
:func:`cluster_dims` write them, :func:`read_launch_marker` reads them back from the IR or from the CUDA text.
"""
from __future__ import annotations

import re

import tvm
from tvm import tirx
from tvm.tirx import op as tirx_op

from tilex.ir.lowbit_chunk import raw_scale_exponent
from tilex.ir.visit import dtype_of, walk

# ---- copy_async.h: cp.async (sm80+) ---------------------------------------------------------------------------
CP_ASYNC = "tilex::cp_async"
CP_ASYNC_ZFILL = "tilex::cp_async_zfill"
CP_ASYNC_COMMIT = "tilex::cp_async_commit"
CP_ASYNC_WAIT = "tilex::cp_async_wait"
# ---- mma_sm80.h: ldmatrix + mma.sync ----------------------------------------------------------------------------
LDMATRIX = "tilex::ldmatrix"
MMA_M16N8K8 = "tilex::mma_m16n8k8"
MMA_M16N8K16 = "tilex::mma_m16n8k16"
MMA_M16N8K32 = "tilex::mma_m16n8k32"
MMA_M16N8K64 = "tilex::mma_m16n8k64"
ROUND_TF32 = "tilex::round_tf32"
# ---- wgmma_sm90.h -------------------------------------------------------------------------------------------------
FENCE_PROXY_ASYNC = "tilex::fence_proxy_async"
WGMMA_FENCE = "tilex::wgmma_fence"
WGMMA_COMMIT = "tilex::wgmma_commit"
WGMMA_WAIT = "tilex::wgmma_wait"
WGMMA_DESC = "tilex::wgmma_desc"
WGMMA_M64 = "tilex::wgmma_m64"
# ---- dequant.h ----------------------------------------------------------------------------------------------------
SCALE_PAIR = "tilex::scale_pair"
SCALE_ZERO_PAIR = "tilex::scale_zero_pair"
ZERO_PAIR = "tilex::zero_pair"
SCALE_SHIFT_PAIR = "tilex::scale_shift_pair"
# ---- reduce.h -----------------------------------------------------------------------------------------------------
SHFL_XOR = "tilex::shfl_xor"
# ---- warp.h: shuffles of any value of up to 8 bytes, warp reductions --------------------------------------------
SHFL_SYNC_ANY = "tilex::shfl_sync"
SHFL_XOR_SYNC_ANY = "tilex::shfl_xor_sync"
SHFL_DOWN_SYNC_ANY = "tilex::shfl_down_sync"
SHFL_UP_SYNC_ANY = "tilex::shfl_up_sync"
#: the shuffles by kind (the T.shfl_* name without its prefix)
SHUFFLES = {"sync": SHFL_SYNC_ANY, "xor": SHFL_XOR_SYNC_ANY, "down": SHFL_DOWN_SYNC_ANY, "up": SHFL_UP_SYNC_ANY}
WARP_REDUCE_PREFIX = "tilex::warp_reduce_"
WARP_REDUCE_KINDS = ("sum", "max", "min", "bitand", "bitor")
# ---- builtin.h: dp4a, device asserts, block-wide named barriers, programmatic dependent launch ------------------
DP4A = "tilex::dp4a"
DEVICE_ASSERT = "tilex::device_assert"
BAR_SYNC = "tilex::bar_sync"
PDL_WAIT = "tilex::pdl_wait"
PDL_LAUNCH_DEPENDENTS = "tilex::pdl_launch_dependents"
MIN_BLOCKS_HINT = "tilex::min_blocks_hint"  # launch marker (T.annotate_min_blocks_per_sm)
MAY_ALIAS = "tilex::may_alias"  # signature marker (T.annotate_restrict_buffers)
IMPORT_SOURCE = "tilex::import_source"  # source marker (T.import_source, T.Kernel(prelude=))
# ---- CUDA warp-vote builtins --------------------------------------------------------------------------------------
BALLOT_SYNC = "__ballot_sync"
ACTIVEMASK = "__activemask"
ANY_SYNC = "__any_sync"
ALL_SYNC = "__all_sync"
# ---- CUDA math builtins (lowerings of TVM ops TVM 0.27 leaves without a CUDA form) -------------------------------
FMA_BY_DTYPE = {"float32": "fmaf", "float64": "fma", "float16": "__hfma", "bfloat16": "__hfma"}
POPC = "__popc"
POPCLL = "__popcll"
# ---- fast_math.h --------------------------------------------------------------------------------------------------
EXP2_APPROX = "tilex::exp2_approx"
EXP_APPROX = "tilex::exp_approx"
# ---- atomic.h -----------------------------------------------------------------------------------------------------
ATOMIC_PREFIX = "tilex::atomic_"  # atomic_add / atomic_max / atomic_min / atomic_add_vec<global>
RED_PREFIX = "tilex::red"
# ---- debug.h ------------------------------------------------------------------------------------------------------
DEBUG_PRINT = "tilex::debug_print"
# ---- tma.h: mbarriers, TMA, clusters, register reconfiguration ----------------------------------------------------
MBAR_INIT = "tilex::mbar_init"
MBAR_INIT_FENCE = "tilex::mbar_init_fence"
MBAR_WAIT = "tilex::mbar_wait"
MBAR_ARRIVE = "tilex::mbar_arrive"
MBAR_ARRIVE_CLUSTER = "tilex::mbar_arrive_cluster"
MBAR_ARRIVE_EXPECT_TX = "tilex::mbar_arrive_expect_tx"
SYNCWARP = "__syncwarp"  # (a CUDA builtin)
TMA_LOAD_1D = "tilex::tma_load_1d"
TMA_LOAD_2D = "tilex::tma_load_2d"
TMA_LOAD_2D_MULTICAST = "tilex::tma_load_2d_multicast"
TMA_LOAD_3D = "tilex::tma_load_3d"
TMA_LOAD_4D = "tilex::tma_load_4d"
TMA_LOAD_5D = "tilex::tma_load_5d"
#: the N-d tensor-map loads by rank (rank 2: TMA_LOAD_2D); never multicast (transform/hopper/clusters.py)
TMA_LOAD_ND = {3: TMA_LOAD_3D, 4: TMA_LOAD_4D, 5: TMA_LOAD_5D}
TMA_STORE_PREFIX = "tilex::tma_store_"
TMA_STORE_ND = {r: f"{TMA_STORE_PREFIX}{r}d" for r in (2, 3, 4, 5)}
TMA_REDUCE_ADD_ND = {r: f"tilex::tma_reduce_add_{r}d" for r in (2, 3, 4, 5)}
BULK_COMMIT = "tilex::bulk_commit"
BULK_WAIT_READ = "tilex::bulk_wait_read"
NAMED_BARRIER_SYNC = "tilex::named_barrier_sync"
NAMED_BARRIER_WAIT = "tilex::named_barrier_wait"
NAMED_BARRIER_ARRIVE = "tilex::named_barrier_arrive"
CLUSTER_SYNC = "tilex::cluster_sync"
REG_ALLOC = "tilex::reg_alloc"
REG_DEALLOC = "tilex::reg_dealloc"
MIN_BLOCKS_PER_SM = "tilex::min_blocks_per_sm"  # launch marker
CLUSTER_DIMS = "tilex::cluster_dims"  # launch marker
# ---- stream_k.h ---------------------------------------------------------------------------------------------------
STREAMK_FIXUP = "tilex::streamk_fixup"
# ---- lowbit.h -----------------------------------------------------------------------------------------------------
DECODE_CHUNK_F16 = "tilex::decode_chunk_f16"
DECODE_CHUNK_BF16 = "tilex::decode_chunk_bf16"
DECODE_ONE_F32 = "tilex::decode_one_f32"
# ---- sub_byte.h ---------------------------------------------------------------------------------------------------
ENCODE_FLOAT_CODE = "tilex::encode_float_code"
STORE_CODE = "tilex::store_code"

#: Device functions that write global memory (a stream-K contributor must not run them).
GLOBAL_WRITE_PREFIXES = (TMA_STORE_PREFIX, ATOMIC_PREFIX, RED_PREFIX)
#: Device functions that are barriers across threads (a bulk store's reads must be done before them).
BARRIERS = (NAMED_BARRIER_SYNC, CLUSTER_SYNC)


def _templated(name, *targs):
    return f"{name}<{', '.join(str(a) for a in targs)}>" if targs else name


def _stmt(name, *args):
    return tirx.Evaluate(tirx.call_extern("void", name, *args))


# ---- readers ------------------------------------------------------------------------------------------------------
def name_of(node) -> str | None:
    """The full device-function name (template arguments included) of a ``call_extern`` Call, or of an Evaluate
    of one; None for anything else."""
    call = node.value if isinstance(node, tirx.Evaluate) else node
    if isinstance(call, tvm.ir.Call) and isinstance(call.op, tvm.ir.Op) and call.op.name == "tirx.call_extern":
        return str(call.args[0].value)
    return None


def base_name(full: str) -> str:
    """``tilex::cp_async_wait<1>`` -> ``tilex::cp_async_wait``."""
    return full.split("<", 1)[0]


def is_call(node, name: str) -> bool:
    """Whether `node` (a Call or an Evaluate of one) calls the device function `name` (any template arguments)."""
    full = name_of(node)
    return full is not None and base_name(full) == name


def starts_with(node, prefixes) -> bool:
    """Whether `node` calls a device function whose name starts with one of `prefixes` (a str or a tuple)."""
    full = name_of(node)
    return full is not None and full.startswith(prefixes)


def template_args(full: str) -> list[str]:
    """The template arguments of a device-function name, as written: ``f<2, 1>`` -> ``["2", "1"]``."""
    if "<" not in full:
        return []
    inner = full[full.index("<") + 1:full.rindex(">")]
    return [a.strip() for a in inner.split(",")]


# ---- copy_async.h -------------------------------------------------------------------------------------------------
def cp_async(nbytes, dst_ptr, src_ptr):
    """Asynchronous copy of `nbytes` (4, 8 or 16) global -> shared."""
    return _stmt(_templated(CP_ASYNC, nbytes), dst_ptr, src_ptr)


def cp_async_zfill(nbytes, dst_ptr, src_ptr, cond):
    """`cp_async` that writes zeros instead where `cond` is false."""
    return _stmt(_templated(CP_ASYNC_ZFILL, nbytes), dst_ptr, src_ptr, cond)


def cp_async_commit():
    return _stmt(CP_ASYNC_COMMIT)


def cp_async_wait(n):
    """Wait until at most `n` committed cp.async groups are in flight."""
    return _stmt(_templated(CP_ASYNC_WAIT, n))


# ---- mma_sm80.h ---------------------------------------------------------------------------------------------------
def ldmatrix(count, trans, dst_ptr, src_ptr):
    """``ldmatrix.x{count}`` (``.trans`` when `trans`): 8x8 b16 matrices from shared memory into registers."""
    return _stmt(f"{LDMATRIX}_x{count}{'_trans' if trans else ''}", dst_ptr, src_ptr)


def mma_m16n8k8_tf32(c_ptr, a_ptr, b_ptr):
    """``mma.sync.m16n8k8`` on tf32 inputs (float32 registers, each rounded to the nearest tf32 first)
    accumulating into fp32 `c_ptr`."""
    return _stmt(f"{MMA_M16N8K8}_tf32", c_ptr, a_ptr, b_ptr)


def round_tf32(x):
    """float32 `x` rounded to tf32 (``cvt.rna.tf32.f32``: nearest, ties away from zero), as a float32 whose 13 low
    mantissa bits are 0 (T.tfloat32(x))."""
    return tirx.call_pure_extern("float32", ROUND_TF32, x)


def mma_m16n8k16(in_ty, c_ptr, a_ptr, b_ptr, half_acc=False):
    """``mma.sync.m16n8k16`` on `in_ty` inputs (``f16`` / ``bf16``) accumulating into fp32 `c_ptr`; with
    `half_acc` (``f16`` inputs only) into float16 `c_ptr` (two values per 32-bit register)."""
    return _stmt(f"{MMA_M16N8K16}_{in_ty}{'_acc_f16' if half_acc else ''}", c_ptr, a_ptr, b_ptr)


def mma_m16n8k32(family, ta, tb, c_ptr, a_ptr, b_ptr):
    """``mma.sync.m16n8k32`` on 8-bit inputs: `family` ``i8`` (s8/u8 -> s32) or ``f8`` (e4m3/e5m2 -> f32); `ta`,
    `tb` pick each operand's type (0: s8 / e4m3, 1: u8 / e5m2)."""
    return _stmt(f"{MMA_M16N8K32}_{family}<{int(ta)}, {int(tb)}>", c_ptr, a_ptr, b_ptr)


def mma_m16n8k64_i4(ta, tb, c_ptr, a_ptr, b_ptr):
    """``mma.sync.m16n8k64`` on 4-bit integer inputs accumulating into int32 `c_ptr`; `ta`, `tb` pick each
    operand's type (0: s4, 1: u4)."""
    return _stmt(f"{MMA_M16N8K64}_i4<{int(ta)}, {int(tb)}>", c_ptr, a_ptr, b_ptr)


# ---- wgmma_sm90.h -------------------------------------------------------------------------------------------------
def fence_proxy_async():
    """Make this thread's generic-proxy shared-memory writes visible to the async proxy (wgmma, TMA)."""
    return _stmt(FENCE_PROXY_ASYNC)


def wgmma_fence():
    return _stmt(WGMMA_FENCE)


def wgmma_commit():
    return _stmt(WGMMA_COMMIT)


def wgmma_wait(n):
    """Wait until at most `n` committed wgmma groups are in flight."""
    return _stmt(_templated(WGMMA_WAIT, n))


def wgmma_desc(ptr, lbo, sbo, swizzle_bytes):
    """The 64-bit shared-memory matrix descriptor of a wgmma operand (an expression)."""
    return tirx.call_extern("uint64", WGMMA_DESC, ptr, lbo, sbo, swizzle_bytes)


def wgmma_ss(n, ty, a_mn_major, b_mn_major, acc_ptr, a_desc, b_desc, scale_d, half_acc=False):
    """``wgmma.mma_async.m64n{n}k16`` with both operands in shared memory (descriptors); `half_acc`: a float16
    accumulator (``f16`` inputs)."""
    acc = "_acc_f16" if half_acc else ""
    return _stmt(f"{WGMMA_M64}n{n}k16_{ty}{acc}<{int(a_mn_major)}, {int(b_mn_major)}>", acc_ptr, a_desc, b_desc,
                 scale_d)


def wgmma_rs(n, ty, b_mn_major, acc_ptr, a_ptr, b_desc, scale_d, half_acc=False):
    """``wgmma.mma_async.m64n{n}k16`` with A in registers; `half_acc`: a float16 accumulator (``f16`` inputs)."""
    acc = "_acc_f16" if half_acc else ""
    return _stmt(f"{WGMMA_M64}n{n}k16_rs_{ty}{acc}<{int(b_mn_major)}>", acc_ptr, a_ptr, b_desc, scale_d)


def wgmma_ss_8bit(n, family, ta, tb, acc_ptr, a_desc, b_desc, scale_d):
    """``wgmma.mma_async.m64n{n}k32`` on 8-bit K-major operands in shared memory: `family` ``f8`` (e4m3/e5m2 ->
    f32) or ``i8`` (s8/u8 -> s32); `ta`, `tb` pick each operand's type (0: e4m3 / s8, 1: e5m2 / u8)."""
    return _stmt(f"{WGMMA_M64}n{n}k32_{family}<{int(ta)}, {int(tb)}>", acc_ptr, a_desc, b_desc, scale_d)


def wgmma_rs_8bit(n, family, ta, tb, acc_ptr, a_ptr, b_desc, scale_d):
    """``wgmma.mma_async.m64n{n}k32`` on 8-bit operands with A in registers (16 elements, four .b32 per thread)."""
    return _stmt(f"{WGMMA_M64}n{n}k32_rs_{family}<{int(ta)}, {int(tb)}>", acc_ptr, a_ptr, b_desc, scale_d)


# ---- dequant.h ----------------------------------------------------------------------------------------------------
_PAIR_SUFFIX = {"float16": "f16", "bfloat16": "bf16"}


def scale_pair(dtype, ptr, scale=None, zero=None):
    """Two 16-bit floats of `dtype` at `ptr` become ``(x - zero) * scale`` (either may be None)."""
    suffix = _PAIR_SUFFIX[dtype]
    if scale is not None and zero is not None:
        return _stmt(f"{SCALE_ZERO_PAIR}_{suffix}", ptr, scale, zero)
    if scale is not None:
        return _stmt(f"{SCALE_PAIR}_{suffix}", ptr, scale)
    return _stmt(f"{ZERO_PAIR}_{suffix}", ptr, zero)


def scale_shift_pair(dtype, ptr, scale, shift):
    """Two 16-bit floats of `dtype` at `ptr` become ``x * scale + shift`` (one fma)."""
    return _stmt(f"{SCALE_SHIFT_PAIR}_{_PAIR_SUFFIX[dtype]}", ptr, scale, shift)


# ---- reduce.h -----------------------------------------------------------------------------------------------------
def shfl_xor(dtype, value, offset):
    """``__shfl_xor_sync`` over the full warp (an expression of `dtype`)."""
    return tirx.call_extern(dtype, SHFL_XOR, value, offset)


# ---- warp.h -------------------------------------------------------------------------------------------------------
FULL_WARP_MASK = 0xFFFFFFFF


def shuffle(kind: str, dtype, mask, value, lane, width):
    """``__shfl{_xor,_down,_up,}_sync(mask, value, lane, width)`` of a value of `dtype` (up to 8 bytes, any type:
    the value travels as its bits); `kind` is one of :data:`SHUFFLES`' keys (an expression of `dtype`)."""
    return tirx.call_extern(dtype, SHUFFLES[kind], mask, value, lane, width)


def warp_reduce(kind: str, dtype, value):
    """The `kind` (sum, max, min, bitand, bitor) of `value` over the 32 lanes of the warp, in every lane (an
    expression of `dtype`; every lane of the warp must call it)."""
    if kind not in WARP_REDUCE_KINDS:
        raise ValueError(f"warp_reduce: kind must be one of {WARP_REDUCE_KINDS}, got {kind!r}")
    return tirx.call_extern(dtype, f"{WARP_REDUCE_PREFIX}{kind}", value)


# ---- builtin.h ----------------------------------------------------------------------------------------------------
def dp4a(a_ptr, b_ptr, c_ptr):
    """``*c += dot(a[0:4], b[0:4])`` on signed bytes into the int32 at `c_ptr` (an expression)."""
    return tirx.call_extern("void", DP4A, a_ptr, b_ptr, c_ptr)


def c_string(text: str):
    """A StringImm that prints as the C string literal of `text`: TVM's CUDA code generator writes a StringImm
    between quotes as it is, so quotes, backslashes and control characters are escaped here."""
    out = []
    for ch in text:
        if ch in "\\\"":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(f"\\{ord(ch):03o}")
        else:
            out.append(ch)
    return tvm.ir.StringImm("".join(out))


def device_assert(cond, msg: str, file: str, line: int):
    """Stop the kernel like a device-side assert (printing `msg`, `file`, `line`) where `cond` is false."""
    return tirx.call_extern("void", DEVICE_ASSERT, cond, c_string(msg), c_string(file), tirx.const(line, "uint32"))


def bar_sync(bar_id):
    """``bar.sync id``: named barrier `bar_id` across every thread of the block."""
    return _stmt(BAR_SYNC, bar_id)


def pdl_wait():
    """``griddepcontrol.wait`` (sm_90+)."""
    return _stmt(PDL_WAIT)


def pdl_launch_dependents():
    """``griddepcontrol.launch_dependents`` (sm_90+)."""
    return _stmt(PDL_LAUNCH_DEPENDENTS)


def min_blocks_hint(n):
    """Launch marker: the program asks for at least `n` resident blocks per multiprocessor; the CUDA
    post-processor puts `n` into ``__launch_bounds__`` of a kernel whose register plan is not tilex's own (a
    warp-specialized kernel keeps the minimum of its :func:`min_blocks_per_sm` marker)."""
    return _stmt(_templated(MIN_BLOCKS_HINT, n))


def may_alias(*data_vars):
    """Signature marker: the kernel parameters behind `data_vars` (buffer data pointers) lose ``__restrict__``."""
    return _stmt(MAY_ALIAS, *data_vars)


def read_may_alias(code: str) -> list[str]:
    """The parameter names of every :func:`may_alias` marker in generated CUDA text."""
    names, at = [], 0
    while True:
        at = code.find(MAY_ALIAS + "(", at)
        if at < 0:
            return names
        end = code.index(")", at)
        names += [a.strip() for a in code[at + len(MAY_ALIAS) + 1:end].split(",") if a.strip()]
        at = end


def import_source(source: str):
    """Source marker: CUDA text (device functions a ``call_extern`` calls) the CUDA post-processor writes before
    the kernels of the module. TVM writes a string argument unescaped, so the text travels as the hex digits of
    its UTF-8 bytes; :func:`read_imported_sources` takes the markers out again."""
    return _stmt(IMPORT_SOURCE, source.encode().hex())


_IMPORT_SOURCE_LINE = re.compile(r'^[ \t]*' + re.escape(IMPORT_SOURCE) + r'\("([0-9a-f]*)"\);[ \t]*\n', re.M)


def read_imported_sources(code: str) -> tuple[str, list[str]]:
    """`code` without its :func:`import_source` marker statements, and the texts they carry (each once, in order
    of first appearance). ValueError when a marker is not a statement of the form the builder writes."""
    sources = list(dict.fromkeys(bytes.fromhex(h).decode() for h in _IMPORT_SOURCE_LINE.findall(code)))
    code = _IMPORT_SOURCE_LINE.sub("", code)
    if IMPORT_SOURCE in code:
        raise ValueError(f"a {IMPORT_SOURCE} marker is not a statement `{IMPORT_SOURCE}(\"<hex>\");` of its own line")
    return code, sources


# ---- CUDA warp-vote builtins --------------------------------------------------------------------------------------
def ballot_sync(mask, predicate):
    """``__ballot_sync``: the uint32 mask of the lanes in `mask` whose predicate is non-zero."""
    return tirx.call_extern("uint32", BALLOT_SYNC, mask, predicate)


def activemask():
    """``__activemask()``: the uint32 mask of the lanes executing the call."""
    return tirx.call_extern("uint32", ACTIVEMASK)


def vote_sync(kind: str, mask, predicate):
    """``__any_sync`` (`kind` "any") or ``__all_sync`` ("all"): an int32, non-zero when any / all lanes in `mask`
    have a non-zero predicate."""
    return tirx.call_extern("int32", {"any": ANY_SYNC, "all": ALL_SYNC}[kind], mask, predicate)


# ---- CUDA math builtins -------------------------------------------------------------------------------------------
def fma(x, y, z):
    """``x * y + z`` rounded once (``fmaf`` / ``fma`` / ``__hfma``) for a scalar floating-point dtype; for integers
    the plain ``x * y + z``. The three operands have one dtype."""
    dtype = dtype_of(x)
    if dtype_of(y) != dtype or dtype_of(z) != dtype:
        raise TypeError(f"fma: the operands must have one dtype, got {dtype}, {dtype_of(y)}, {dtype_of(z)}")
    fn = FMA_BY_DTYPE.get(dtype)
    if fn is not None:
        return tirx.call_pure_extern(dtype, fn, x, y, z)
    t = tvm.DataType(dtype)
    if t.type_code in (tvm.DataTypeCode.INT, tvm.DataTypeCode.UINT) and t.lanes == 1:
        return x * y + z
    raise TypeError(f"fma: no CUDA fused multiply-add for {dtype} (scalar float16/bfloat16/float32/float64 or "
                    f"integers)")


def popcount(x):
    """The number of set bits of an integer, in its own dtype (``__popc`` / ``__popcll`` of its bits)."""
    dtype = dtype_of(x)
    dt = tvm.DataType(dtype)
    if dt.type_code not in (tvm.DataTypeCode.INT, tvm.DataTypeCode.UINT) or dt.lanes != 1 or dt.bits > 64:
        raise TypeError(f"popcount: needs a scalar integer of at most 64 bits, got {dtype}")
    if dt.bits == 64:
        count = tirx.call_pure_extern("int32", POPCLL, tirx.Cast("uint64", x))
    else:
        # the value's own bits (a negative int8 has 8 set bits, not 32)
        bits = tirx.Cast(f"uint{dt.bits}", x) if dt.type_code == tvm.DataTypeCode.INT else x
        count = tirx.call_pure_extern("int32", POPC, tirx.Cast("uint32", bits))
    return count if dtype == "int32" else tirx.Cast(dtype, count)


def _lower_popcount(call):
    return popcount(call.args[0])


def _register_lowerings():
    """TVM 0.27 gives tirx.popcount (TVMScript's T.popcount) a CUDA form for unsigned types only: it lowers
    through :func:`popcount` for every integer (level 20 wins over TVM's own). Once per process (a second
    registration at the same level is an error in TVM). tirx.fma is deliberately not given a CUDA lowering: TVM's
    LowerIntrin would then turn every floating-point ``a * b + c`` of every kernel into that op; ``T.fma`` of
    tile programs is built by :func:`fma` directly (tilex.language.builtin)."""
    try:
        tirx_op.register_intrin_lowering("tirx.popcount", target="cuda", f=_lower_popcount, level=20)
    except tvm.error.InternalError:  # already registered at this level (the module was reloaded)
        pass


_register_lowerings()


# ---- fast_math.h --------------------------------------------------------------------------------------------------
def exp2_approx(x):
    """float32 2^x on ``ex2.approx.ftz``."""
    return tirx.call_extern("float32", EXP2_APPROX, x)


def exp_approx(x):
    """float32 e^x on ``ex2.approx.ftz``."""
    return tirx.call_extern("float32", EXP_APPROX, x)



# ---- atomic.h -----------------------------------------------------------------------------------------------------
def atomic_name(kind_name: str, vector_global: bool | None = None) -> str:
    """``tilex::atomic_<kind>`` for one element, or (`vector_global` set) ``tilex::atomic_add_vec<global?>``."""
    if vector_global is None:
        return f"{ATOMIC_PREFIX}{kind_name}"
    return f"{ATOMIC_PREFIX}add_vec<{'true' if vector_global else 'false'}>"


def atomic(name: str, ptr, *args):
    """A call (expression) of an atomic helper named by :func:`atomic_name`."""
    return tirx.call_extern("void", name, ptr, *args)


#: memory orders of :func:`atomic_fetch` (C++ names; consume is taken as acquire)
ATOMIC_ORDERS = {"relaxed": 0, "consume": 1, "acquire": 1, "release": 2, "acq_rel": 3, "seq_cst": 4}
ATOMIC_FETCH_KINDS = {"add": 0, "max": 1, "min": 2}


def atomic_fetch(kind_name: str, order: str, dtype: str, ptr, value):
    """``tilex::atomic_fetch<kind, order>(ptr, value)``: the atomic, device scope, returning the value before (an
    expression of `dtype`)."""
    name = _templated(f"{ATOMIC_PREFIX}fetch", ATOMIC_FETCH_KINDS[kind_name], ATOMIC_ORDERS[order])
    return tirx.call_extern(dtype, name, ptr, value)


def is_atomic(node) -> bool:
    return starts_with(node, ATOMIC_PREFIX)


def is_vector_atomic(node) -> bool:
    """Whether `node` calls ``tilex::atomic_add_vec`` (its value arguments: one per element it adds to)."""
    return starts_with(node, f"{ATOMIC_PREFIX}add_vec")


# ---- debug.h ------------------------------------------------------------------------------------------------------
def debug_print(c_type, fmt, value, *indices):
    """``printf`` of one value (of C type `c_type`) with the block/thread prefix (an expression)."""
    return tirx.call_extern("void", _templated(DEBUG_PRINT, c_type), fmt, value, *indices)


# ---- tma.h --------------------------------------------------------------------------------------------------------
def mbar_init(bar_ptr, count):
    return _stmt(MBAR_INIT, bar_ptr, count)


def mbar_init_fence():
    return _stmt(MBAR_INIT_FENCE)


def mbar_wait(bar_ptr, phase):
    return _stmt(MBAR_WAIT, bar_ptr, phase)


def mbar_arrive(bar_ptr):
    return _stmt(MBAR_ARRIVE, bar_ptr)


def mbar_arrive_cluster(bar_ptr, rank):
    """Arrive on the mbarrier at `bar_ptr`'s offset in the shared memory of cluster block `rank`."""
    return _stmt(MBAR_ARRIVE_CLUSTER, bar_ptr, rank)


def mbar_arrive_expect_tx(bar_ptr, nbytes):
    return _stmt(MBAR_ARRIVE_EXPECT_TX, bar_ptr, nbytes)


def syncwarp(mask=None):
    """``__syncwarp()``: the lanes of a warp reconverge (and their shared-memory accesses are ordered); with
    `mask`, the lanes it names (``__syncwarp(mask)``)."""
    return _stmt(SYNCWARP) if mask is None else _stmt(SYNCWARP, mask)


def tma_load_1d(dst_ptr, tmap_ptr, bar_ptr, c0):
    """A 1-d tensor-map box load (a vector of a 1-d tensor)."""
    return _stmt(TMA_LOAD_1D, dst_ptr, tmap_ptr, bar_ptr, c0)


def tma_load_2d(dst_ptr, tmap_ptr, bar_ptr, col, row):
    return _stmt(TMA_LOAD_2D, dst_ptr, tmap_ptr, bar_ptr, col, row)


def tma_load_3d(dst_ptr, tmap_ptr, bar_ptr, c0, c1, c2):
    """A 3-d tensor-map box load; coordinates innermost dimension first."""
    return _stmt(TMA_LOAD_3D, dst_ptr, tmap_ptr, bar_ptr, c0, c1, c2)


def tma_load_4d(dst_ptr, tmap_ptr, bar_ptr, c0, c1, c2, c3):
    """A 4-d tensor-map box load; coordinates innermost dimension first."""
    return _stmt(TMA_LOAD_4D, dst_ptr, tmap_ptr, bar_ptr, c0, c1, c2, c3)


def tma_load_5d(dst_ptr, tmap_ptr, bar_ptr, c0, c1, c2, c3, c4):
    """A 5-d tensor-map box load; coordinates innermost dimension first."""
    return _stmt(TMA_LOAD_5D, dst_ptr, tmap_ptr, bar_ptr, c0, c1, c2, c3, c4)


def tma_load_2d_multicast(dst_ptr, tmap_ptr, bar_ptr, col, row, mask):
    """`tma_load_2d` into the same offset of every cluster block in `mask`."""
    return _stmt(TMA_LOAD_2D_MULTICAST, dst_ptr, tmap_ptr, bar_ptr, col, row, mask)


def tma_store(tmap_ptr, src_ptr, coords):
    """One shared box stored to global memory through the tensor map (rank = len(coords), coordinates innermost
    first: (column, row) for a 2-d tensor)."""
    return _stmt(TMA_STORE_ND[len(coords)], tmap_ptr, src_ptr, *coords)


def tma_reduce_add(tmap_ptr, src_ptr, coords):
    """Global += one shared box through the tensor map (rank = len(coords), coordinates innermost first); a
    bulk-group operation like :func:`tma_store`."""
    return _stmt(TMA_REDUCE_ADD_ND[len(coords)], tmap_ptr, src_ptr, *coords)


def is_bulk_store(node) -> bool:
    """Whether `node` calls a bulk-group store (a TMA store or reduction) that reads shared memory asynchronously."""
    return any(is_call(node, n) for n in (*TMA_STORE_ND.values(), *TMA_REDUCE_ADD_ND.values()))


#: CUtensorMapSwizzle value of each TMA swizzle width (bytes); 0: none (row-major boxes, `tilex.op.tma_load` vectors).
_SWIZZLE_ENUM = {0: 0, 32: 1, 64: 2, 128: 3}


def encode_tensor_map(tmap, buffer, box, swizzle_bytes):
    """Host statements that bind `tmap` and encode it for `buffer` (rank 1..5, contiguous row-major) with the box
    `box` (extents innermost dimension first, one per dimension: (cols, rows) for a 2-d buffer); the kernel gets
    `tmap` as a ``__grid_constant__`` parameter for :func:`tma_load_2d` / :func:`tma_store` (rank 2..5) or
    :func:`tma_load_1d`, :func:`tma_load_3d` .. :func:`tma_load_5d`; `swizzle_bytes` 0 (row-major box), 32, 64, 128."""
    # innermost first; extents may be symbolic (encoded per call, as cuTensorMapEncodeTiled's uint64)
    dims = [int(s) if isinstance(s, tirx.IntImm) else tirx.Cast("int64", s) for s in reversed(buffer.shape)]
    if len(box) != len(dims) or not 1 <= len(dims) <= 5:
        raise ValueError(f"encode_tensor_map: a {len(box)}-d box for a {len(dims)}-d buffer {buffer.name}")
    bytes_per = tvm.DataType(str(buffer.dtype)).bits // 8
    # TMA moves bytes: any 1-byte type (int8, float8, packed low-bit codes) is described as uint8, a 2-byte one
    # other than float16 / bfloat16 (int16, uint16: no tensor-map type of their own in TVM's runtime) as float16
    descriptor = "uint8" if bytes_per == 1 else str(buffer.dtype)
    if bytes_per == 2 and descriptor not in ("float16", "bfloat16"):
        descriptor = "float16"
    strides, step = [], bytes_per
    for d in dims[:-1]:  # byte strides of dims 1 .. rank-1 (expressions of the call's sizes where symbolic)
        step = step * d if isinstance(step, int) and isinstance(d, int) else tirx.Cast("int64", step) * d
        strides.append(step)
    return [tirx.Bind(tmap, tirx_op.tvm_stack_alloca("tensormap", 1)),
            tirx.Evaluate(tirx_op.tensormap_encode_tiled(
                tmap, buffer.data, *dims, *strides, *(int(b) for b in box), *([1] * len(dims)),
                descriptor_dtype=descriptor, rank=len(dims), swizzle=_SWIZZLE_ENUM[swizzle_bytes]))]


def bulk_commit():
    return _stmt(BULK_COMMIT)


def bulk_wait_read(n):
    """Wait until at most `n` bulk-store groups still read shared memory."""
    return _stmt(_templated(BULK_WAIT_READ, n))


def named_barrier_sync(threads):
    """Barrier over `threads` threads (the consumer warpgroups of a warp-specialized kernel)."""
    return _stmt(NAMED_BARRIER_SYNC, threads)


def named_barrier_wait(bar_id, threads):
    """Wait on named barrier `bar_id` until `threads` threads have arrived or waited."""
    return _stmt(NAMED_BARRIER_WAIT, bar_id, threads)


def named_barrier_arrive(bar_id, threads):
    """Count this thread on named barrier `bar_id` (of `threads` threads) and go on."""
    return _stmt(NAMED_BARRIER_ARRIVE, bar_id, threads)


def cluster_sync():
    return _stmt(CLUSTER_SYNC)


def reg_alloc(n):
    """``setmaxnreg.inc`` to `n` registers per thread."""
    return _stmt(_templated(REG_ALLOC, n))


def reg_dealloc(n):
    """``setmaxnreg.dec`` to `n` registers per thread."""
    return _stmt(_templated(REG_DEALLOC, n))


def min_blocks_per_sm(n):
    """Launch marker: the kernel's register plan assumes `n` resident blocks per multiprocessor (the CUDA
    post-processor puts `n` into ``__launch_bounds__``)."""
    return _stmt(_templated(MIN_BLOCKS_PER_SM, n))


def cluster_dims(n):
    """Launch marker: the kernel runs in clusters of `n` blocks along x (``__cluster_dims__(n, 1, 1)``)."""
    return _stmt(_templated(CLUSTER_DIMS, n))


def read_launch_marker(where, marker: str) -> int | None:
    """The value of launch marker `marker` (:data:`MIN_BLOCKS_PER_SM` or :data:`CLUSTER_DIMS`) in `where`: a
    statement (the first marker call found) or generated CUDA text; None when it has none."""
    if isinstance(where, str):
        at = where.find(marker + "<")
        if at < 0:
            return None
        end = where.index(">", at)
        return int(where[at + len(marker) + 1:end])
    found = []
    walk(where, (tvm.ir.Call, lambda c: found.append(name_of(c)) if is_call(c, marker) else None))
    return int(template_args(found[0])[0]) if found else None


# ---- stream_k.h ---------------------------------------------------------------------------------------------------
#: Flags at the start of every stream-K workspace: at least the blocks of any launch. Every stream-K kernel keeps its
#: flags there (src/tilex/stream_k.h), so that kernels of different sizes taking turns on one workspace never find
#: another's partial sums where they read flags.
STREAMK_FLAG_SLOTS = 8192


def streamk_fixup(words, threads, grid, workspace, *args):
    """The stream-K partial exchange of one tile (an int32 expression; see src/tilex/stream_k.h); `workspace`: the
    launch's (:func:`streamk_workspace`)."""
    if grid > STREAMK_FLAG_SLOTS:
        raise ValueError(f"stream-K: a grid of {grid} blocks is more than the workspace's {STREAMK_FLAG_SLOTS} flags")
    return tirx.call_extern("int32", _templated(STREAMK_FIXUP, words, threads, grid, STREAMK_FLAG_SLOTS), workspace,
                            *args)


#: The global function the host code of a stream-K kernel calls before each launch: (nbytes) -> a pointer to a
#: zeroed device buffer of the current device that no launch on another stream uses (tilex.jit.workspace).
STREAMK_WORKSPACE_FUNC = "tilex.streamk_workspace"


def streamk_workspace_bytes(words, threads, grid):
    """Bytes of a stream-K launch's workspace (src/tilex/stream_k.h): STREAMK_FLAG_SLOTS int32 flags, then per
    block `threads` x `words` fp32 partial accumulators."""
    return STREAMK_FLAG_SLOTS * 4 + grid * (words // 4) * threads * 16


def streamk_workspace(var, words, threads, grid):
    """Host statement binding pointer `var` to the launch's stream-K workspace (:data:`STREAMK_WORKSPACE_FUNC`)."""
    call = tirx.call_packed(STREAMK_WORKSPACE_FUNC, tirx.const(streamk_workspace_bytes(words, threads, grid), "int64"))
    # (call_packed types its result int32; the host code takes the returned handle as `var`'s pointer type)
    return tirx.Bind(var, tvm.ir.Call(call.op, list(call.args), ret_ty=var.ty))


# ---- lowbit.h -----------------------------------------------------------------------------------------------------
#: the Kind template argument of the lowbit.h decoders
LOWBIT_KINDS = {"uint": 0, "int": 1, "float": 2}
LOWBIT_KIND_NAMES = {v: k for k, v in LOWBIT_KINDS.items()}
_DECODE_CHUNK = {"float16": DECODE_CHUNK_F16, "bfloat16": DECODE_CHUNK_BF16}


def _lowbit_targs(kind, bits, exponent, mantissa):
    """<Kind, Bits, Exp, Man> of a low-bit type (Exp = Man = 0 for integers); ValueError for a type lowbit.h lacks."""
    k = LOWBIT_KINDS.get(kind, kind) if isinstance(kind, str) else kind
    if k not in (0, 1, 2):
        raise ValueError(f"lowbit: kind must be one of {sorted(LOWBIT_KINDS)} (or 0, 1, 2), got {kind!r}")
    bits = int(bits)
    if k == 2:
        exponent, mantissa = int(exponent), int(mantissa)
        if exponent < 1 or mantissa < 0 or bits != 1 + exponent + mantissa or not 3 <= bits <= 8:
            raise ValueError(f"lowbit: no {bits}-bit float e{exponent}m{mantissa} (1 + E + M bits, 3..8 in all)")
        return k, bits, exponent, mantissa
    if not 1 <= bits <= 8:
        raise ValueError(f"lowbit: integers have 1..8 bits, got {bits}")
    return k, bits, 0, 0


def decode_chunk(out_dtype, kind, bits, exponent, mantissa, chunk_ptr, out_ptr, raw=False):
    """Decode one packed chunk: the 32 `bits`-bit codes in the `bits` uint32 words at `chunk_ptr` (the layout of
    :mod:`tilex.ir.lowbit_chunk`) into 16 uint32 registers at `out_ptr`, register j = (code 2j, code 2j+1) as a
    `out_dtype` pair ("float16" or "bfloat16"). `kind` is "uint", "int" or "float" (or 0, 1, 2); `exponent` and
    `mantissa` are the float's field widths (ignored for integers). `raw` decodes a float to value * 2^-k
    (`lowbit_chunk.raw_scale_exponent`), one fma per pair fewer."""
    name = _DECODE_CHUNK.get(str(out_dtype))
    if name is None:
        raise ValueError(f"decode_chunk: decodes to float16 or bfloat16, not {out_dtype}")
    targs = _lowbit_targs(kind, bits, exponent, mantissa)
    if name == DECODE_CHUNK_F16 and targs[0] == 2 and targs[2] > 5:
        raise ValueError(f"decode_chunk: float16 cannot hold e{targs[2]}m{targs[3]} (more than 5 exponent bits)")
    if raw:
        kind_name = LOWBIT_KIND_NAMES[targs[0]]
        if raw_scale_exponent(kind_name, targs[2], targs[3], str(out_dtype)) is None:
            raise ValueError(f"decode_chunk: no raw {out_dtype} decode of {kind_name} e{targs[2]}m{targs[3]} "
                             f"({bits} bits)")
        targs = (*targs, "true")
    return _stmt(_templated(name, *targs), chunk_ptr, out_ptr)


def decode_one(kind, bits, exponent, mantissa, code_expr):
    """One low-bit code (its low `bits` bits) as a float32 expression, by lowbit.h's plain reference decoder (the
    oracle of the chunk decoders' tests)."""
    return tirx.call_extern("float32", _templated(DECODE_ONE_F32, *_lowbit_targs(kind, bits, exponent, mantissa)),
                            code_expr)


# ---- sub_byte.h ---------------------------------------------------------------------------------------------------
def encode_float_code(exponent, mantissa, value):
    """The code (uint32) of the `exponent` / `mantissa`-bit float (1 + E + M <= 4 bits, e2m1: float4_e2m1fn)
    nearest the float32 expression `value`, ties to even, saturated to the largest finite magnitude."""
    exponent, mantissa = int(exponent), int(mantissa)
    if exponent < 1 or mantissa < 0 or 1 + exponent + mantissa > 4:
        raise ValueError(f"encode_float_code: a float of at most 4 bits, not e{exponent}m{mantissa}")
    return tirx.call_extern("uint32", _templated(ENCODE_FLOAT_CODE, exponent, mantissa), value)


def store_code(word_ptr, shift, mask, code):
    """Store the low bits (`mask`) of uint32 `code` at bit `shift` of the 32-bit shared / global word at
    `word_ptr`, the word's other bits untouched (atomically: neighbouring codes may be stored concurrently)."""
    return _stmt(STORE_CODE, word_ptr, shift, mask, code)


# ---- tma.h: the program's own synchronization (tilex.language.expert) ---------------------------------------------
MBAR_EXPECT_TX = "tilex::mbar_expect_tx"
BULK_WAIT = "tilex::bulk_wait"
CP_ASYNC_MBAR_ARRIVE_NOINC = "tilex::cp_async_mbar_arrive_noinc"


def mbar_expect_tx(bar_ptr, nbytes):
    """Add `nbytes` to the transaction count of the mbarrier's current phase, without arriving on it."""
    return _stmt(MBAR_EXPECT_TX, bar_ptr, nbytes)


def bulk_wait(n):
    """Wait until at most `n` bulk groups (TMA stores) of this thread are in flight, their global writes done
    (:func:`bulk_wait_read` only waits for their shared-memory reads)."""
    return _stmt(_templated(BULK_WAIT, n))


def cp_async_mbar_arrive_noinc(bar_ptr):
    """Arrive on the mbarrier once this thread's earlier cp.async copies have landed (``.noinc``: the arrival is one
    of those its count expects)."""
    return _stmt(CP_ASYNC_MBAR_ARRIVE_NOINC, bar_ptr)


# ---- rng.h: per-thread Philox random numbers (tilex.language.random) ---------------------------------------------
RNG_INIT = "tilex::rng_init"
RNG_RAND = "tilex::rng_rand"
#: the float generators by (distribution, bits)
RNG_FLOATS = {("uniform", 32): "tilex::rng_uniform", ("normal", 32): "tilex::rng_normal",
              ("uniform", 64): "tilex::rng_uniform_double", ("normal", 64): "tilex::rng_normal_double"}
#: uint32 words of one generator state (RNG_STATE_WORDS of rng.h)
RNG_STATE_WORDS = 16


def rng_init(state, seed, subsequence, offset):
    """Start the generator whose state is the uint32 words at `state` (a pointer) at output `offset` of
    subsequence `subsequence` of `seed` (curand_init's arguments, each taken as a 64-bit unsigned integer)."""
    return _stmt(RNG_INIT, state, seed, subsequence, offset)


def rng_rand(state):
    """The generator's next 32 random bits (a uint32 expression that advances the state at `state`)."""
    return tirx.call_extern("uint32", RNG_RAND, state)


def rng_float(state, dist: str, bits: int):
    """The generator's next ``float{bits}`` of distribution `dist` ("uniform" in (0, 1], "normal")."""
    return tirx.call_extern(f"float{bits}", RNG_FLOATS[(dist, bits)], state)


# ---- grid_sync.h: a barrier across the grid (T.sync_grid; not in common.h, see tilex.transform.grid_sync) --------
SYNC_GRID = "tilex::sync_grid"
GRID_SYNC_HEADER = "tilex/grid_sync.h"


def sync_grid():
    """Every thread of every block waits until all have arrived (``cooperative_groups::this_grid().sync()``); the
    kernel must be launched cooperatively and include :data:`GRID_SYNC_HEADER` (:func:`grid_sync_include`)."""
    return _stmt(SYNC_GRID)


def grid_sync_include():
    """Source marker (:func:`import_source`): ``#include`` of the grid-barrier header, written before the kernels of
    the file by the CUDA post-processor."""
    return import_source(f'#include "{GRID_SYNC_HEADER}"\n')
