"""TileLang's device functions and loop spellings: warp primitives, T.fma / T.popcount / T.dp4a, T.clamp,
T.device_assert, T.sync_threads(id, count), T.sync_warp, PDL, kernel queries, annotations, T.serial / T.unroll /
T.Serial / T.Unroll / T.Vectorized, T.reshape (CPU: the generated CUDA and the errors; GPU: values against torch)."""
import os
import subprocess
import sys
import textwrap

import pytest

import tilex
import tilex.language as T
from tilex.engine.nvcc import TilexCompileError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADERS = os.path.join(REPO, "src", "tilex")


def cuda(func, target="sm_90a"):
    src = tilex.compile(func, target=target).get_kernel_source()
    return src[src.index('extern "C"'):]


def header(name):
    with open(os.path.join(HEADERS, name)) as f:
        return f.read()


# ---- warp primitives ----------------------------------------------------------------------------------------------
def _shuffles(dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((128,), dtype), B: T.Tensor((4, 128), dtype)):
        with T.Kernel(1, threads=128) as bx:
            tx = T.get_thread_binding()
            B[0, tx] = T.shfl_sync(A[tx], 5)
            B[1, tx] = T.shfl_xor(A[tx], 1)
            B[2, tx] = T.shfl_down(A[tx], 2, width=16)
            B[3, tx] = T.shfl_up(A[tx], 3)

    return main


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
def test_shuffles_generate_the_cuda_shuffles(dtype):
    src = cuda(_shuffles(dtype))
    for name in ("shfl_sync", "shfl_xor_sync", "shfl_down_sync", "shfl_up_sync"):
        assert f"tilex::{name}(" in src
    assert "A_ptr[((int)threadIdx.x)], 2, 16)" in src  # the width reaches the call
    for builtin in ("__shfl_sync", "__shfl_xor_sync", "__shfl_down_sync", "__shfl_up_sync"):
        assert builtin in header("warp.h")


def test_shuffle_arguments_are_checked():
    with pytest.raises(ValueError, match="width must be a power of two"):
        @T.prim_func
        def bad_width(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                A[0] = T.shfl_xor(A[0], 1, width=12)

    with pytest.raises(ValueError, match="32-bit lane mask"):
        @T.prim_func
        def bad_mask(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                A[0] = T.shfl_sync(A[0], 0, mask=1 << 33)

    with pytest.raises(TypeError, match="more than the 8 bytes"):
        @T.prim_func
        def too_wide(A: T.Tensor((32,), "float32x4")):
            with T.Kernel(1, threads=32) as bx:
                A[0] = T.shfl_sync(A[0], 0)


def test_warp_reductions():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "int32"), H: T.Tensor((64,), "float16")):
        with T.Kernel(1, threads=64) as bx:
            tx = T.get_thread_binding()
            A[tx] = T.warp_reduce_sum(A[tx]) + T.warp_reduce_max(A[tx]) + T.warp_reduce_min(A[tx])
            B[tx] = T.warp_reduce_bitand(B[tx]) + T.warp_reduce_bitor(B[tx]) + T.warp_reduce_sum(B[tx])
            H[tx] = T.warp_reduce_max(H[tx])

    src = cuda(main)
    for kind in ("sum", "max", "min", "bitand", "bitor"):
        assert f"tilex::warp_reduce_{kind}(" in src
    assert "__reduce_add_sync" in header("warp.h") and "__shfl_xor_sync" in header("warp.h")


def test_bitwise_warp_reduction_of_a_float_is_a_type_error():
    with pytest.raises(TypeError, match="needs an integer value"):
        @T.prim_func
        def main(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                A[0] = T.warp_reduce_bitor(A[0])


def test_lane_and_warp_indices_of_a_two_dimensional_block():
    @T.prim_func
    def main(O: T.Tensor((4, 256), "int32")):
        with T.Kernel(1, threads=(32, 8)) as bx:
            t = T.get_thread_binding(0) + T.get_thread_binding(1) * 32
            O[0, t] = T.get_lane_idx()
            O[1, t] = T.get_warp_idx()
            O[2, t] = T.get_warp_idx_sync(64)
            O[3, t] = T.get_warp_group_idx() + T.get_warp_group_idx(32, 2) * 10

    src = cuda(main)
    assert "threadIdx.y" in src and "threadIdx.z" not in src
    with pytest.raises(ValueError, match="give warp_size"):
        @T.prim_func
        def bad(O: T.Tensor((128,), "int32")):
            with T.Kernel(1, threads=128) as bx:
                O[0] = T.get_warp_group_idx(warps_per_group=2)
    with pytest.raises(ValueError, match="only valid inside"):
        T.get_lane_idx()


def test_votes():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), O: T.Tensor((2, 4), "int64")):
        with T.Kernel(1, threads=64) as bx:
            tx = T.get_thread_binding()
            if tx % 32 == 0:
                O[tx // 32, 0] = T.Cast("int64", T.ballot_sync(A[tx] > 0))
                O[tx // 32, 1] = T.Cast("int64", T.activemask())
                O[tx // 32, 2] = T.Cast("int64", T.ballot(A[tx] < 0))
            O[tx // 32, 3] = T.Cast("int64", T.any_sync(A[tx] > 1) * 2 + T.all_sync(A[tx] > -1))

    src = cuda(main)
    for builtin in ("__ballot_sync(", "__activemask()", "__any_sync(", "__all_sync("):
        assert builtin in src
    with pytest.raises(TypeError, match="integer or boolean"):
        @T.prim_func
        def bad(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                A[0] = T.Cast("float32", T.any_sync(A[0]))


def test_sync_warp_and_named_barriers():
    @T.prim_func
    def main(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            tx = T.get_thread_binding()
            A[tx] = A[tx] + 1
            T.sync_warp()
            T.sync_warp(0xFFFF)
            T.sync_threads()
            T.sync_threads(1)
            if tx < 64:
                T.sync_threads(2, 64)

    src = cuda(main)
    assert "__syncwarp();" in src and "__syncwarp(" in src.replace("__syncwarp();", "")
    assert "__syncthreads();" in src
    assert "tilex::bar_sync(1);" in src and "tilex::named_barrier_wait(2, 64);" in src
    assert "bar.sync %0;" in header("builtin.h") and "bar.sync %0, %1;" in header("tma.h")


@pytest.mark.parametrize("args, error, match", [
    ((16,), ValueError, "barrier_id must be <= 15"),
    ((1, 48), ValueError, "multiple of 32"),
    ((1, 256), ValueError, "more than the block's 128"),
    ((None, 64), TypeError, "arrive_count needs a barrier_id"),
    ((1.5,), TypeError, "barrier_id must be an int"),
])
def test_sync_threads_arguments_are_checked(args, error, match):
    with pytest.raises(error, match=match):
        @T.prim_func
        def main(A: T.Tensor((128,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                T.sync_threads(*args)


# ---- T.fma, T.popcount, T.dp4a, T.clamp -----------------------------------------------------------------------
def test_fma_popcount_clamp_generate_cuda():
    @T.prim_func
    def main(F: T.Tensor((32,), "float32"), D: T.Tensor((32,), "float64"), H: T.Tensor((32,), "float16"),
             I: T.Tensor((32,), "int32"), L: T.Tensor((32,), "int64"), B: T.Tensor((32,), "int8")):
        with T.Kernel(1, threads=32) as bx:
            tx = T.get_thread_binding()
            F[tx] = T.fma(F[tx], F[tx], T.float32(1))
            D[tx] = T.fma(D[tx], D[tx], D[tx])
            H[tx] = T.fma(H[tx], H[tx], H[tx])
            I[tx] = T.popcount(I[tx]) + T.clamp(I[tx], -3, 3)
            L[tx] = T.popcount(L[tx])
            B[tx] = T.popcount(B[tx])
            F[tx] = T.clamp(F[tx], 0.0, 6.0) * F[tx] + F[tx]

    src = cuda(main)
    assert "fmaf(" in src and " fma(" in src and "__hfma(" in src
    assert src.count("fmaf(") == 1  # a plain a * b + c stays as written (nvcc contracts it)
    assert "__popc(" in src and "__popcll(" in src
    assert "__popc(((uint)((uchar)B_ptr" in src  # an int8's own 8 bits are counted
    assert "min(max(" in src


def test_fma_operands_are_checked():
    with pytest.raises(TypeError, match="T.fma: the operands must have one dtype"):
        @T.prim_func
        def mixed(F: T.Tensor((32,), "float32"), H: T.Tensor((32,), "float16")):
            with T.Kernel(1, threads=32) as bx:
                F[0] = T.fma(F[0], F[1], T.Cast("float32", H[0])) + T.Cast("float32", T.fma(H[0], H[1], F[2]))


def test_dp4a():
    @T.prim_func
    def main(A: T.Tensor((16,), "int8"), B: T.Tensor((16,), "int8"), C: T.Tensor((1,), "int32")):
        with T.Kernel(1, threads=32) as bx:
            a = T.alloc_local((16,), "int8")
            acc = T.alloc_local((1,), "int32")
            for i in T.serial(16):
                a[i] = A[i]
            acc[0] = 0
            for k in T.serial(4):
                T.dp4a(a[k * 4], B[k * 4], acc[0])
            C[0] = acc[0]

    src = cuda(main)
    assert "tilex::dp4a((&(a_ptr[(k * 4)])), (&(B_ptr[(k * 4)])), (&(acc_ptr[0])));" in src
    assert "__dp4a(" in header("builtin.h")


def test_dp4a_checks_dtypes():
    with pytest.raises(ValueError, match="A must be int8"):
        @T.prim_func
        def main(A: T.Tensor((16,), "uint8"), B: T.Tensor((16,), "int8"), C: T.Tensor((1,), "int32")):
            with T.Kernel(1, threads=32) as bx:
                T.dp4a(A[0], B[0], C[0])
    with pytest.raises(ValueError, match="C must be int32"):
        @T.prim_func
        def main2(A: T.Tensor((16,), "int8"), B: T.Tensor((16,), "int8"), C: T.Tensor((1,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                T.dp4a(A, B, C)


# ---- T.device_assert, PDL, T.import_source ----------------------------------------------------------------------
def test_device_assert_carries_message_and_location():
    @T.prim_func
    def main(A: T.Tensor((32,), "int32")):
        with T.Kernel(1, threads=32) as bx:
            tx = T.get_thread_binding()
            T.device_assert(A[tx] >= 0, 'A must be "non-negative"')
            T.device_assert(A[tx] < 100, no_stack_info=True)

    src = cuda(main)
    assert 'tilex::device_assert((0 <= A_ptr[((int)threadIdx.x)]), "A must be \\"non-negative\\"", ' in src
    assert "test_device_builtins.py" in src
    assert '"T.device_assert", "<tile program>", (uint)0)' in src
    assert "__assert_fail" in header("builtin.h")
    with pytest.raises(TypeError, match="msg must be a str"):
        @T.prim_func
        def bad(A: T.Tensor((32,), "int32")):
            with T.Kernel(1, threads=32) as bx:
                T.device_assert(A[0] > 0, 3)


def test_pdl_generates_griddepcontrol_and_needs_sm90():
    @T.prim_func
    def main(A: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            T.pdl_sync()
            A[T.get_thread_binding()] = 1.0
            T.pdl_trigger()

    src = cuda(main)
    assert "tilex::pdl_wait();" in src and "tilex::pdl_launch_dependents();" in src
    assert "griddepcontrol.wait;" in header("builtin.h")
    assert "griddepcontrol.launch_dependents;" in header("builtin.h")
    with pytest.raises(TilexCompileError, match="griddepcontrol_requires_sm_90"):
        tilex.compile(main, target="sm_80")


def test_import_source():
    @T.prim_func
    def main(A: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            T.import_source("__device__ float twice(float x) { return 2 * x; }")
            A[0] = T.call_extern("float32", "twice", A[1])

    src = tilex.compile(main, target="sm_90a").get_kernel_source()  # more in test_tilelang_names3.py
    assert src.index("__device__ float twice(float x)") < src.index('extern "C" __global__')

    @T.prim_func
    def nothing(A: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            T.import_source()
            A[0] = 1.0

    assert "A_ptr[0] = " in cuda(nothing)


# ---- kernel queries -----------------------------------------------------------------------------------------------
def test_kernel_queries():
    seen = {}

    def record(**kw):
        seen.update(kw)

    @T.prim_func
    def main(A: T.Tensor((8, 6), "float32")):
        with T.Kernel(8, 6, threads=(32, 2)) as (bx, by):
            record(thread_extents=T.get_thread_extents(), thread_extent_y=T.get_thread_extent(1),
                   block_extents=T.get_block_extents(), block_extent_x=T.get_block_extent(),
                   thread_bindings=T.get_thread_bindings(), block_bindings=T.get_block_bindings(),
                   block_y=T.get_block_binding(1), block_z=T.get_block_binding(2), bx=bx, by=by,
                   tx=T.get_thread_binding(0), ty=T.get_thread_binding(1))
            A[bx, by] = T.Cast("float32", T.get_thread_binding(1))

    assert seen["thread_extents"] == [32, 2, 1] and seen["thread_extent_y"] == 2
    assert seen["block_extents"] == [8, 6, 1] and seen["block_extent_x"] == 8
    tb, bb = seen["thread_bindings"], seen["block_bindings"]
    assert tb[0].same_as(seen["tx"]) and tb[1].same_as(seen["ty"]) and int(tb[2]) == 0
    assert len(bb) == 2 and bb[0].same_as(seen["bx"]) and bb[1].same_as(seen["by"])
    assert seen["block_y"].same_as(seen["by"]) and int(seen["block_z"]) == 0
    with pytest.raises(ValueError, match="dim must be 0, 1 or 2"):
        @T.prim_func
        def bad(A: T.Tensor((8,), "float32")):
            with T.Kernel(8, threads=32) as bx:
                A[bx] = T.Cast("float32", T.get_block_binding(3))


# ---- annotations --------------------------------------------------------------------------------------------------
def test_min_blocks_per_sm_reaches_launch_bounds():
    @T.prim_func
    def main(A: T.Tensor((256,), "float32")):
        with T.Kernel(2, threads=128) as bx:
            T.annotate_min_blocks_per_sm(3)
            A[bx * 128 + T.get_thread_binding()] = 1.0

    assert "__launch_bounds__(128, 3)" in cuda(main)
    with pytest.raises(ValueError, match="n must be >= 1"):
        T.annotate_min_blocks_per_sm(0)


def test_restrict_buffers_drop_restrict_and_may_be_written_before_the_kernel():
    @T.prim_func
    def main(x: T.Tensor((64,), "float32"), y: T.Tensor((64,), "float32"), z: T.Tensor((64,), "float32")):
        T.annotate_restrict_buffers(x, y)
        T.annotate_min_blocks_per_sm(2)
        with T.Kernel(1, threads=64) as pid:
            tx = T.get_thread_binding()
            y[tx] = x[tx] + z[tx]

    src = cuda(main)
    signature = src.splitlines()[0]
    assert "float* x_ptr" in signature and "float* y_ptr" in signature
    assert "float* __restrict__ z_ptr" in signature
    assert "__launch_bounds__(64, 2)" in signature


def test_hint_annotations_are_checked_and_accepted():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            T.annotate_l2_hit_ratio({A: 0.8})
            T.annotate_safe_value({A: 0})
            T.copy(A, B)

    cuda(main)
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        @T.prim_func
        def bad_ratio(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64) as bx:
                T.annotate_l2_hit_ratio({A: 1.5})
    with pytest.raises(NotImplementedError, match="annotate_safe_value"):
        @T.prim_func
        def pad(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64) as bx:
                T.annotate_safe_value({A: -99})


# ---- loops --------------------------------------------------------------------------------------------------------
def test_loop_spellings():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.serial(0, 64, 8):
                A[i] = 1.0
            for i in T.Serial(2, 10, 4):
                A[i] = 2.0
            for i in T.unroll(0, 16, unroll_factor=4):
                A[i] = 3.0
            for i in T.Unroll(0, 8, 2, explicit=True):
                A[i] = 4.0
            for i in T.unroll(8, annotations={"pragma_unroll_factor": 2}):
                A[i] = 5.0
            for i in T.Vectorized(4):
                A[i] = 6.0

    src = cuda(main)
    assert "i < 64; i += 8)" in src and "i_1 < 10; i_1 += 4)" in src
    assert "#pragma unroll 4\n" in src and "#pragma unroll 2\n" in src
    assert "#pragma unroll\n" in src and "i_3 < 8; i_3 += 2)" in src


def test_unroll_arguments_are_checked():
    with pytest.raises(ValueError, match="constant trip count"):
        @T.prim_func
        def symbolic(A: T.Tensor((64,), "float32"), n: T.int32):
            with T.Kernel(1, threads=32) as bx:
                for i in T.unroll(n, explicit=True):
                    A[i] = 1.0
    with pytest.raises(ValueError, match="exclusive"):
        T.unroll(8, explicit=True, unroll_factor=2)
    with pytest.raises(ValueError, match="step must not be 0"):
        T.serial(0, 8, 0)


# ---- T.reshape ----------------------------------------------------------------------------------------------------
def test_reshape_of_global_and_local_buffers():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), B: T.Tensor((8, 8), "float32")):
        with T.Kernel(1, threads=64) as bx:
            tx = T.get_thread_binding()
            A2 = T.reshape(A, (8, 8))
            r = T.alloc_local((2, 4), "float32")
            r1 = T.reshape(r, [8])
            for i in T.serial(8):
                r1[i] = A2[tx % 8, tx // 8]
            B[tx // 8, tx % 8] = r[1, 3]

    src = cuda(main)
    assert "A_ptr[(((((int)threadIdx.x) & 7) * 8) + (((int)threadIdx.x) >> 3))]" in src
    assert "r_ptr[i] = " in src and "= r_ptr[7];" in src


def test_reshape_errors():
    with pytest.raises(ValueError, match="has 64 elements but the shape"):
        @T.prim_func
        def count(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64) as bx:
                A2 = T.reshape(A, (8, 9))
                A2[0, 0] = 1.0
    with pytest.raises(ValueError, match="has 64 elements but the shape"):
        @T.prim_func
        def shared(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64) as bx:
                s = T.alloc_shared((64,), "float32")
                s2 = T.reshape(s, (8, 9))


# ---- GPU ----------------------------------------------------------------------------------------------------------
def _torch():
    return pytest.importorskip("torch")


def _warps(x):
    return x.reshape(-1, 32)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
def test_shuffles_gpu(dtype):
    torch = _torch()
    k = tilex.compile(_shuffles(dtype), out_idx=[1])
    a = (torch.arange(128, device="cuda") % 100 - 50).to(getattr(torch, dtype))
    out = k(a)
    lane = torch.arange(32, device="cuda")
    w = _warps(a)
    want = torch.stack([
        w[:, 5:6].expand(-1, 32).reshape(-1),
        w[:, lane ^ 1].reshape(-1),
        w[:, torch.where(lane % 16 + 2 < 16, lane + 2, lane)].reshape(-1),
        w[:, torch.where(lane >= 3, lane - 3, lane)].reshape(-1),
    ])
    torch.testing.assert_close(out, want)


@pytest.mark.gpu
def test_warp_reductions_gpu():
    torch = _torch()

    @T.prim_func
    def main(A: T.Tensor((128,), "float32"), I: T.Tensor((128,), "int32"), H: T.Tensor((128,), "float16"),
             O: T.Tensor((6, 128), "float32"), P: T.Tensor((3, 128), "int32")):
        with T.Kernel(1, threads=128) as bx:
            tx = T.get_thread_binding()
            O[0, tx] = T.warp_reduce_sum(A[tx])
            O[1, tx] = T.warp_reduce_max(A[tx])
            O[2, tx] = T.warp_reduce_min(A[tx])
            O[3, tx] = T.Cast("float32", T.warp_reduce_sum(H[tx]))
            O[4, tx] = T.Cast("float32", T.warp_reduce_max(H[tx]))
            O[5, tx] = T.Cast("float32", T.warp_reduce_min(I[tx]))
            P[0, tx] = T.warp_reduce_bitand(I[tx])
            P[1, tx] = T.warp_reduce_bitor(I[tx])
            P[2, tx] = T.warp_reduce_sum(I[tx])

    k = tilex.compile(main, out_idx=[3, 4])
    a = torch.randn(128, device="cuda")
    i = torch.randint(-2**20, 2**20, (128,), device="cuda", dtype=torch.int32)
    h = (torch.randint(-8, 8, (128,), device="cuda")).half()
    o, p = k(a, i, h)

    def per_warp(x, fn):
        return fn(_warps(x)).repeat_interleave(32)

    torch.testing.assert_close(o[0], per_warp(a, lambda w: w.sum(1)), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(o[1], per_warp(a, lambda w: w.amax(1)))
    torch.testing.assert_close(o[2], per_warp(a, lambda w: w.amin(1)))
    torch.testing.assert_close(o[3], per_warp(h.float(), lambda w: w.sum(1)))
    torch.testing.assert_close(o[4], per_warp(h.float(), lambda w: w.amax(1)))
    torch.testing.assert_close(o[5], per_warp(i, lambda w: w.amin(1)).float())
    iw = _warps(i).cpu().tolist()
    band, bor = [], []
    for row in iw:
        x, y = -1, 0
        for v in row:
            x, y = x & v, y | v
        band += [x] * 32
        bor += [y] * 32
    assert p[0].cpu().tolist() == band and p[1].cpu().tolist() == bor
    torch.testing.assert_close(p[2], per_warp(i, lambda w: w.sum(1)).int())


@pytest.mark.gpu
def test_lane_warp_indices_and_votes_gpu():
    torch = _torch()

    @T.prim_func
    def main(A: T.Tensor((256,), "float32"), O: T.Tensor((4, 256), "int32"), V: T.Tensor((8, 4), "int64")):
        with T.Kernel(1, threads=(32, 8)) as bx:
            t = T.get_thread_binding(0) + T.get_thread_binding(1) * 32
            O[0, t] = T.get_lane_idx()
            O[1, t] = T.get_warp_idx()
            O[2, t] = T.get_warp_idx_sync(64)
            O[3, t] = T.get_warp_group_idx(32, 2)
            V[T.get_warp_idx(), 0] = T.Cast("int64", T.ballot_sync(A[t] > 0))
            V[T.get_warp_idx(), 1] = T.Cast("int64", T.any_sync(A[t] > 2))
            V[T.get_warp_idx(), 2] = T.Cast("int64", T.all_sync(A[t] > -100))
            if T.get_lane_idx() < 5:
                V[T.get_warp_idx(), 3] = T.Cast("int64", T.activemask())

    k = tilex.compile(main, out_idx=[1, 2])
    a = torch.randn(256, device="cuda")
    o, v = k(a)
    t = torch.arange(256, device="cuda", dtype=torch.int32)
    assert torch.equal(o[0], t % 32) and torch.equal(o[1], t // 32)
    assert torch.equal(o[2], t // 64) and torch.equal(o[3], t // 64)
    bits = (_warps(a) > 0).long().cpu()
    ballot = [sum(int(b) << n for n, b in enumerate(row)) for row in bits]
    assert v[:, 0].cpu().tolist() == ballot
    assert v[:, 1].cpu().tolist() == [int(bool((row > 2).any())) for row in _warps(a)]
    assert v[:, 2].cpu().tolist() == [1] * 8
    assert v[:, 3].cpu().tolist() == [0b11111] * 8


@pytest.mark.gpu
def test_fma_popcount_dp4a_clamp_gpu():
    torch = _torch()

    @T.prim_func
    def main(F: T.Tensor((128,), "float32"), I: T.Tensor((128,), "int32"), A: T.Tensor((128, 16), "int8"),
             B: T.Tensor((128, 16), "int8"), OF: T.Tensor((2, 128), "float32"), OI: T.Tensor((3, 128), "int32")):
        with T.Kernel(1, threads=128) as bx:
            tx = T.get_thread_binding()
            a = T.alloc_local((16,), "int8")
            acc = T.alloc_local((1,), "int32")
            for j in T.serial(16):
                a[j] = A[tx, j]
            acc[0] = 7
            for j in T.unroll(4):
                T.dp4a(a[j * 4], B[tx, j * 4], acc[0])
            OF[0, tx] = T.fma(F[tx], F[tx], T.float32(0.5))
            OF[1, tx] = T.clamp(F[tx], -0.5, 0.5)
            OI[0, tx] = T.popcount(I[tx])
            OI[1, tx] = acc[0]
            OI[2, tx] = T.clamp(I[tx], -1000, 1000)

    k = tilex.compile(main, out_idx=[4, 5])
    f = torch.randn(128, device="cuda")
    i = torch.randint(-2**31, 2**31 - 1, (128,), device="cuda", dtype=torch.int32)
    a = torch.randint(-128, 128, (128, 16), device="cuda", dtype=torch.int8)
    b = torch.randint(-128, 128, (128, 16), device="cuda", dtype=torch.int8)
    of, oi = k(f, i, a, b)
    torch.testing.assert_close(of[0], f * f + 0.5)
    torch.testing.assert_close(of[1], f.clamp(-0.5, 0.5))
    assert oi[0].cpu().tolist() == [bin(x & 0xFFFFFFFF).count("1") for x in i.cpu().tolist()]
    torch.testing.assert_close(oi[1], (a.int() * b.int()).sum(1).int() + 7)
    torch.testing.assert_close(oi[2], i.clamp(-1000, 1000))


@pytest.mark.gpu
def test_named_barriers_pdl_and_annotations_gpu():
    torch = _torch()

    @T.prim_func
    def main(A: T.Tensor((128,), "float32"), W: T.Tensor((256,), "float32"), O: T.Tensor((128,), "float32")):
        T.annotate_min_blocks_per_sm(2)
        with T.Kernel(1, threads=128) as bx:
            T.pdl_sync()
            tx = T.get_thread_binding()
            W[tx] = A[tx] * 2
            T.sync_threads(1)
            O[tx] = W[127 - tx]
            if tx < 64:  # warps 0 and 1 meet at named barrier 2; warps 2 and 3 go on
                W[128 + tx] = A[tx] * 3
                T.sync_threads(2, 64)
                O[tx] = W[128 + 63 - tx]
            T.pdl_trigger()

    k = tilex.compile(main)
    a = torch.randn(128, device="cuda")
    w = torch.zeros(256, device="cuda")
    o = torch.zeros(128, device="cuda")
    k(a, w, o)
    want = (a * 2).flip(0)
    want[:64] = (a[:64] * 3).flip(0)
    torch.testing.assert_close(o, want)


@pytest.mark.gpu
def test_device_assert_gpu(tmp_path):
    torch = _torch()

    @T.prim_func
    def main(A: T.Tensor((64,), "int32"), B: T.Tensor((64,), "int32")):
        with T.Kernel(1, threads=64) as bx:
            tx = T.get_thread_binding()
            T.device_assert(A[tx] >= 0, "A must be non-negative")
            B[tx] = A[tx] + 1

    a = torch.arange(64, device="cuda", dtype=torch.int32)
    torch.testing.assert_close(tilex.compile(main, out_idx=[1])(a), a + 1)
    # a failing assert poisons the CUDA context: run it in a process of its own
    script = textwrap.dedent("""
        import torch, tilex, tilex.language as T

        @T.prim_func
        def main(A: T.Tensor((64,), "int32"), B: T.Tensor((64,), "int32")):
            with T.Kernel(1, threads=64) as bx:
                tx = T.get_thread_binding()
                T.device_assert(A[tx] >= 0, "A must be non-negative")
                B[tx] = A[tx] + 1

        a = torch.arange(64, device="cuda", dtype=torch.int32) - 3
        tilex.compile(main, out_idx=[1])(a)
        torch.cuda.synchronize()
    """)
    path = tmp_path / "failing_assert.py"  # (TVMScript reads the program's source from its file)
    path.write_text(script)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert "A must be non-negative" in run.stdout + run.stderr
    assert "failing_assert.py" in run.stdout + run.stderr  # the statement's location
    assert "assert" in (run.stdout + run.stderr).lower()


@pytest.mark.gpu
def test_loops_and_reshape_gpu():
    torch = _torch()

    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), B: T.Tensor((8, 8), "float32"), C: T.Tensor((4, 32), "float32")):
        with T.Kernel(1, threads=64) as bx:
            tx = T.get_thread_binding()
            A2 = T.reshape(A, (8, 8))
            B[tx % 8, tx // 8] = A2[tx // 8, tx % 8]
            if tx < 32:
                acc = T.alloc_local((4,), "float32")
                for j in T.serial(4):
                    acc[j] = 0.0
                for i in T.serial(1, 20, 3):
                    acc[0] = acc[0] + i
                for i in T.unroll(0, 16, unroll_factor=4):
                    acc[1] = acc[1] + i
                for i in T.Unroll(0, 8, 2, explicit=True):
                    acc[2] = acc[2] + i
                for i in T.Serial(5):
                    acc[3] = acc[3] + i * tx
                for j in T.serial(4):
                    C[j, tx] = acc[j]

    k = tilex.compile(main, out_idx=[1, 2])
    a = torch.randn(64, device="cuda")
    b, c = k(a)
    torch.testing.assert_close(b, a.reshape(8, 8).t())
    t = torch.arange(32, device="cuda", dtype=torch.float32)
    want = torch.stack([torch.full_like(t, sum(range(1, 20, 3))), torch.full_like(t, sum(range(16))),
                        torch.full_like(t, sum(range(0, 8, 2))), t * 10])
    torch.testing.assert_close(c, want)
