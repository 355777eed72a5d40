"""LowerTileOps: swizzled shared tiles stay 1 KB-aligned in the merged dynamic shared memory (every shared buffer
of a kernel that has such tiles is padded to whole KBs), and kernels without them keep their exact sizes
(generated CUDA and tile-level TIR; no GPU needed)."""
import re

import pytest
import tvm

import tilex
import tilex.language as T
from tilex.engine import lower_to_tir

SM90 = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})


def gemm_with_vector(order, M=256, N=256, K=512, bm=128, bn=128, bk=64, stages=3, vec=128):
    """C = A @ B^T + a per-iteration fp32 vector (Bias[k, rows]) loaded in the warp-specialized loop, with the
    shared buffers allocated in `order` (a permutation of "ABv"): with 3 stages the vector's staged buffer is
    3 * 512 = 1536 bytes, not a whole KB."""
    kt = K // bk
    vec_first, vec_middle = order == "vAB", order == "AvB"

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"), Bias: T.Tensor((kt, M), "float32"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(N // bn, M // bm, threads=256) as (bx, by):
            if vec_first:
                v_s = T.alloc_shared((vec,), "float32")
                A_s = T.alloc_shared((bm, bk), "float16")
                B_s = T.alloc_shared((bn, bk), "float16")
            elif vec_middle:
                A_s = T.alloc_shared((bm, bk), "float16")
                v_s = T.alloc_shared((vec,), "float32")
                B_s = T.alloc_shared((bn, bk), "float16")
            else:
                A_s = T.alloc_shared((bm, bk), "float16")
                B_s = T.alloc_shared((bn, bk), "float16")
                v_s = T.alloc_shared((vec,), "float32")
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for k in T.Pipelined(kt, num_stages=stages):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[bx * bn, k * bk], B_s)
                T.copy(Bias[k, by * bm:by * bm + vec], v_s)
                T.gemm(A_s, B_s, C_l, transpose_B=True)
                for i, j in T.Parallel(bm, bn):
                    C_l[i, j] += v_s[i]
            T.copy(C_l, C[by * bm, bx * bn])

    return main


def _eval_index(expr, stage):
    """An index expression of the CUDA with the pipeline variable(s) at `stage`, everything else at 0."""
    e = re.sub(r"\(\(int\)\w+\.[xyz]\)", "0", expr)
    e = re.sub(r"\bk(_\d+)?\b", str(stage), e)
    e = re.sub(r"\b[A-Za-z_]\w*\b", "0", e)
    e = e.replace("/", "//")
    assert re.fullmatch(r"[0-9 ()+\-*%^<>/&|]*", e), e
    return eval(e)


def _tile_offsets(src):
    """{(call, tensor map or operand position): [byte offsets at stage 0, 1, 2]} of every half-precision (swizzled
    A / B) tile address in the dynamic shared memory, from the TMA loads and the wgmma descriptors."""
    out = {}
    for line in src.splitlines():
        for call in ("tma_load_2d", "wgmma_desc"):
            if f"tilex::{call}(" not in line:
                continue
            for n, m in enumerate(re.finditer(r"\(half\*\)buf_dyn_shmem_ptr\)\[((?:[^\[\]]|\[[^\]]*\])*)\]", line)):
                tmap = re.search(r"\((\w+_tmap\d*)\)", line)
                key = (call, tmap.group(1) if call == "tma_load_2d" and tmap else f"operand{n}", line.strip()[:60])
                out[key] = [2 * _eval_index(m.group(1), s) for s in range(3)]
    return out


@pytest.mark.parametrize("order", ["ABv", "AvB"])
def test_swizzled_tiles_are_1kb_aligned(order):
    src = tilex.compile(gemm_with_vector(order), target="sm_90a").get_kernel_source()
    assert "reg_alloc" in src  # warp-specialized
    assert "__align__(1024) uchar buf_dyn_shmem_ptr[]" in src
    offsets = _tile_offsets(src)
    loads = [k for k in offsets if k[0] == "tma_load_2d"]
    descs = [k for k in offsets if k[0] == "wgmma_desc"]
    assert len(loads) == 2 and {k[1] for k in loads} == {"A_tmap0", "B_tmap1"}, offsets
    assert len(descs) >= 2, offsets
    bad = {k: v for k, v in offsets.items() if any(b % 1024 for b in v)}
    assert not bad, f"swizzled tiles off a 1 KB boundary (byte offsets at stages 0..2): {bad}"
    # the A and B tiles (3 stages of 16 KB each) do not overlap, and the vector lies outside both
    a, b = (offsets[next(k for k in loads if k[1] == t)][0] for t in ("A_tmap0", "B_tmap1"))
    assert abs(a - b) >= 3 * 16384
    vec = [line for line in src.splitlines() if "tilex::tma_load_2d(" in line and "Bias_tmap" in line]
    assert len(vec) == 1
    v0 = 4 * _eval_index(re.search(r"\(float\*\)buf_dyn_shmem_ptr\)\[([^\]]*)\]", vec[0]).group(1), 0)
    for t in (a, b):
        assert not (t <= v0 < t + 3 * 16384)


def test_vector_buffer_is_padded_to_whole_kbs():
    """The staged vector (3 x 128 fp32 = 1536 bytes) is padded to 2048 bytes, the bytes it uses recorded on its
    allocation (a placement of tilex's own packs it at its size); the tiles keep their sizes."""
    script = lower_to_tir(gemm_with_vector("ABv"), SM90, {})["main"].script()
    assert re.search(r'A_s = T\.alloc_buffer\(\(24576,\), "float16", scope="shared\.dyn"\)', script)
    assert re.search(r'B_s = T\.alloc_buffer\(\(24576,\), "float16", scope="shared\.dyn"\)', script)
    assert re.search(r'v_s = T\.alloc_buffer\(\(512,\), scope="shared\.dyn", '
                     r'annotations=\{"tilex\.used_bytes": T\.int64\(1536\)\}\)', script), script


def _plain_program():
    """No swizzled tiles: a 100-element fp32 and a 24-element fp16 shared buffer."""

    @T.prim_func
    def main(A: T.Tensor((1024, 100), "float32"), C: T.Tensor((1024,), "float32")):
        with T.Kernel(1024, threads=128) as bx:
            S = T.alloc_shared((100,), "float32")
            H = T.alloc_shared((24,), "float16")
            T.copy(A[bx, 0:100], S)
            for i in T.Parallel(24):
                H[i] = T.cast(S[i], "float16")
            for i in T.Parallel(100):
                S[i] = S[i] + T.cast(H[i % 24], "float32")
            T.copy(S[0:1], C[bx:bx + 1])

    return main


def test_no_swizzled_tiles_no_padding():
    script = lower_to_tir(_plain_program(), SM90, {})["main"].script()
    assert re.search(r'S = T\.alloc_buffer\(\(100,\), scope="shared\.dyn"\)', script), script
    assert re.search(r'H = T\.alloc_buffer\(\(24,\), "float16", scope="shared\.dyn"\)', script), script
    src = tilex.compile(_plain_program(), target="sm_90a").get_kernel_source()
    # the two buffers are packed: the fp32 one starts right after the 48 bytes of fp16 (TVM aligns it to 64)
    offs = {int(m) for m in re.findall(r"\(\(float\*\)buf_dyn_shmem_ptr\) \+ \(\(\(\(int\)threadIdx\.x\) \* 4\) \+ (\d+)\)",
                                      src)}
    offs |= {int(m) for m in re.findall(r"\(\(float\*\)buf_dyn_shmem_ptr\)\[(\d+)\]", src)}
    assert offs and all(4 * o < 1024 for o in offs), offs


def test_mbarrier_arrays_keep_their_size():
    src = tilex.compile(gemm_with_vector("ABv"), target="sm_90a").get_kernel_source()
    sizes = [int(n) for n in re.findall(r"__shared__ alignas\(\d+\) uint64_t tma_\w+_ptr\w*\[(\d+)\];", src)]
    assert sizes and all(n == 3 for n in sizes), sizes


def staged_atomic_beside_vectors():
    """A fragment added with use_tma=True (the operator stages it in a swizzled tile of its own) in a kernel whose
    declared shared buffers are small vectors, one live across the staging."""
    @T.prim_func
    def main(X: T.Tensor((4, 256, 256), "float32"), V: T.Tensor((256,), "float32"),
             C: T.Tensor((256, 256), "float32"), V2: T.Tensor((384,), "float32")):
        with T.Kernel(2, 4, 4, threads=256) as (bx, by, bz):
            v_s = T.alloc_shared((96,), "float32")
            x = T.alloc_fragment((64, 128), "float32")
            T.copy(V[0:96], v_s)
            T.copy(X[bz, by * 64, bx * 128], x)
            for i, j in T.Parallel(64, 128):
                x[i, j] += v_s[i]
            T.atomic_add(C[by * 64, bx * 128], x, use_tma=True)
            w_s = T.alloc_shared((96,), "float32")
            T.copy(V[0:96], w_s)
            for i in T.Parallel(96):
                V2[bz * 96 + i] = v_s[i] + w_s[i]

    return main


def test_tile_staged_by_an_operator_is_kb_aligned():
    src = tilex.compile(staged_atomic_beside_vectors(), target="sm_90a").get_kernel_source()
    starts = re.findall(r"tma_reduce_add_2d\(.*?buf_dyn_shmem_ptr\)\[(.*?)\]\)", src)
    assert len(starts) == 4  # one TMA box per 128-byte plane of the 128 fp32 columns
    for expr in starts:
        assert _eval_index(expr, 0) % 256 == 0, expr  # 256 floats: 1 KB


@pytest.mark.gpu
def test_tile_staged_by_an_operator_adds_correctly():
    torch = pytest.importorskip("torch")
    k = tilex.compile(staged_atomic_beside_vectors())
    x = torch.randint(-4, 5, (4, 256, 256), device="cuda").float()
    v = torch.randint(-4, 5, (256,), device="cuda").float()
    c = torch.zeros(256, 256, device="cuda")
    v2 = torch.zeros(384, device="cuda")
    k(x, v, c, v2)
    rows = v[:64].repeat(4)[:, None]  # every 64-row block adds V[0:64] once per bz
    assert torch.equal(c, x.sum(0) + 4 * rows)
    assert torch.equal(v2, (2 * v[:96]).repeat(4))
