"""T.gemm operand forms and element types TileLang programs use: an A fragment stored (K, M) with transpose_A (the
transposed A register layout), int4 / uint4 tensors passed packed two values a byte in int8 / uint8 torch tensors,
and T.tfloat32 (float32 storage, tf32 MMAs, T.tfloat32(x) rounding). CPU tests compile for sm_90a / sm_80 and read
the CUDA or check the argument checks; GPU tests compare with torch."""
import pickle
import re

import numpy as np
import pytest

import tilex
import tilex.language as T
from tilex.jit.args import ArgChecker, logical_view, packed_storage_dtypes, packing_of
from tilex.language.dtypes import TensorFloat32, round_tf32
from tilex.layout import make_mma_a_fragment
from tilex.op.gemm import transpose_fragment


def _calls(kernel):
    return set(re.findall(r"tilex::(wgmma_m64n\d+k\d+\w*|mma_m16n8k\d+\w*|ldmatrix_\w+)", kernel.get_kernel_source()))


# ---- transpose_A with A in registers -------------------------------------------------------------------------------
def transposed_a_fragment_gemm(M, N, K, dtype="float16", acc="float32", trans_b=False, threads=128, scale=2):
    """C = (scale * A)^T @ op(B): A (K, M) loaded into a (K, M) fragment by a T.Parallel loop (as the indexer
    backward's d_logits), B (K, N) or (N, K) in shared memory."""
    b_shape = (N, K) if trans_b else (K, N)

    @T.prim_func
    def main(A: T.Tensor((K, M), dtype), B: T.Tensor(b_shape, dtype), C: T.Tensor((M, N), acc)):
        with T.Kernel(1, threads=threads) as bx:
            A_s = T.alloc_shared((K, M), dtype)
            B_s = T.alloc_shared(b_shape, dtype)
            A_f = T.alloc_fragment((K, M), dtype)
            C_l = T.alloc_fragment((M, N), acc)
            T.copy(A, A_s)
            T.copy(B, B_s)
            for k, m in T.Parallel(K, M):
                A_f[k, m] = A_s[k, m] * scale
            T.clear(C_l)
            T.gemm(A_f, B_s, C_l, transpose_A=True, transpose_B=trans_b)
            T.copy(C_l, C)

    return main


@pytest.mark.parametrize("args,target,want", [
    ((16, 128, 32, "bfloat16"), "sm_90a", "mma_m16n8k16_bf16"),        # the indexer backward's dq gemm
    ((64, 64, 32, "float16"), "sm_90a", "wgmma_m64n64k16_rs_f16"),
    ((64, 64, 32, "float16"), "sm_80", "mma_m16n8k16_f16"),
    ((64, 64, 32, "float32"), "sm_90a", "mma_m16n8k8_tf32"),
])
def test_transposed_a_fragment_runs_from_registers(args, target, want):
    k = tilex.compile(transposed_a_fragment_gemm(*args), out_idx=-1, target=target)
    calls = _calls(k)
    assert want in calls
    assert "A_frag" not in k.get_kernel_source()  # the instruction reads the fragment's own registers


@pytest.mark.parametrize("target,want", [("sm_90a", "wgmma_m64n64k32_rs_i8"), ("sm_80", "mma_m16n8k32_i8")])
def test_transposed_8bit_a_fragment_is_only_a_layout(target, want):
    """8-bit operands must be K-major in the instruction; a transposed A *fragment* holds them K-major already."""
    k = tilex.compile(transposed_a_fragment_gemm(64, 64, 64, "int8", "int32", trans_b=True, scale=1), out_idx=-1,
                      target=target)
    assert want in _calls(k)


def test_transposed_a_layout_puts_k_m_where_m_k_was():
    a = make_mma_a_fragment(32, 16, 2, 2)
    t = transpose_fragment(a)
    assert list(t.input_shape) == [16, 32]
    for m, k in [(0, 0), (5, 3), (17, 9), (31, 15)]:
        for rep in range(2):
            assert int(t.map_thread([k, m], rep=rep)) == int(a.map_thread([m, k], rep=rep))
        assert [int(x) for x in t.map_index([k, m])] == [int(x) for x in a.map_index([m, k])]


def test_transposed_a_fragment_must_be_used_whole():
    @T.prim_func
    def main(A: T.Tensor((32, 16), "float16"), B: T.Tensor((32, 64), "float16"), C: T.Tensor((16, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_f = T.alloc_fragment((32, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            C_l = T.alloc_fragment((16, 64), "float32")
            T.fill(A_f, 1)
            T.copy(B, B_s)
            T.gemm(A_f[:, 0:16], B_s, C_l, transpose_A=True, clear_accum=True)
            T.copy(C_l, C)

    with pytest.raises(tilex.TileOpError, match="A fragment must be used whole as a 32x16 tile"):
        tilex.compile(main, target="sm_90a")


# ---- int4 / uint4 tensors passed packed ----------------------------------------------------------------------------
def int4_gemm(M=256, N=256, K=512, bm=128, bn=128, bk=64, dtype=T.int4):
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K), dtype), C: T.Tensor((M, N), T.int32)):
        with T.Kernel(N // bn, M // bm, threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared((bn, bk), dtype)
            C_l = T.alloc_fragment((bm, bn), T.int32)
            T.clear(C_l)
            for ko in T.Pipelined(K // bk, num_stages=2):
                T.copy(A[by * bm, ko * bk], A_s)
                T.copy(B[bx * bn, ko * bk], B_s)
                T.gemm(A_s, B_s, C_l, transpose_B=True)
            T.copy(C_l, C[by * bm, bx * bn])

    return main


def copy_int4(n, dtype="int4"):
    """B = A for (4, n) sub-byte tensors (an output of a sub-byte type)."""

    @T.prim_func
    def main(A: T.Tensor((4, n), dtype), B: T.Tensor((4, n), dtype)):
        with T.Kernel(1, threads=128) as bx:
            S = T.alloc_shared((4, n), dtype)
            T.copy(A, S)
            T.copy(S, B)

    return main


def test_packing_of_sub_byte_types():
    torch = pytest.importorskip("torch")
    assert [packing_of(t) for t in ("int4", "uint4", "float4_e2m1fn", "int8", "float16", "bool")] == [2, 2, 2, 1, 1,
                                                                                                        1]
    with pytest.raises(TypeError, match="no torch storage"):
        packing_of("int3")
    assert packed_storage_dtypes("int4")[0] == torch.int8
    assert packed_storage_dtypes("uint4")[0] == torch.uint8


def _checker():
    return ArgChecker(tilex.compile(int4_gemm(), out_idx=-1, target="sm_90a").func, out_idx=-1)


def test_int4_parameters_take_packed_int8_tensors():
    """TileLang passes a T.Tensor((M, K), "int4") as an int8 (M, K // 2) tensor: the checks get past dtype, shape
    and contiguity (a CPU tensor then stops at the device check)."""
    torch = pytest.importorskip("torch")
    c = _checker()
    a = torch.zeros(256, 256, dtype=torch.int8)
    with pytest.raises(ValueError, match="argument 'A' .*expected a CUDA tensor"):
        c.prepare((a, a))
    with pytest.raises(ValueError, match="argument 'A' .*expected a CUDA tensor"):
        c.prepare((a.view(torch.uint8), a))


@pytest.mark.parametrize("bad,error,match", [
    (lambda torch: torch.zeros(256, 512, dtype=torch.int8), ValueError,
     r"expected packed shape \(256, 256\) \(int4 \(256, 512\), 2 values a byte"),
    (lambda torch: torch.zeros(256, 256, dtype=torch.float16), TypeError,
     r"expected int4 values packed 2 a byte .*torch.int8 / torch.uint8 tensor of shape \(256, 256\), got "
     r"torch.float16"),
    (lambda torch: torch.zeros(256, 256, dtype=torch.int8).t(), ValueError, "expected a contiguous packed tensor"),
    (lambda torch: torch.zeros(256, 256, 1, dtype=torch.int8), ValueError, "expected a 2-d tensor of packed shape"),
])
def test_int4_parameter_errors_say_what_is_expected(bad, error, match):
    torch = pytest.importorskip("torch")
    with pytest.raises(error, match=match):
        _checker().prepare((bad(torch), torch.zeros(256, 256, dtype=torch.int8)))


def test_symbolic_last_dimension_binds_the_logical_size():
    torch = pytest.importorskip("torch")
    n = T.dynamic("n")

    @T.prim_func
    def main(A: T.Tensor((4, n), "int4"), B: T.Tensor((4, n), "int8")):
        with T.Kernel(1, threads=128) as bx:
            for i, j in T.Parallel(4, n):
                B[i, j] = T.Cast("int8", A[i, j])

    c = ArgChecker(main)
    with pytest.raises(ValueError, match="'n'=32, but 'n' was already bound to 16"):
        c.prepare((torch.zeros(4, 8, dtype=torch.int8), torch.zeros(4, 32, dtype=torch.int8)))
    with pytest.raises(ValueError, match="expected a CUDA tensor"):
        c.prepare((torch.zeros(4, 8, dtype=torch.int8), torch.zeros(4, 16, dtype=torch.int8)))


def test_logical_view_shares_the_packed_memory():
    torch = pytest.importorskip("torch")
    a = torch.arange(32, dtype=torch.int8).reshape(4, 8)
    v = logical_view(a, (4, 16), "int4")
    assert str(v.dtype) == "int4" and tuple(v.shape) == (4, 16) and v.data_ptr() == a.data_ptr()


def test_sub_byte_output_needs_a_whole_number_of_bytes():
    with pytest.raises(ValueError, match="cannot allocate output 'B' .*multiple of 2"):
        ArgChecker(copy_int4(63), out_idx=-1)
    c = ArgChecker(copy_int4(64), out_idx=-1)
    assert c.outputs[0].pack == 2 and c.outputs[0].torch_dtype is None


def test_other_sub_byte_types_are_refused_at_the_call():
    torch = pytest.importorskip("torch")

    @T.prim_func
    def main(A: T.Tensor((4, 8), "int3"), B: T.Tensor((4, 8), "int8")):
        with T.Kernel(1, threads=128) as bx:
            for i, j in T.Parallel(4, 8):
                B[i, j] = T.Cast("int8", A[i, j])

    with pytest.raises(TypeError, match="argument 'A' .*int3 tensor parameter cannot be passed from torch"):
        ArgChecker(main).prepare((torch.zeros(4, 3, dtype=torch.int8), torch.zeros(4, 8, dtype=torch.int8)))


# ---- T.tfloat32 -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,lanes", [("tfloat32", 1), ("tfloat32x2", 2), ("tfloat32x64", 64)])
def test_tfloat32_names_are_float32_storage(name, lanes):
    t = getattr(T, name)
    assert isinstance(t, TensorFloat32) and t.name == name and t.lanes == lanes
    assert t == ("float32" if lanes == 1 else f"float32x{lanes}")
    assert T.dtype(name) is t or T.dtype(name) == t
    assert isinstance(T.dtype("custom[tfloat32]"), TensorFloat32)
    assert type(T.canonical_dtype(t)) is T.dtype  # TVM gets plain float32
    assert pickle.loads(pickle.dumps(t)).name == name
    assert not hasattr(T, "tfloat16")


def test_tfloat32_tensors_are_torch_float32():
    torch = pytest.importorskip("torch")
    assert T.tfloat32.as_torch() == torch.float32


@pytest.mark.parametrize("value,want", [
    (1.0, 1.0), (1 + 2 ** -11, 1 + 2 ** -10),          # a tie rounds away from zero
    (-(1 + 2 ** -11), -(1 + 2 ** -10)), (1 + 2 ** -11 - 2 ** -20, 1.0), (1 + 3 * 2 ** -12, 1 + 2 ** -10),
    (float("inf"), float("inf")),
])
def test_round_tf32_is_round_to_nearest_ties_away(value, want):
    assert round_tf32(value) == want
    assert float(T.tfloat32(value).value) == want


def test_round_tf32_keeps_nan():
    assert np.isnan(round_tf32(float("nan")))


def test_tfloat32_call_rounds_with_cvt_rna():
    @T.prim_func
    def main(A: T.Tensor((128, 128), "float32"), B: T.Tensor((128, 128), T.tfloat32)):
        with T.Kernel(1, threads=128) as bx:
            A_l = T.alloc_fragment((128, 128), "float32")
            T.copy(A, A_l)
            for i, j in T.Parallel(128, 128):
                A_l[i, j] = T.tfloat32(A_l[i, j])
            T.copy(A_l, B)

    k = tilex.compile(main, out_idx=-1, target="sm_90a")
    assert "tilex::round_tf32(" in k.get_kernel_source()


def tf32_gemm(M=64, N=64, K=128, round_a=True):
    """C = A @ B^T over T.tfloat32 tiles: A (bfloat16 -> tfloat32 fragment, or rounded from float32), B (N, K)
    tfloat32 in shared memory (mHC pre's gemm)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), B: T.Tensor((N, K), T.tfloat32), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_f = T.alloc_fragment((M, K), T.tfloat32)
            B_s = T.alloc_shared((N, K), T.tfloat32)
            C_l = T.alloc_fragment((M, N), "float32")
            T.copy(A, A_f)
            if round_a:
                for i, j in T.Parallel(M, K):
                    A_f[i, j] = T.tfloat32(A_f[i, j])
            T.copy(B, B_s)
            T.clear(C_l)
            T.gemm(A_f, B_s, C_l, transpose_B=True)
            T.copy(C_l, C)

    return main


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_tfloat32_gemm_runs_on_tf32_mma(target):
    k = tilex.compile(tf32_gemm(), out_idx=-1, target=target)
    assert "mma_m16n8k8_tf32" in _calls(k)
    assert k.params[1].dtype == "float32"


# ---- on the GPU -----------------------------------------------------------------------------------------------------
def _torch():
    return pytest.importorskip("torch")


def _round_tf32(x):
    """cvt.rna.tf32.f32 on a float32 tensor (finite values)."""
    torch = _torch()
    bits = x.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("args,trans_b,threads", [((16, 128, 32, "bfloat16"), False, 128),
                                                  ((64, 64, 32, "float16"), False, 128),
                                                  ((64, 64, 64, "float16"), True, 128),
                                                  ((32, 64, 32, "float16"), True, 128),
                                                  ((64, 128, 32, "float16"), False, 256),
                                                  ((128, 64, 32, "float16"), True, 256)])
def test_transposed_a_fragment_matches_torch(args, trans_b, threads):
    torch = _torch()
    M, N, K, dtype = args
    tdt = getattr(torch, dtype)
    kernel = tilex.compile(transposed_a_fragment_gemm(M, N, K, dtype, trans_b=trans_b, threads=threads), out_idx=-1)
    a = torch.randn(K, M, device="cuda", dtype=tdt)
    b = torch.randn((N, K) if trans_b else (K, N), device="cuda", dtype=tdt)
    opb = b.t() if trans_b else b
    ref = (2 * a).t().float() @ opb.float()
    torch.testing.assert_close(kernel(a, b), ref, atol=5e-2, rtol=1e-2)


@pytest.mark.gpu
def test_transposed_int8_a_fragment_matches_torch():
    torch = _torch()
    kernel = tilex.compile(transposed_a_fragment_gemm(64, 64, 64, "int8", "int32", trans_b=True, scale=1),
                           out_idx=-1)
    a = torch.randint(-8, 8, (64, 64), device="cuda", dtype=torch.int8)
    b = torch.randint(-8, 8, (64, 64), device="cuda", dtype=torch.int8)
    ref = a.t().cpu().int() @ b.t().cpu().int()
    torch.testing.assert_close(kernel(a, b).cpu(), ref, rtol=0, atol=0)


def _pack_nibbles(x):
    """Two 4-bit values a byte, element 2i in the low nibble (TileLang's int4 storage)."""
    torch = _torch()
    x16 = x.to(torch.int16)
    return ((x16[..., ::2] & 0xF) | ((x16[..., 1::2] & 0xF) << 4)).to(torch.uint8)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,lo,hi,storage", [("int4", -8, 8, "int8"), ("uint4", 0, 16, "uint8"),
                                                  ("int4", -8, 8, "uint8")])
def test_packed_int4_gemm_matches_torch(dtype, lo, hi, storage):
    torch = _torch()
    M = N = 256
    K = 512
    kernel = tilex.compile(int4_gemm(M, N, K, dtype=dtype), out_idx=-1)
    a = torch.randint(lo, hi, (M, K), dtype=torch.int32)
    b = torch.randint(lo, hi, (N, K), dtype=torch.int32)
    st = getattr(torch, storage)
    c = kernel(_pack_nibbles(a).view(st).cuda(), _pack_nibbles(b).view(st).cuda())
    torch.testing.assert_close(c.cpu(), a @ b.t(), rtol=0, atol=0)


@pytest.mark.gpu
def test_packed_int4_output_round_trips():
    torch = _torch()
    kernel = tilex.compile(copy_int4(64), out_idx=-1)
    a = torch.randint(-128, 128, (4, 32), dtype=torch.int8, device="cuda")
    out = kernel(a)
    assert out.dtype == torch.int8 and tuple(out.shape) == (4, 32)
    torch.testing.assert_close(out, a, rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("round_a", [True, False])
def test_tfloat32_gemm_matches_torch(round_a):
    torch = _torch()
    kernel = tilex.compile(tf32_gemm(round_a=round_a), out_idx=-1)
    a = torch.randn(64, 128, device="cuda")
    b = torch.randn(64, 128, device="cuda")
    a_in = _round_tf32(a)  # rounded by T.tfloat32(x), or by the MMA (every operand goes in rounded)
    ref = a_in.double() @ _round_tf32(b).double().t()
    torch.testing.assert_close(kernel(a, b).double(), ref, atol=1e-3, rtol=1e-4)


@pytest.mark.gpu
def test_tfloat32_round_matches_cvt_rna():
    torch = _torch()

    @T.prim_func
    def main(A: T.Tensor((1024,), "float32"), B: T.Tensor((1024,), "float32")):
        with T.Kernel(8, threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = T.tfloat32(A[bx * 128 + i])

    kernel = tilex.compile(main, out_idx=-1)
    a = torch.randn(1024, device="cuda") * 100
    a[:4] = torch.tensor([1 + 2 ** -11, -(1 + 2 ** -11), 1 + 2 ** -11 - 2 ** -20, 3.0])
    torch.testing.assert_close(kernel(a), _round_tf32(a), rtol=0, atol=0)


# ---- T.gemm_sp --------------------------------------------------------------------------------------------------------
def _e_factor(dtype, e_dtype):
    import tvm

    group = 2 if tvm.DataType(dtype).bits == 32 else 4
    return tvm.DataType(e_dtype).bits // 4 * group


def sparse_gemm(M=256, N=256, K=256, bm=128, bn=128, bk=64, dtype="float16", e_dtype="int16", acc="float32",
                trans_a=False, trans_e=False, trans_b=False, threads=128, stages=2):
    """C = A @ op(B) with A given as its 2:4-compressed values A_sparse and metadata E (tiles staged in shared
    memory, pipelined: TileLang's gemm_sp example, with the transposed storage forms)."""
    ef = _e_factor(dtype, e_dtype)
    a_shape, as_shape = ((K // 2, M), (bk // 2, bm)) if trans_a else ((M, K // 2), (bm, bk // 2))
    e_shape, es_shape = ((K // ef, M), (bk // ef, bm)) if trans_e else ((M, K // ef), (bm, bk // ef))
    b_shape, bs_shape = ((N, K), (bn, bk)) if trans_b else ((K, N), (bk, bn))

    @T.prim_func
    def main(A: T.Tensor(a_shape, dtype), E: T.Tensor(e_shape, e_dtype), B: T.Tensor(b_shape, dtype),
             C: T.Tensor((M, N), acc)):
        with T.Kernel(N // bn, M // bm, threads=threads) as (bx, by):
            A_s = T.alloc_shared(as_shape, dtype)
            E_s = T.alloc_shared(es_shape, e_dtype)
            B_s = T.alloc_shared(bs_shape, dtype)
            C_l = T.alloc_fragment((bm, bn), acc)
            T.clear(C_l)
            for k in T.Pipelined(K // bk, num_stages=stages):
                if trans_a:
                    T.copy(A[k * bk // 2, by * bm], A_s)
                else:
                    T.copy(A[by * bm, k * bk // 2], A_s)
                if trans_e:
                    T.copy(E[k * bk // ef, by * bm], E_s)
                else:
                    T.copy(E[by * bm, k * bk // ef], E_s)
                if trans_b:
                    T.copy(B[bx * bn, k * bk], B_s)
                else:
                    T.copy(B[k * bk, bx * bn], B_s)
                T.gemm_sp(A_s, E_s, B_s, C_l, transpose_A=trans_a, transpose_E=trans_e, transpose_B=trans_b)
            T.copy(C_l, C[by * bm, bx * bn])

    return main


@pytest.mark.parametrize("target,want", [("sm_90a", "wgmma_m64n128k16_rs_f16"), ("sm_80", "mma_m16n8k16_f16")])
def test_gemm_sp_runs_the_dense_gemm_on_a_register_a(target, want):
    k = tilex.compile(sparse_gemm(), out_idx=-1, target=target)
    src = k.get_kernel_source()
    assert want in _calls(k)
    assert "A_s_dense" in src and "A_frag" not in src  # A rebuilt in the operand registers, not loaded


@pytest.mark.parametrize("kw", [dict(trans_a=True, trans_e=True), dict(dtype="float32", e_dtype="int16"),
                                dict(dtype="int8", e_dtype="int32", acc="int32", trans_b=True),
                                dict(dtype="bfloat16", e_dtype="int8", trans_b=True)])
def test_gemm_sp_forms_compile(kw):
    tilex.compile(sparse_gemm(**kw), out_idx=-1, target="sm_90a")


def test_gemm_sp_checks_the_metadata_shape():
    @T.prim_func
    def main(A: T.Tensor((64, 32), "float16"), E: T.Tensor((64, 8), "int16"), B: T.Tensor((64, 64), "float16"),
             C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            c = T.alloc_fragment((64, 64), "float32")
            T.gemm_sp(A, E, B, c, clear_accum=True)
            T.copy(c, C)

    with pytest.raises(tilex.TileOpError, match=r"metadata E must be \(M, K/16\) = \(64, 4\), got \(64, 8\)"):
        tilex.compile(main, target="sm_90a")


def test_gemm_sp_refuses_other_dtypes():
    @T.prim_func
    def main(A: T.Tensor((64, 32), "float16"), E: T.Tensor((64, 4), "float16"), B: T.Tensor((64, 64), "float16"),
             C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            c = T.alloc_fragment((64, 64), "float32")
            T.gemm_sp(A, E, B, c, clear_accum=True)
            T.copy(c, C)

    with pytest.raises(tilex.TileOpError, match="metadata E must be one of int8"):
        tilex.compile(main, target="sm_90a")


def test_tuple_assignment_into_buffer_elements_swaps():
    """TileLang's ``a[0], a[1] = a[1], a[0]`` (its sparse compressors write it): values read before any store."""

    @T.prim_func
    def main(A: T.Tensor((4,), "int32"), B: T.Tensor((4,), "int32")):
        with T.Kernel(1, threads=1) as bx:
            x = T.alloc_local([4], "int32")
            for i in T.serial(4):
                x[i] = A[i]
            x[0], x[1] = x[1], x[0]
            B[0], B[1], B[2], B[3] = x[0], x[1], x[2], x[3]

    text = main.script()
    assert text.index("= x[1]") < text.index("x[0] = ") and text.index("= x[0]") < text.index("x[1] = ")


def _compress_2_4(dense, e_dtype):
    """(A_sparse, E) of a dense matrix whose every group of 4 (2 for float32) along K holds at most 2 (1) nonzeros,
    in the natural metadata layout (tilex.op.gemm_sp's docstring)."""
    torch = _torch()
    m, k = dense.shape
    group, kept = (2, 1) if dense.dtype == torch.float32 else (4, 2)
    q = {torch.int8: 2, torch.int16: 4, torch.int32: 8}[e_dtype]
    groups = dense.reshape(m, k // group, group)
    nz = groups != 0
    # positions of the kept values: the nonzeros first, padded with the lowest free positions, ascending
    order = torch.argsort((~nz).to(torch.int8) * group + torch.arange(group), dim=-1, stable=True)[..., :kept]
    pos = torch.sort(order, dim=-1).values
    sparse = torch.gather(groups, -1, pos).reshape(m, k // group * kept)
    if kept == 2:
        codes = pos[..., 0] | (pos[..., 1] << 2)
    else:
        codes = torch.where(pos[..., 0] == 0, 0b0100, 0b1110)
    codes = codes.to(torch.int64).reshape(m, k // group // q, q)
    word = sum(codes[..., j] << (4 * j) for j in range(q))
    bits = {torch.int8: 8, torch.int16: 16, torch.int32: 32}[e_dtype]
    word = torch.where(word >= 2 ** (bits - 1), word - 2 ** bits, word)
    return sparse.contiguous(), word.to(e_dtype).contiguous()


def _semi_sparse(m, k, dtype):
    torch = _torch()
    group, kept = (2, 1) if dtype == torch.float32 else (4, 2)
    if dtype == torch.int8:
        vals = torch.randint(-8, 8, (m, k // group, group)).to(dtype)
    else:
        vals = torch.randn(m, k // group, group).to(dtype)
    keep = torch.rand(m, k // group, group).argsort(-1)[..., :kept]
    mask = torch.zeros(m, k // group, group, dtype=torch.bool).scatter_(-1, keep, True)
    return torch.where(mask, vals, torch.zeros((), dtype=dtype)).reshape(m, k)


@pytest.mark.gpu
@pytest.mark.parametrize("kw", [dict(), dict(trans_a=True, trans_e=True), dict(trans_b=True),
                                dict(dtype="bfloat16", e_dtype="int8"), dict(dtype="float32", e_dtype="int16"),
                                dict(dtype="int8", e_dtype="int32", acc="int32", trans_b=True),
                                dict(threads=256), dict(stages=0)])
def test_gemm_sp_matches_torch(kw):
    torch = _torch()
    M = N = K = 256
    dtype = getattr(torch, kw.get("dtype", "float16"))
    e_dtype = getattr(torch, kw.get("e_dtype", "int16"))
    kernel = tilex.compile(sparse_gemm(M, N, K, **kw), out_idx=-1)
    a = _semi_sparse(M, K, dtype)
    a_sparse, e = _compress_2_4(a, e_dtype)
    if kw.get("trans_a"):
        a_sparse = a_sparse.t().contiguous()
    if kw.get("trans_e"):
        e = e.t().contiguous()
    b = (torch.randint(-8, 8, (K, N)) if dtype == torch.int8 else torch.randn(K, N)).to(dtype)
    b_arg = b.t().contiguous() if kw.get("trans_b") else b
    c = kernel(a_sparse.cuda(), e.cuda(), b_arg.cuda()).cpu()
    if dtype == torch.int8:
        torch.testing.assert_close(c, a.int() @ b.int(), rtol=0, atol=0)
    elif dtype == torch.float32:
        ref = _round_tf32(a).double() @ _round_tf32(b).double()
        torch.testing.assert_close(c.double(), ref, atol=1e-2, rtol=1e-3)
    else:
        torch.testing.assert_close(c, a.float() @ b.float(), atol=1e-2, rtol=1e-2)


def _decode_2_4(sparse, meta, k, is_32bit):
    """The dense matrix of (sparse, meta) read as tilex.op.gemm_sp's docstring says, element by element."""
    torch = _torch()
    group, kept = (2, 1) if is_32bit else (4, 2)
    q = meta.element_size() * 2
    out = torch.zeros(sparse.shape[0], k, dtype=sparse.dtype)
    for r in range(sparse.shape[0]):
        for g in range(k // group):
            code = (int(meta[r, g // q]) >> (4 * (g % q))) & 0xF
            if kept == 1:
                out[r, g * 2 + ((code & 3) >> 1)] = sparse[r, g]
                continue
            first, second = code & 3, (code >> 2) & 3
            out[r, g * 4 + second] = sparse[r, 2 * g + 1]
            out[r, g * 4 + first] = sparse[r, 2 * g]
    return out


@pytest.mark.parametrize("dtype,e_dtype", [("float16", "int16"), ("float32", "int16"), ("int8", "int32"),
                                           ("bfloat16", "int8")])
def test_the_gpu_tests_compressor_writes_the_documented_format(dtype, e_dtype):
    torch = _torch()
    a = _semi_sparse(8, 64, getattr(torch, dtype))
    sparse, meta = _compress_2_4(a, getattr(torch, e_dtype))
    assert tuple(sparse.shape) == (8, 32) and tuple(meta.shape) == (8, 64 // _e_factor(dtype, e_dtype))
    assert torch.equal(_decode_2_4(sparse, meta, 64, dtype == "float32"), a)
