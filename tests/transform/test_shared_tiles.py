"""KeepTilesApart / DropKeepAlive and the tile-by-tile ThreadSync: distinct shared tiles never share memory, and a
loop that reads one tile and writes another has no barrier inside."""
import os
import re
import runpy

import tilex
import tilex.language as T
from cuda_text import braced_block
from tilex.kernels.softmax import softmax_kernel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
dequant_gemm_kernel = runpy.run_path(os.path.join(ROOT, "examples", "dequantize_gemm.py"))["dequant_gemm_kernel"]


def _source(func, **kw):
    return tilex.compile(func, target="sm_90a", **kw).get_kernel_source()


def test_decode_loop_has_no_barrier():
    """The hand-written dequantizing GEMM's decode reads the packed tile and writes the decoded one: the two are
    different tiles, so no barrier runs per element (TVM's own planning put two there)."""
    src = _source(dequant_gemm_kernel(16, 256, 512, bm=16, bn=32, bk=256, stages=4), out_idx=-1)
    assert "__syncthreads" not in braced_block(src, "for (int par_it = 0;")
    assert src.count("__syncthreads()") == 2  # k loop: stage landed (RAW); decoded tile written (RAW, WAR)


def test_sequential_reductions_keep_their_workspaces():
    """Softmax's two cross-warp reductions allocate one workspace each; the merge used to give both the same
    memory. They stay apart now, and no keep_alive marker reaches the CUDA."""
    src = _source(softmax_kernel(1024, 1024), out_idx=[1])
    offsets = set(re.findall(r"\(\(float\*\)buf_dyn_shmem_ptr\)\[\(*\(\(int\)threadIdx.x\) \+ (\d+)\)\] =", src))
    assert offsets == {"256"}, offsets
    assert "keep_alive" not in src


def _two_phase(n=128):
    @T.prim_func
    def two_phase(A: T.Tensor((n, n), "float16"), B: T.Tensor((n, n), "float16"), C: T.Tensor((n, n), "float16")):
        with T.Kernel(1, threads=128) as bx:
            a_s = T.alloc_shared((n, n), "float16")
            c_s = T.alloc_shared((n, n), "float16")
            T.copy(A, a_s)
            for i, j in T.Parallel(n, n):
                B[i, j] = a_s[j, i]
            T.copy(C, c_s)
            for i, j in T.Parallel(n, n):
                C[i, j] = c_s[j, i] + T.float16(1)

    return two_phase


def test_tiles_used_one_after_the_other_do_not_alias():
    """a_s is dead once the first transpose read it and c_s is born after: the merge could overlap them, which a
    tile-by-tile ThreadSync would not see. KeepTilesApart keeps them at separate offsets."""
    src = _source(_two_phase())
    assert "dyn_shmem" in src
    lowered = tilex.compile(_two_phase(), target="sm_90a")
    assert lowered.get_kernel_source().count("__syncthreads()") >= 2
    # 2 x 128 x 128 fp16 tiles, not one
    from tilex.autotuner.smem import shared_memory_bytes
    assert shared_memory_bytes(_two_phase(), target="sm_90a") >= 2 * 128 * 128 * 2
