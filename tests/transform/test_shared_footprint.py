"""The shared memory a kernel asks for: tiles nothing uses take none (KeepTilesApart drops them), small tiles padded
to whole KB beside swizzled tiles take only their own bytes when tilex places the tiles itself (shared_reuse),
thread regions included; a local variable read into a let (T.make_tensor over a pointer table) passes TVM's merge
(ScopeBindsForMerge).

CPU tests: they read the placement tilex writes and the CUDA it generates for sm_90a."""
import pytest
import tvm

import tilex
import tilex.language as T
from tilex.autotuner.smem import shared_memory_bytes
from tilex.ir.hardware import block_shared_memory_limit
from tilex.ir.names import SHARED_PLACEMENT_ATTR, SHARED_USED_BYTES

LIMIT = block_shared_memory_limit(90)  # 227 KB
TARGET = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})


def _placement(func):
    """{tile name: byte offset} KeepTilesApart planned for `func` (None: no placement of its own)."""
    from tilex.engine import lower_to_tir
    from tilex.engine.pipeline import tvm_passes

    mod = lower_to_tir(func, TARGET)
    with tvm.transform.PassContext(opt_level=3), TARGET:
        passes = tvm_passes(tvm.transform.PassContext.current().config)
        names = [str(p.info.name) for p in passes]
        planned = tvm.transform.Sequential(passes[: names.index("tilex.KeepTilesApart") + 1])(mod)["main"]
    placement = planned.attrs.get(SHARED_PLACEMENT_ATTR) if planned.attrs is not None else None
    return None if placement is None else {t.name: int(o) for t, o in placement.items()}


# ---- programs -------------------------------------------------------------------------------------------------------
def unused_tile(rows=128, with_extra=False):
    """Two tiles in use (64 KB each at the default size); a third as large as both allocated, used only where
    `with_extra` says so (as a bias tile is)."""

    @T.prim_func
    def main(A: T.Tensor((rows, 256), "float32"), B: T.Tensor((rows, 256), "float32")):
        with T.Kernel(1, threads=128) as bx:
            a_s = T.alloc_shared((rows // 2, 256), "float32")
            b_s = T.alloc_shared((rows // 2, 256), "float32")
            extra = T.alloc_shared((rows, 256), "float32")
            T.copy(A[0:rows // 2, 0:256], a_s)
            T.copy(A[rows // 2:rows, 0:256], b_s)
            if with_extra:
                T.copy(A, extra)
            for i, j in T.Parallel(rows // 2, 256):
                B[i, j] = a_s[rows // 2 - 1 - i, j] + b_s[i, j]

    return main


def regions_with_small_tiles(rows=896):
    """A 224 KB swizzled fp16 tile in one thread region and four 256-byte fp32 tiles: padded to whole KB beside
    the swizzled tile they would need 228 KB, at their own size 225 KB."""

    @T.prim_func
    def main(A: T.Tensor((rows, 128), "float16"), S: T.Tensor((4, 64), "float32"), B: T.Tensor((rows, 128), "float16"),
             D: T.Tensor((4, 64), "float32")):
        with T.Kernel(1, threads=256) as bx:
            big = T.alloc_shared((rows, 128), "float16")
            s0 = T.alloc_shared((64,), "float32")
            s1 = T.alloc_shared((64,), "float32")
            s2 = T.alloc_shared((64,), "float32")
            s3 = T.alloc_shared((64,), "float32")
            T.annotate_layout({big: tilex.layout.make_swizzled_layout(big)})
            with T.ws(0):
                T.copy(A, big)
                T.copy(S[0, 0:64], s0)
                T.copy(S[1, 0:64], s1)
                for i, j in T.Parallel(rows, 128):
                    B[i, j] = big[rows - 1 - i, j]
                for i in T.Parallel(64):
                    D[0, i] = s0[63 - i] + s1[i]
            with T.ws(1):
                T.copy(S[2, 0:64], s2)
                T.copy(S[3, 0:64], s3)
                for i in T.Parallel(64):
                    D[1, i] = s2[63 - i] * s3[i]

    return main


def pointer_table_gemm(groups=3, M=128, N=128, K=128, bm=64, bn=64, bk=64):
    """Each block multiplies the A and B of its group, found through pointer tables indexed by a T.alloc_var."""

    @T.prim_func
    def main(A_ptrs: T.Tensor([groups], T.ptr), B_ptrs: T.Tensor([groups], T.ptr), C_ptrs: T.Tensor([groups], T.ptr),
             first_tile: T.Tensor([groups], T.int32)):
        with T.Kernel(groups * (M // bm), N // bn, threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_l = T.alloc_fragment((bm, bn), "float32")
            g = T.alloc_var(dtype=T.int32)
            g = 0
            for i in range(groups):
                g = T.if_then_else(bx >= first_tile[i], i, g)
            m0 = (bx - first_tile[g]) * bm
            A = T.make_tensor(A_ptrs[g], (M, K), "float16")
            B = T.make_tensor(B_ptrs[g], (K, N), "float16")
            C = T.make_tensor(C_ptrs[g], (M, N), "float16")
            T.clear(C_l)
            for ko in T.Pipelined(K // bk, num_stages=1):
                T.copy(A[m0, ko * bk], A_s)
                T.copy(B[ko * bk, by * bn], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[m0, by * bn])

    return main


# ---- unused tiles ---------------------------------------------------------------------------------------------------
def test_a_tile_nothing_uses_takes_no_memory():
    assert shared_memory_bytes(unused_tile(rows=64), target="sm_90a") == 2 * 32 * 256 * 4
    assert shared_memory_bytes(unused_tile(rows=64, with_extra=True), target="sm_90a") == 4 * 32 * 256 * 4


def test_a_kernel_fits_without_its_unused_tile():
    """192 KB in use beside a 192 KB tile nothing touches: it compiles (the unused tile was counted before)."""
    src = tilex.compile(unused_tile(rows=192), target="sm_90a").get_kernel_source()
    assert "extra" not in src


# ---- placement at the tiles' own sizes ------------------------------------------------------------------------------
def test_padded_small_tiles_take_their_own_bytes_beside_a_swizzled_tile():
    prog = regions_with_small_tiles()
    placement = _placement(prog)
    assert placement is not None
    big = 896 * 128 * 2
    assert placement["big"] % 1024 == 0
    spans = sorted((o, o + (big if name == "big" else 256)) for name, o in placement.items())
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans  # side by side: never overlapping
    assert max(hi for _, hi in spans) == big + 4 * 256
    assert all(o % 256 == 0 for name, o in placement.items())
    assert shared_memory_bytes(prog, target="sm_90a") <= LIMIT


def test_lowering_records_the_bytes_a_padded_tile_uses():
    from tilex.engine import lower_to_tir

    body = lower_to_tir(regions_with_small_tiles(), TARGET)["main"].body
    used = {}

    def on_alloc(node):
        if node.annotations is not None and SHARED_USED_BYTES in node.annotations:
            used[node.buffer.name] = int(node.annotations[SHARED_USED_BYTES])

    from tilex.ir.visit import walk
    walk(body, (tvm.tirx.AllocBuffer, on_alloc))
    assert used == {"s0": 256, "s1": 256, "s2": 256, "s3": 256}


def test_regions_that_do_not_fit_packed_are_still_reported():
    with pytest.raises(ValueError) as e:
        tilex.compile(regions_with_small_tiles(rows=912), target="sm_90a")
    assert "thread regions (T.ws) of this kernel run side by side" in str(e.value)


# ---- lets reading a local variable ----------------------------------------------------------------------------------
def test_pointer_table_indexed_by_a_local_variable_compiles():
    src = tilex.compile(pointer_table_gemm(), target="sm_90a").get_kernel_source()
    assert "A_ptrs" in src and "buf_dyn_shmem" in src
    assert "extern_scope" not in src


def test_binding_scopes_are_removed_after_the_merge():
    from tilex.engine import lower_to_tir
    from tilex.engine.pipeline import tvm_passes
    from tilex.ir.visit import walk

    mod = lower_to_tir(pointer_table_gemm(), TARGET)
    with tvm.transform.PassContext(opt_level=3), TARGET:
        passes = tvm_passes(tvm.transform.PassContext.current().config)
        names = [str(p.info.name) for p in passes]
        scoped = tvm.transform.Sequential(passes[: names.index("tilex.ScopeBindsForMerge") + 1])(mod)["main"]
        done = tvm.transform.Sequential(passes[: names.index("tilex.DropKeepAlive") + 1])(mod)["main"]

    def scopes(f):
        found = []
        walk(f.body, (tvm.tirx.AttrStmt, lambda n: found.append(n) if n.attr_key == "extern_scope" else None))
        return found

    assert len(scopes(scoped)) >= 1
    assert scopes(done) == []
