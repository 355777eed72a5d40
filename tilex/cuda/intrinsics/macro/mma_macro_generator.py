"""TileLang's warp-level MMA emitter (``tilelang.cuda.intrinsics.macro.mma_macro_generator``): a GEMM written by hand
with per-warp register tiles, for programs that want to place every ``ldmatrix`` and ``mma.sync`` themselves.

The block's ``block_row_warps x block_col_warps`` warps each own a ``warp_row_tiles x warp_col_tiles`` piece of
the output, cut into ``warp_rows x warp_cols`` MMA tiles of ``micro_size_x x micro_size_y`` (16 x 16, or 16 x 8
when ``warp_col_tiles`` is not a multiple of 16: one ``m16n8`` MMA per tile instead of two side by side). Each
method writes its statements into the program being parsed (the ``T.Kernel`` body), where TileLang's are
``T.macro`` bodies:

* :meth:`~TensorCoreIntrinEmitter.ldmatrix_a` / :meth:`~TensorCoreIntrinEmitter.ldmatrix_b`: step ``ki`` of the
  shared tiles (``rk * chunk + ki * micro_size_k`` along K) into the warp's per-thread registers (a
  ``T.alloc_local`` buffer of ``warp_rows * local_size_a`` / ``warp_cols * local_size_b`` elements), with
  ``ldmatrix.x4`` (``.x2`` for an n8 B tile; ``.trans`` where K is not the contiguous dimension of a 16-bit
  operand). 8-bit operands stored with K not contiguous (A transposed, B not transposed) have no transposing
  ldmatrix: each thread reads its elements one by one.
* :meth:`~TensorCoreIntrinEmitter.mma`: every MMA tile of the warp, ``C += A * B`` into the accumulator registers
  (``warp_rows * warp_cols * local_size_out`` elements; cleared by the program, ``T.clear``).
* :meth:`~TensorCoreIntrinEmitter.stmatrix`: the accumulators into a shared tile -- 2-d (block_M x block_N) or
  4-d (block_M / 16, block_N / micro_size_y, 16, micro_size_y: one MMA tile after the other) -- or, given
  ``pid_m`` / ``pid_n``, into the block's tile of a global matrix. Each register goes where the PTX ``m16n8``
  accumulator layout puts it (``layout.utils.mma_store_index_map``), cast to the destination's type.

Operand types (A and B of one family): float16 / bfloat16 (``m16n8k16``, float32 accumulator, or float16 for
float16 inputs), int8 / uint8 (``m16n8k32``, int32), float8 e4m3 / e5m2 (``m16n8k32``, float32; sm_89+). The
thread index comes from the enclosing ``T.Kernel`` (``T.get_thread_binding()``) or ``thread_var``; consecutive
warps step along M (``warp_m = tx // 32 % block_row_warps``) or, with ``is_m_first``, along N.

Not provided (NotImplementedError naming them): TileLang's tf32 / fp64 / 4-bit variants of this class, register
fragments (``T.alloc_fragment``) as its operands and the layouts that describe them
(:meth:`~TensorCoreIntrinEmitter.make_mma_load_layout`, :meth:`~TensorCoreIntrinEmitter.make_mma_store_layout`),
and the other emitter classes (ladder-transform, INT4, SM120, sparse).
"""
from __future__ import annotations

from contextlib import ExitStack

import tvm
from tvm import tirx
from tvm.tirx import IndexMap
from tvm.tirx.script.builder import ir as _ir

from tilex.cuda.intrinsics.layout import mma_layout
from tilex.cuda.intrinsics.layout.utils import get_ldmatrix_offset, mma_store_index_map
from tilex.ir import intrin
from tilex.ir.visit import BufferLoadNode, BufferRegionNode, dtype_of
from tilex.language.dtypes import canonical_dtype
from tilex.language.expert import access_ptr
from tilex.language.kernel import current_kernel, get_thread_binding
from tilex.language.options import as_bool, as_int, constant

__all__ = ["TensorCoreIntrinEmitter", "not_provided"]

#: TileLang's names of this module tilex does not provide, and why
NOT_PROVIDED = {
    "TensorCoreIntrinEmitterWithLadderTransform": "the ladder-transformed (BitBLAS) operand layouts",
    "INT4TensorCoreIntrinEmitter": "4-bit integer MMA tiles",
    "INT4TensorCoreIntrinEmitterWithLadderTransform": "4-bit integer MMA tiles",
    "TensorCoreIntrinEmitterSM120": "the sm_120 block-scaled MMA",
    "TransformKind": "the ladder-transformed (BitBLAS) operand layouts",
    "SparseTensorCoreIntrinEmitter": "tilex has no sparse mma.sp",
}


def not_provided(name: str) -> NotImplementedError:
    """The NotImplementedError for TileLang's emitter name `name` that tilex does not provide."""
    why = NOT_PROVIDED.get(name, "it is not implemented")
    return NotImplementedError(f"{name} (tilelang.cuda.intrinsics.macro) is not provided by tilex ({why}); "
                               f"TensorCoreIntrinEmitter is, for float16 / bfloat16 / 8-bit mma.sync")


def __getattr__(name):
    if name in NOT_PROVIDED:
        raise not_provided(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: operand type -> (its mma.sync instruction's K, mma family, type selector of the 8-bit families)
OPERAND_TYPES = {
    "float16": (16, "f16", None), "bfloat16": (16, "bf16", None),
    "int8": (32, "i8", 0), "uint8": (32, "i8", 1),
    "float8_e4m3fn": (32, "f8", 0), "float8_e5m2": (32, "f8", 1),
}
#: mma family -> accumulator types it writes
ACCUMULATORS = {"f16": ("float32", "float16"), "bf16": ("float32",), "i8": ("int32",), "f8": ("float32",)}
#: operand types TileLang's class takes that tilex's does not (their MMA shapes are not emitted)
OTHER_TILELANG_TYPES = ("float32", "float64", "int4", "uint4", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn",
                        "float8_e4m3fnuz", "float8_e5m2fnuz")
SHARED_SCOPES = ("shared", "shared.dyn")


class TensorCoreIntrinEmitter:
    """Writes one block's mma.sync GEMM step by step (see the module docstring). The constructor takes TileLang's
    arguments: operand and accumulator types, whether A is stored K x M (`a_transposed`) and B N x K
    (`b_transposed`), the warp grid and each warp's tile, the K extent of a shared tile (`chunk`), `reduce_k`
    (warps that split K: ``threads`` counts them; a method's ``rk`` picks the K slice), `num_elems_per_byte`
    (kept for TileLang's signature; the plain emitter does not read it), the warp order (`is_m_first`) and the
    thread index (`thread_var`, default the kernel's)."""

    M_DIM = 16
    n_dim = 16
    WARP_SIZE = 32
    #: the short names TileLang's class gives the types it accepts
    dtype_abbrv = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "int8": "int8", "uint8": "uint8",
                   "int32": "int32", "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}
    is_m_first = False
    warp_rows = 1
    warp_cols = 1

    def __init__(self, a_dtype="float16", b_dtype="float16", accum_dtype="float16", a_transposed=False,
                 b_transposed=False, block_row_warps=2, block_col_warps=2, warp_row_tiles=8, warp_col_tiles=8,
                 chunk=16, reduce_k=1, num_elems_per_byte=1, is_m_first=False, thread_var=None):
        api = "TensorCoreIntrinEmitter"
        self.a_dtype = self._operand_type("a_dtype", a_dtype)
        self.b_dtype = self._operand_type("b_dtype", b_dtype)
        self.k_dim, family, self.a_type_code = OPERAND_TYPES[str(self.a_dtype)]
        _, b_family, self.b_type_code = OPERAND_TYPES[str(self.b_dtype)]
        if family != b_family or (family in ("f16", "bf16") and self.a_dtype != self.b_dtype):
            raise ValueError(f"{api}: A ({self.a_dtype}) and B ({self.b_dtype}) have no mma.sync together: both "
                             f"float16, both bfloat16, two of int8 / uint8 or two of float8_e4m3 / float8_e5m2")
        self.mma_family = family
        self.accum_dtype = canonical_dtype(accum_dtype)
        if str(self.accum_dtype) not in ACCUMULATORS[family]:
            raise ValueError(f"{api}: {self.a_dtype} operands accumulate into {' or '.join(ACCUMULATORS[family])}, "
                             f"not {self.accum_dtype}")
        self.a_transposed = as_bool(api, "a_transposed", a_transposed)
        self.b_transposed = as_bool(api, "b_transposed", b_transposed)
        self.block_row_warps = as_int(api, "block_row_warps", block_row_warps, minimum=1)
        self.block_col_warps = as_int(api, "block_col_warps", block_col_warps, minimum=1)
        self.warp_row_tiles = as_int(api, "warp_row_tiles", warp_row_tiles, minimum=16)
        self.warp_col_tiles = as_int(api, "warp_col_tiles", warp_col_tiles, minimum=8)
        self.chunk = as_int(api, "chunk", chunk, minimum=1)
        self.reduce_k = as_int(api, "reduce_k", reduce_k, minimum=1)
        self.num_elems_per_byte = as_int(api, "num_elems_per_byte", num_elems_per_byte, minimum=1)
        if self.warp_row_tiles % self.M_DIM:
            raise ValueError(f"{api}: warp_row_tiles must be a multiple of 16 (the MMA's M), got {warp_row_tiles}")
        if self.warp_col_tiles % 8:
            raise ValueError(f"{api}: warp_col_tiles must be a multiple of 8 (the MMA's N), got {warp_col_tiles}")
        if self.chunk % self.k_dim:
            raise ValueError(f"{api}: chunk must be a multiple of {self.k_dim} (the K of the {self.a_dtype} MMA), "
                             f"got {chunk}")
        if is_m_first is not None:
            self.is_m_first = as_bool(api, "is_m_first", is_m_first)
        if thread_var is not None and not (tvm.ir.is_prim_expr(thread_var)
                                           and tvm.DataType(dtype_of(thread_var)).type_code
                                           in (tvm.DataTypeCode.INT, tvm.DataTypeCode.UINT)):
            raise TypeError(f"{api}: thread_var must be an integer expression (the thread index), got "
                            f"{thread_var!r}")
        self.thread_var = thread_var

        self.n_dim = 16 if self.warp_col_tiles % 16 == 0 else 8
        self.micro_size_x, self.micro_size_y, self.micro_size_k = self.M_DIM, self.n_dim, self.k_dim
        self.warp_rows = self.warp_row_tiles // self.M_DIM
        self.warp_cols = self.warp_col_tiles // self.n_dim
        self.local_size_a = self.M_DIM * self.k_dim // self.WARP_SIZE
        self.local_size_b = self.n_dim * self.k_dim // self.WARP_SIZE
        self.local_size_out = self.M_DIM * self.n_dim // self.WARP_SIZE
        self.mma_prefix = f"m16n8k{self.k_dim}"
        self.a_dtype_abbrv = self.dtype_abbrv[str(self.a_dtype)]
        self.b_dtype_abbrv = self.dtype_abbrv[str(self.b_dtype)]
        self.accum_dtype_abbrv = self.dtype_abbrv[str(self.accum_dtype)]
        self.threads = self.WARP_SIZE * self.block_row_warps * self.block_col_warps * self.reduce_k

    @staticmethod
    def _operand_type(name, value):
        d = canonical_dtype(value)
        if str(d) in OPERAND_TYPES:
            return d
        if str(d) in OTHER_TILELANG_TYPES:
            raise NotImplementedError(f"TensorCoreIntrinEmitter({name}={d}) is not supported by tilex: its mma.sync "
                                      f"operands are float16, bfloat16, int8, uint8, float8_e4m3 or float8_e5m2")
        raise ValueError(f"TensorCoreIntrinEmitter: unsupported {name} {d}; mma.sync operands are float16, "
                         f"bfloat16, int8, uint8, float8_e4m3 or float8_e5m2")

    # ---- the thread index ------------------------------------------------------------------------------------------
    def get_thread_binding(self):
        """The thread index the emitted code uses: `thread_var`, or threadIdx.x of the enclosing T.Kernel, whose
        block must have at least ``threads`` threads."""
        if self.thread_var is not None:
            return self.thread_var
        kernel = current_kernel("TensorCoreIntrinEmitter")
        n = constant(kernel.num_threads)
        if isinstance(n, int) and n < self.threads:
            raise ValueError(f"TensorCoreIntrinEmitter: the block has {n} threads; its {self.block_row_warps} x "
                             f"{self.block_col_warps} warps (x reduce_k {self.reduce_k}) need {self.threads}")
        return get_thread_binding()

    def extract_thread_binding(self, thread_id, is_m_first=None):
        """``(lane, warp_n, warp_m)`` of thread `thread_id`: consecutive warps step along M (``warp_m = tx // 32 %
        block_row_warps``) or, with `is_m_first` (default the emitter's), along N."""
        m_first = self.is_m_first if is_m_first is None else is_m_first
        lane, warp = thread_id % self.WARP_SIZE, thread_id // self.WARP_SIZE
        if m_first:
            return lane, warp % self.block_col_warps, warp // self.block_col_warps % self.block_row_warps
        return lane, warp // self.block_row_warps % self.block_col_warps, warp % self.block_row_warps

    def get_store_index_map(self, inverse=False) -> IndexMap:
        """The accumulator's ``(lane, register) -> (row, column)`` map of one MMA tile (`inverse`: the other way,
        over ``32 x local_size_out``)."""
        index_map = IndexMap.from_func(mma_store_index_map, index_dtype="int32")
        return index_map.inverse([self.WARP_SIZE, self.local_size_out]) if inverse else index_map

    # ---- operands ------------------------------------------------------------------------------------------------
    def ldmatrix_a(self, A_local_buf, A_shared_buf, ki, rk=0):
        """Load K step `ki` (of slice `rk`) of the warp's rows of the shared A tile (M x K, or K x M when
        `a_transposed`; a buffer, a slice of one, or an element where the tile starts) into `A_local_buf`."""
        api = "TensorCoreIntrinEmitter.ldmatrix_a"
        self._registers(api, "A_local_buf", A_local_buf, self.a_dtype, self.warp_rows * self.local_size_a)
        buf, base = self._shared_tile(api, "A_shared_buf", A_shared_buf, self.a_dtype)
        tx = self.get_thread_binding()
        lane, _, warp_m = self.extract_thread_binding(tx)
        trans = self.a_transposed
        wk = rk * self.chunk + ki * self.micro_size_k
        with _ir.unroll(0, self.warp_rows) as i:
            wi = warp_m * self.warp_row_tiles + i * self.micro_size_x
            dst = i * self.local_size_a
            if self._has_ldmatrix(trans_k=trans):
                r, c = get_ldmatrix_offset("A", lane, 0, None, self.a_dtype, trans)
                row, col = (wk + r, wi + c) if trans else (wi + r, wk + c)
                self._ldmatrix(4, trans, A_local_buf, dst, buf, base, row, col, self.local_size_a)
            else:
                with _ir.unroll(0, self.local_size_a) as j:
                    m, k = mma_layout.mma_load_a_32x16_to_shared_16x32_layout(lane, j)
                    row, col = (wk + k, wi + m) if trans else (wi + m, wk + k)
                    self._load(A_local_buf, dst + j, buf, base, row, col)

    def ldmatrix_b(self, B_local_buf, B_shared_buf, ki, rk=0):
        """Load K step `ki` (of slice `rk`) of the warp's columns of the shared B tile (K x N, or N x K when
        `b_transposed`) into `B_local_buf`."""
        api = "TensorCoreIntrinEmitter.ldmatrix_b"
        self._registers(api, "B_local_buf", B_local_buf, self.b_dtype, self.warp_cols * self.local_size_b)
        buf, base = self._shared_tile(api, "B_shared_buf", B_shared_buf, self.b_dtype)
        tx = self.get_thread_binding()
        lane, warp_n, _ = self.extract_thread_binding(tx)
        n_major = self.b_transposed
        wk = rk * self.chunk + ki * self.micro_size_k
        with _ir.unroll(0, self.warp_cols) as i:
            wn = warp_n * self.warp_col_tiles + i * self.micro_size_y
            dst = i * self.local_size_b
            if self._has_ldmatrix(trans_k=not n_major):
                count = 4 if self.n_dim == 16 else 2  # .x2: lanes 0-15 give the addresses (kept inside the tile)
                r, c = get_ldmatrix_offset("B", lane if count == 4 else lane % 16, 0, None, self.b_dtype, n_major)
                row, col = (wn + r, wk + c) if n_major else (wk + r, wn + c)
                self._ldmatrix(count, not n_major, B_local_buf, dst, buf, base, row, col, self.local_size_b)
            else:
                with _ir.unroll(0, self.local_size_b) as j:
                    n, k = mma_layout.mma_load_b_32x16_to_shared_16x32_layout(lane, j)
                    row, col = (wn + n, wk + k) if n_major else (wk + k, wn + n)
                    self._load(B_local_buf, dst + j, buf, base, row, col)

    def _has_ldmatrix(self, trans_k):
        """Whether ldmatrix loads the operand: always for 16-bit types; for 8-bit ones only with K contiguous
        (ldmatrix transposes 16-bit elements)."""
        return self.k_dim == 16 or not trans_k

    def _ldmatrix(self, count, trans, local, dst, buf, base, row, col, regs):
        src = buf[tuple(base[:-2]) + (base[-2] + row, base[-1] + col)]
        row_elems = 128 // tvm.DataType(str(buf.dtype)).bits  # a lane points at one 16-byte row
        _ir.evaluate(intrin.ldmatrix(count, trans, access_ptr(local[dst], "w", extent=regs),
                                     access_ptr(src, "r", extent=row_elems)).value)

    @staticmethod
    def _load(local, dst, buf, base, row, col):
        _ir.buffer_store(local, buf[tuple(base[:-2]) + (base[-2] + row, base[-1] + col)], [dst])

    # ---- the MMAs ----------------------------------------------------------------------------------------------
    @property
    def mma_num_inst_m(self) -> int:
        """MMA tiles of a warp along M (``warp_rows``)."""
        return self.warp_rows

    @property
    def mma_num_inst_n(self) -> int:
        """MMA tiles of a warp along N (``warp_cols``)."""
        return self.warp_cols

    def mma(self, A_local_buf, B_local_buf, C_local_buf, k_inner=0):
        """``C += A * B`` on every MMA tile of the warp, from the registers :meth:`ldmatrix_a` / :meth:`ldmatrix_b`
        loaded. `k_inner` is TileLang's step into fragment operands, which tilex does not take: it is ignored for
        per-thread buffers, as there."""
        self._mma_operands("TensorCoreIntrinEmitter.mma", A_local_buf, B_local_buf, C_local_buf)
        with _ir.unroll(0, self.warp_rows) as i, _ir.unroll(0, self.warp_cols) as j:
            self._mma_tile(A_local_buf, B_local_buf, C_local_buf, i, j)

    def mma_atom(self, A_local_buf, B_local_buf, C_local_buf, inst_m_idx, inst_n_idx, k_inner=0):
        """``C += A * B`` on MMA tile (`inst_m_idx`, `inst_n_idx`) of the warp: :meth:`mma` is this over
        ``mma_num_inst_m x mma_num_inst_n``."""
        self._mma_operands("TensorCoreIntrinEmitter.mma_atom", A_local_buf, B_local_buf, C_local_buf)
        self._mma_tile(A_local_buf, B_local_buf, C_local_buf, inst_m_idx, inst_n_idx)

    def _mma_operands(self, api, a, b, c):
        self._registers(api, "A_local_buf", a, self.a_dtype, self.warp_rows * self.local_size_a)
        self._registers(api, "B_local_buf", b, self.b_dtype, self.warp_cols * self.local_size_b)
        self._registers(api, "C_local_buf", c, self.accum_dtype,
                        self.warp_rows * self.warp_cols * self.local_size_out)

    def _mma_tile(self, a, b, c, i, j):
        """One MMA tile: one m16n8 mma.sync, or two side by side (the second half of B's and C's registers)."""
        halves = self.n_dim // 8
        b_regs, c_regs = self.local_size_b // halves, self.local_size_out // halves
        a_ptr = access_ptr(a[i * self.local_size_a], "r", extent=self.local_size_a)
        for h in range(halves):
            b_ptr = access_ptr(b[j * self.local_size_b + h * b_regs], "r", extent=b_regs)
            c_ptr = access_ptr(c[(i * self.warp_cols + j) * self.local_size_out + h * c_regs], "rw", extent=c_regs)
            _ir.evaluate(self._mma_call(c_ptr, a_ptr, b_ptr).value)

    def _mma_call(self, c_ptr, a_ptr, b_ptr):
        if self.mma_family in ("f16", "bf16"):
            return intrin.mma_m16n8k16(self.mma_family, c_ptr, a_ptr, b_ptr,
                                       half_acc=str(self.accum_dtype) == "float16")
        return intrin.mma_m16n8k32(self.mma_family, self.a_type_code, self.b_type_code, c_ptr, a_ptr, b_ptr)

    # ---- the accumulators out ------------------------------------------------------------------------------------
    def stmatrix(self, C_local_buf, C_buf, pid_m=None, pid_n=None):
        """Store the warp's accumulators: into a shared tile `C_buf` of the block (2-d, block_M x block_N, or 4-d,
        block_M / 16 x block_N / micro_size_y x 16 x micro_size_y), or, given block indices `pid_m` and `pid_n`,
        into the block's tile of a 2-d global `C_buf`. Values are cast to `C_buf`'s type."""
        api = "TensorCoreIntrinEmitter.stmatrix"
        self._registers(api, "C_local_buf", C_local_buf, self.accum_dtype,
                        self.warp_rows * self.warp_cols * self.local_size_out)
        if (pid_m is None) != (pid_n is None):
            raise ValueError(f"{api}: pid_m and pid_n come together (a global destination) or not at all")
        if not tirx.is_buffer_var(C_buf):
            raise TypeError(f"{api}: C_buf must be a buffer, got {C_buf!r}")
        to_global = pid_m is not None
        scope = str(C_buf.scope())
        ndim = len(C_buf.shape)
        if to_global:
            if scope != "global" or ndim != 2:
                raise ValueError(f"{api}: with pid_m / pid_n, C_buf must be a 2-d global tensor, got '{C_buf.name}' "
                                 f"({ndim}-d, {scope})")
        elif scope not in SHARED_SCOPES or ndim not in (2, 4):
            raise ValueError(f"{api}: C_buf must be a 2-d or 4-d shared tile (or a global tensor with pid_m / pid_n), "
                             f"got '{C_buf.name}' ({ndim}-d, {scope})")
        tile_rows = self.block_row_warps * self.warp_rows  # MMA tiles of the block along M, N
        tile_cols = self.block_col_warps * self.warp_cols
        tx = self.get_thread_binding()
        lane, warp_n, warp_m = self.extract_thread_binding(tx)
        with ExitStack() as loops:
            i = loops.enter_context(_ir.unroll(0, self.warp_rows))
            j = loops.enter_context(_ir.unroll(0, self.warp_cols))
            pair = loops.enter_context(_ir.serial(0, self.local_size_out // 2))
            lo = loops.enter_context(_ir.vectorized(0, 2))  # two adjacent columns
            reg = pair * 2 + lo
            row, col = mma_store_index_map(lane, reg)
            tm, tn = warp_m * self.warp_rows + i, warp_n * self.warp_cols + j
            if to_global:
                tm, tn = pid_m * tile_rows + tm, pid_n * tile_cols + tn
            index = ([tm, tn, row, col] if ndim == 4 else
                     [tm * self.micro_size_x + row, tn * self.micro_size_y + col])
            value = C_local_buf[(i * self.warp_cols + j) * self.local_size_out + reg]
            if str(value.ty.dtype) != str(C_buf.dtype):
                value = tirx.Cast(str(C_buf.dtype), value)
            _ir.buffer_store(C_buf, value, index)

    # ---- what tilex does not provide ---------------------------------------------------------------------------
    def make_mma_load_layout(self, local_buf, matrix="A"):
        """TileLang's Fragment of an operand held in a ``T.alloc_fragment`` buffer: not provided (tilex's emitter
        works on per-thread ``T.alloc_local`` registers)."""
        raise NotImplementedError("TensorCoreIntrinEmitter.make_mma_load_layout is not supported by tilex: the "
                                  "emitter's operands are per-thread T.alloc_local buffers, not fragments")

    def make_mma_store_layout(self, local_buf):
        """TileLang's Fragment of an accumulator held in a ``T.alloc_fragment`` buffer: not provided."""
        raise NotImplementedError("TensorCoreIntrinEmitter.make_mma_store_layout is not supported by tilex: the "
                                  "emitter's accumulators are per-thread T.alloc_local buffers, not fragments")

    # ---- operand checks ----------------------------------------------------------------------------------------
    @staticmethod
    def _registers(api, name, buf, dtype, size):
        """`buf` must be a 1-d per-thread buffer of `dtype` with at least `size` elements."""
        if not tirx.is_buffer_var(buf):
            raise TypeError(f"{api}: {name} must be a T.alloc_local buffer, got {buf!r}")
        scope = str(buf.scope())
        if scope == "local.fragment":
            raise NotImplementedError(f"{api}: {name} '{buf.name}' is a fragment (T.alloc_fragment); tilex's "
                                      f"emitter works on per-thread registers: allocate it with T.alloc_local")
        if scope != "local":
            raise TypeError(f"{api}: {name} '{buf.name}' must be per-thread registers (T.alloc_local), not {scope}")
        if str(buf.dtype) != str(dtype):
            raise TypeError(f"{api}: {name} '{buf.name}' holds {buf.dtype}, the emitter's type is {dtype}")
        if len(buf.shape) != 1:
            raise ValueError(f"{api}: {name} '{buf.name}' must be 1-d (the registers in order), got shape "
                             f"{list(buf.shape)}")
        n = constant(buf.shape[0])
        if isinstance(n, int) and n < size:
            raise ValueError(f"{api}: {name} '{buf.name}' has {n} elements; the warp's tiles need {size}")

    @staticmethod
    def _shared_tile(api, name, tile, dtype):
        """``(buffer, start indices)`` of a shared tile given as a buffer, a slice of one or its first element."""
        if isinstance(tile, BufferRegionNode):
            buf, base = tile.source, [r.min for r in tile.region]
        elif isinstance(tile, BufferLoadNode):
            buf, base = tile.source, [x.base if isinstance(x, tirx.Ramp) else x for x in tile.indices]
        elif tirx.is_buffer_var(tile):
            buf, base = tile, [tirx.const(0, "int32")] * len(tile.shape)
        else:
            raise TypeError(f"{api}: {name} must be a shared buffer, a slice of one or an element, got {tile!r}")
        scope = str(buf.scope())
        if scope not in SHARED_SCOPES:
            raise TypeError(f"{api}: {name} '{buf.name}' must be in shared memory (ldmatrix reads it), not {scope}")
        if str(buf.dtype) != str(dtype):
            raise TypeError(f"{api}: {name} '{buf.name}' holds {buf.dtype}, the emitter's type is {dtype}")
        if len(buf.shape) < 2:
            raise ValueError(f"{api}: {name} '{buf.name}' must have at least 2 dimensions, got {list(buf.shape)}")
        return buf, base
