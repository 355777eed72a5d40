"""TileLang names and spellings that stopped its examples: ``T.import_source`` / ``T.Kernel(prelude=)`` (CUDA text
written before the kernels), ``T.Persistent`` (a persistent-tile loop), ``T.rng_init`` / ``T.rng_rand`` /
``T.rng_rand_float`` (Philox random numbers, ``src/tilex/rng.h``), ``T.alloc_fragment(..., scope="local")``,
``T.ptr`` / ``T.make_tensor`` (pointer tables), ``tilex.language.fp8``, ``tilex.cuda.intrinsics``, the private
``_TORCH_DTYPE_TO_STR``, tile operators on per-thread buffers in a multi-dimensional
thread block, ``T.thread_binding`` of a launched index, and names bound in a ``T.vectorized`` body.

CPU tests compile for sm_90a through nvcc; the ``gpu`` tests check values."""
import os
import shutil
import subprocess
import tempfile

import numpy as np
import pytest
import tvm
from tvm import tirx

import tilex
import tilex.language as T
from tilex import env
from tilex.engine import nvcc
from tilex.ir import intrin
from tilex.ir.visit import walk


def cuda(func, target="sm_90a", **kw):
    return tilex.compile(func, target=target, **kw).get_kernel_source()


def body_of(src):
    return src[src.index('extern "C"'):]


# ---- T.import_source / T.Kernel(prelude=) ----------------------------------------------------------------------------
TWICE = '''
template <typename T>
__device__ __forceinline__ void twice_into(T* out, const T* in) { out[0] = in[0] * 2; }  // "quoted" \\n text
'''


def _imports_twice(source=TWICE, in_loop=True):
    @T.prim_func
    def twice(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            T.import_source(source)
            x = T.alloc_local((1,), "float32")
            tx = T.get_thread_binding()
            for _ in T.serial(2 if in_loop else 1):
                T.import_source(source)  # a macro called in a loop imports it again: written once
                T.call_extern("void", "twice_into", T.access_ptr(x, "w"), T.access_ptr(A[tx], "r"))
            B[tx] = x[0]

    return twice


def test_imported_source_is_written_once_before_the_kernels():
    src = cuda(_imports_twice())
    assert src.count("twice_into(T* out") == 1
    assert src.index("twice_into(T* out") < src.index('extern "C" __global__')
    assert intrin.IMPORT_SOURCE not in src
    assert 'in[0] * 2; }  // "quoted" \\n text' in src  # the text as written (escapes, quotes)
    assert "twice_into((&(x_ptr[0]))" in body_of(src)


def test_imported_source_is_part_of_the_kernel_cache_key():
    other = TWICE.replace("* 2;", "* 3;")
    a, b = cuda(_imports_twice()), cuda(_imports_twice(other))
    assert "in[0] * 2;" in a and "in[0] * 3;" in b


def test_kernel_prelude_is_imported_source():
    @T.prim_func
    def with_prelude(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128, prelude=TWICE) as bx:
            x = T.alloc_local((1,), "float32")
            tx = T.get_thread_binding()
            T.call_extern("void", "twice_into", T.access_ptr(x, "w"), T.access_ptr(A[tx], "r"))
            B[tx] = x[0]

    src = cuda(with_prelude)
    assert src.count("twice_into(T* out") == 1 and src.index("twice_into(T* out") < src.index("__global__")


def test_import_source_of_nothing_does_nothing_and_bad_sources_are_type_errors():
    assert T.import_source() is None and T.import_source(None) is None
    with pytest.raises(TypeError, match="T.import_source: the source must be a str"):
        T.import_source(b"__device__ void f() {}")
    with pytest.raises(TypeError, match="prelude must be a str"):
        T.Kernel(1, threads=32, prelude=42)


def test_postprocessor_takes_the_markers_out():
    text = "#include <x>\n" + 'extern "C" __global__ void k();\nvoid body() {\n' \
        f'  {intrin.IMPORT_SOURCE}("{"int f();".encode().hex()}");\n' \
        f'  {intrin.IMPORT_SOURCE}("{"int f();".encode().hex()}");\n}}\n'
    out = nvcc.insert_imported_sources(text)
    assert out.count("int f();") == 1 and out.index("int f();") < out.index('extern "C"')
    assert intrin.IMPORT_SOURCE not in out
    with pytest.raises(nvcc.TilexCompileError, match="T.import_source"):
        nvcc.insert_imported_sources(f'extern "C" __global__ void k() {{ x = {intrin.IMPORT_SOURCE}("00"); }}\n')


# ---- T.Persistent ----------------------------------------------------------------------------------------------------
def _persistent(m_tiles, n_tiles, workers, group_size=8):
    @T.prim_func
    def tiles(C: T.Tensor((m_tiles * 16, n_tiles * 16), "float32")):
        with T.Kernel(workers, threads=128) as bid:
            for bx, by in T.Persistent([m_tiles, n_tiles], workers, bid, group_size):
                for i, j in T.Parallel(16, 16):
                    C[bx * 16 + i, by * 16 + j] = C[bx * 16 + i, by * 16 + j] + 1.0

    return tiles


def _visits(func):
    """{(wave, worker): (bx, by)} of the tiles the persistent loop of `func` runs its body for."""
    loops, launches = [], []
    walk(func.body, (tirx.For, loops.append))
    walk(func.body, (tirx.AttrStmt, lambda a: launches.append(a) if a.attr_key == "thread_extent" else None))
    wave = next(lp for lp in loops if lp.loop_var.name == "w")
    worker = next(a for a in launches if a.node.thread_tag == "blockIdx.x")
    binds, guard = wave.body.seq[:-1], wave.body.seq[-1]
    ana = tvm.sym.Analyzer()
    out = {}
    for w in range(int(wave.extent)):
        for b in range(int(worker.value)):
            env_ = {wave.loop_var: tirx.const(w, "int32"), worker.node.var: tirx.const(b, "int32")}
            for bind in binds:
                env_[bind.var] = ana.simplify(tirx.stmt_functor.substitute(bind.value, env_)
                                              if hasattr(tirx, "stmt_functor") else _subst(bind.value, env_))
            if bool(ana.simplify(_subst(guard.condition, env_))):
                out[(w, b)] = tuple(int(env_[bind.var]) for bind in binds)
    return out


def _subst(expr, mapping):
    from tilex.ir.visit import substitute

    return substitute(expr, mapping)


@pytest.mark.parametrize("m,n,workers,group", [(8, 8, 132, 8), (5, 13, 4, 8), (6, 20, 7, 3), (3, 2, 2, 1),
                                               (4, 4, 3, 100)])
def test_persistent_visits_every_tile_once_in_grouped_order(m, n, workers, group):
    visits = _visits(_persistent(m, n, workers, group))
    assert sorted(visits.values()) == [(i, j) for i in range(m) for j in range(n)]
    g = max(1, min(group, n))
    for (w, b), (bx, by) in visits.items():  # tile t = w * workers + b, grouped by g along the last dimension
        t = w * workers + b
        assert (bx, by) == (t // g % m, t // g // m * g + t % g)


def test_persistent_gemm_compiles():
    M = N = 512
    K, bm, bn, bk = 256, 128, 128, 64

    @T.prim_func
    def gemm(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(6, threads=256) as bid:
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_l = T.alloc_fragment((bm, bn), "float32")
            for bx, by in T.Persistent([T.ceildiv(M, bm), T.ceildiv(N, bn)], 6, bid):
                T.clear(C_l)
                for k in T.Pipelined(K // bk, num_stages=2):
                    T.copy(A[bx * bm, k * bk], A_s)
                    T.copy(B[k * bk, by * bn], B_s)
                    T.gemm(A_s, B_s, C_l)
                T.copy(C_l, C[bx * bm, by * bn])

    src = body_of(cuda(gemm))
    # its tiles are independent: compiled as the grid it walks (transform/grid_from_persistent.py), warp-specialized
    assert "tma_load" in src and "for (int w = 0;" not in src


def test_tile_scheduler_classes_are_refused_by_name():
    with pytest.raises(NotImplementedError, match="T.PersistentTileScheduler is not supported.*T.Persistent"):
        T.PersistentTileScheduler  # noqa: B018


def test_persistent_arguments_are_checked():
    with pytest.raises(TypeError, match="T.Persistent: domain must be a non-empty list"):
        T.Persistent([], 4, 0)
    with pytest.raises(ValueError, match="wave_size must be >= 1"):
        T.Persistent([4, 4], 0, 0)
    with pytest.raises(TypeError, match="index must be an int or an integer expression"):
        T.Persistent([4, 4], 4, 1.5)


# ---- T.rng_init / T.rng_rand / T.rng_rand_float ---------------------------------------------------------------------
_M0, _M1, _K0, _K1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
_MASK = 0xFFFFFFFF


def philox(ctr, key):
    """Philox4x32-10 of four counter words under two key words (the reference)."""
    c, k = list(ctr), list(key)
    for _ in range(10):
        p0, p1 = _M0 * c[0], _M1 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 & _MASK, (p0 >> 32) ^ c[3] ^ k[1], p0 & _MASK]
        k = [(k[0] + _K0) & _MASK, (k[1] + _K1) & _MASK]
    return c


def curand_stream(seed, seq, off, n):
    """cuRAND's Philox4_32_10 outputs `off`, `off` + 1, ... of subsequence `seq` of `seed`."""
    ctr, at, out = ((seq << 64) + off // 4) % (1 << 128), off % 4, []
    key = [seed & _MASK, (seed >> 32) & _MASK]
    while len(out) < n:
        out += philox([(ctr >> (32 * i)) & _MASK for i in range(4)], key)[at:]
        at, ctr = 0, (ctr + 1) % (1 << 128)
    return out[:n]


def test_philox_reference_matches_the_published_known_answers():
    assert philox([0] * 4, [0, 0]) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    assert philox([_MASK] * 4, [_MASK] * 2) == [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]
    assert philox([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0]) == \
        [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]


_HOST_SHIM = r'''
#define __device__
#define __forceinline__ inline
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
static inline uint32_t __umulhi(uint32_t a, uint32_t b) { return (uint32_t)(((uint64_t)a * b) >> 32); }
#define __sincosf(x, s, c) (*(s) = sinf(x), *(c) = cosf(x))
static inline void sincospi(double x, double* s, double* c) { *s = sin(M_PI * x); *c = cos(M_PI * x); }
#include "tilex/rng.h"
int main(int argc, char** argv) {
  uint32_t st[tilex::RNG_STATE_WORDS];
  tilex::rng_init(st, strtoull(argv[1], 0, 10), strtoull(argv[2], 0, 10), strtoull(argv[3], 0, 10));
  for (int i = 0; i < atoi(argv[4]); ++i) printf("%u\n", tilex::rng_rand(st));
  printf("%.9g\n", tilex::rng_uniform(st));
  printf("%.17g\n", tilex::rng_uniform_double(st));
  printf("%.9g\n", tilex::rng_normal(st));
  printf("%.9g\n", tilex::rng_normal(st));
  return 0;
}
'''


@pytest.fixture(scope="module")
def rng_host_binary():
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    tmp = tempfile.mkdtemp(prefix="tilex_rng_")
    src, exe = os.path.join(tmp, "rng.cc"), os.path.join(tmp, "rng")
    with open(src, "w") as f:
        f.write(_HOST_SHIM)
    subprocess.run([cxx, "-std=c++17", "-O1", f"-I{env.include_dir()}", src, "-o", exe], check=True)
    yield exe
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.parametrize("seed,seq,off", [(42, 0, 0), (42, 0, 128), (7, 3, 5), (2**40 + 9, 2**33 + 1, 2**34 + 3),
                                          (0, 0, 2**64 - 2), (123, 2**64 - 1, 7)])
def test_rng_header_is_curands_philox_stream(rng_host_binary, seed, seq, off):
    n = 11
    out = subprocess.run([rng_host_binary, str(seed), str(seq), str(off), str(n)], check=True, capture_output=True,
                         text=True).stdout.split()
    ref = curand_stream(seed, seq, off, n + 1 + 2 + 4)
    assert [int(x) for x in out[:n]] == ref[:n]
    k = np.float32(2.3283064e-10)
    assert float(out[n]) == pytest.approx(float(np.float32(ref[n]) * k + k / np.float32(2)), rel=1e-7)
    z = ref[n + 1] ^ (ref[n + 2] << 21)
    assert float(out[n + 1]) == pytest.approx(z * 2.0**-53 + 2.0**-54, rel=1e-15)
    u = np.float32(ref[n + 3]) * k + k / np.float32(2)
    v = np.float32(ref[n + 4]) * np.float32(2.3283064e-10 * 6.2831855) + np.float32(2.3283064e-10 * 6.2831855) / 2
    r = np.sqrt(-2.0 * np.log(np.float64(u)))
    assert float(out[n + 2]) == pytest.approx(r * np.sin(np.float64(v)), rel=1e-5, abs=1e-6)
    assert float(out[n + 3]) == pytest.approx(r * np.cos(np.float64(v)), rel=1e-5, abs=1e-6)  # the kept half


def _random_program(M=1024, per=128, threads=1, seed=42):
    @T.prim_func
    def rand(A: T.Tensor((M,), "uint32"), U: T.Tensor((M,), "float32"), D: T.Tensor((M,), "float64")):
        with T.Kernel(T.ceildiv(M, threads * per), threads=threads) as bx:
            tx = T.get_thread_binding()
            T.rng_init(seed, 0, bx * per * threads + tx * per)
            for i, j in T.Parallel(threads, per):
                idx = (bx * threads + i) * per + j
                if idx < M:
                    A[idx] = T.rng_rand()
            T.rng_init(seed, bx * threads + tx)
            for j in T.serial(per):
                U[(bx * threads + tx) * per + j] = T.rng_rand_float()
                D[(bx * threads + tx) * per + j] = T.rng_rand_float(64, "normal")

    return rand


def test_random_numbers_compile_to_the_header_functions():
    src = body_of(cuda(_random_program()))
    assert "uint rng_state_ptr[16];" in src and "uint rng_state_ptr_1[16];" in src
    assert "tilex::rng_init((&(rng_state_ptr[0])), (uint64_t)42ULL, (uint64_t)0ULL" in src
    # each element draws its own number: the store of a call is not widened into one value broadcast to 4 lanes
    assert "= tilex::rng_rand((&(rng_state_ptr[0])));" in src and "make_uint4(tilex::rng_rand" not in src
    assert "tilex::rng_init((&(rng_state_ptr_1[0])), (uint64_t)42ULL, ((int)blockIdx.x), (uint64_t)0ULL);" in src
    assert "tilex::rng_uniform((&(rng_state_ptr_1[0])))" in src
    assert "tilex::rng_normal_double((&(rng_state_ptr_1[0])))" in src


def test_random_number_errors():
    with pytest.raises(NotImplementedError, match="curandStateXORWOW_t"):
        T.rng_init(1, 0, 0, "curandStateXORWOW_t")
    with pytest.raises(ValueError, match="unknown generator"):
        T.rng_init(1, 0, 0, "mt19937")

    def draw_first():
        @T.prim_func
        def f(A: T.Tensor((32,), "uint32")):
            with T.Kernel(1, threads=32) as bx:
                A[T.get_thread_binding()] = T.rng_rand()

    with pytest.raises(ValueError, match="T.rng_rand\\(\\) draws from the generator of a T.rng_init"):
        draw_first()

    def bad_float():
        @T.prim_func
        def f(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                T.rng_init(1)
                A[T.get_thread_binding()] = T.rng_rand_float(16)

    with pytest.raises(ValueError, match="bit must be 32 or 64"):
        bad_float()


# ---- T.alloc_fragment(scope=...) -------------------------------------------------------------------------------------
def test_alloc_fragment_in_the_local_scope_is_a_per_thread_buffer():
    @T.prim_func
    def counter(A: T.Tensor((128,), "int32")):
        with T.Kernel(1, threads=128) as bx:
            start = T.alloc_fragment((1,), T.int32, "local")
            start[0] = bx * 7
            while start[0] < 20:
                start[0] = start[0] + 3
            A[T.get_thread_binding()] = start[0]

    assert "start: T.int32" in counter.script() and "local.fragment" not in counter.script()
    assert "int start_ptr[1];" in body_of(cuda(counter))


def test_alloc_fragment_scopes():
    @T.prim_func
    def shared_one(A: T.Tensor((128,), "float16")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_fragment((128,), "float16", "shared.dyn")
            T.copy(A, s)
            T.copy(s, A)

    assert 'scope="shared.dyn"' in shared_one.script()
    with pytest.raises(NotImplementedError, match="scope"):
        @T.prim_func
        def bad(A: T.Tensor((128,), "float16")):
            with T.Kernel(1, threads=128) as bx:
                T.alloc_fragment((128,), "float16", "global")


# ---- T.ptr / T.make_tensor -------------------------------------------------------------------------------------------
def _pointer_table(groups=3, n=256):
    @T.prim_func
    def gather(ptrs: T.Tensor([groups], T.ptr), out: T.Tensor((groups, n), "float16")):
        with T.Kernel(groups, threads=128) as bx:
            src = T.make_tensor(ptrs[bx], (n,), T.float16)
            s = T.alloc_shared((n,), "float16")
            f = T.alloc_fragment((n,), "float16")
            T.copy(src, s)
            T.copy(s, f)
            for i in T.Parallel(n):
                f[i] = f[i] * T.float16(2)
            T.copy(f, out[bx, 0])

    return gather


def test_pointer_table_tensors():
    func = _pointer_table()
    assert 'ptrs: T.Buffer((3,), "int64")' in func.script()  # T.Tensor([n], T.ptr): addresses stored as int64
    src = body_of(cuda(func))
    assert "int64_t* __restrict__ ptrs_ptr" in src
    assert "half* tensor_ptr = (half*)((half*)ptrs_ptr[((int)blockIdx.x)]);" in src


def test_compile_takes_tilelangs_backend_arguments():
    k = tilex.compile(_pointer_table(), target="sm_90a", execution_backend="auto", target_host=None, verbose=False)
    assert "__global__" in k.get_kernel_source()
    with pytest.raises(NotImplementedError, match="execution_backend='cython'"):
        tilex.compile(_pointer_table(), target="sm_90a", execution_backend="cython")


def test_make_tensor_errors_and_ptr():
    assert T.ptr("float16").dtype == "handle"
    with pytest.raises(ValueError, match="only valid in a program body"):
        T.make_tensor(tirx.Var("a", "int64"), (4,), T.float16)
    with pytest.raises(NotImplementedError, match="is_size_var"):
        T.ptr(is_size_var=True)

    def float_address():
        @T.prim_func
        def f(P: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                T.make_tensor(P[0], (4,), T.float16)

    with pytest.raises(TypeError, match="an address is a 64-bit integer"):
        float_address()


# ---- tilex.language.fp8, tilex.cuda.intrinsics, _TORCH_DTYPE_TO_STR ----------------------------------------------
def test_fp8_types_of_the_platform():
    from tilex.language.fp8 import determine_fp8_type, determine_torch_fp8_type

    assert determine_fp8_type() == T.float8_e4m3fn and determine_fp8_type("e5m2") == T.float8_e5m2
    with pytest.raises(ValueError, match="Unsupported FP8 format"):
        determine_fp8_type("e3m4")
    torch = pytest.importorskip("torch")
    assert determine_torch_fp8_type("e5m2") is torch.float8_e5m2


def test_mma_swizzle_layout():
    from tilex.cuda.intrinsics import get_swizzle_layout, make_mma_swizzle_layout

    buf = tirx.decl_buffer((32, 64), "float16", name="s")
    i, j = np.meshgrid(np.arange(32), np.arange(64), indexing="ij")
    group, row, col = make_mma_swizzle_layout(buf).map_numpy(i, j)
    # 128-byte rows: eight 16-byte chunks, chunk c of row r stored at chunk c ^ (r % 8)
    assert (group == 0).all() and (row == i).all() and (col == ((j // 8) ^ (i % 8)) * 8 + j % 8).all()
    assert len(set(zip(row.ravel().tolist(), col.ravel().tolist()))) == 32 * 64
    assert get_swizzle_layout(5, 9, 32, "float16") == (0, 5, ((1 ^ (5 % 8 // 2)) * 8) + 1)  # 64-byte rows
    narrow = make_mma_swizzle_layout(tirx.decl_buffer((16, 8), "float16", name="n"))  # 16-byte rows: identity
    assert [int(x) for x in narrow.map([3, 5])] == [3, 5]
    wide = make_mma_swizzle_layout(tirx.decl_buffer((8, 128), "float16", name="w"))  # 256-byte rows: two groups
    g, _, c = wide.map_numpy(np.array([3]), np.array([70]))
    assert (int(g[0]), int(c[0])) == (1, ((70 % 64 // 8) ^ 3) * 8 + 70 % 8)


def test_mma_swizzle_layout_annotates_a_gemm_operand():
    from tilex.cuda.intrinsics import make_mma_swizzle_layout

    @T.prim_func
    def gemm(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 64), "float16")
            B_s = T.alloc_shared((64, 64), "float16")
            C_l = T.alloc_fragment((64, 64), "float32")
            T.annotate_layout({A_s: make_mma_swizzle_layout(A_s)})
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_l, clear_accum=True)
            T.copy(C_l, C)

    assert "__global__" in cuda(gemm, pass_configs={"tilex.disable_wgmma": True})


def test_torch_dtype_table_and_sparse_metadata():
    torch = pytest.importorskip("torch")
    from tilex.cuda.intrinsics.sparse_layout import get_e_factor, get_e_replicate_factor
    from tilex.language.dtypes import _TORCH_DTYPE_TO_STR  # TileLang's private name, imported by its examples

    assert _TORCH_DTYPE_TO_STR[torch.half] == "float16" and _TORCH_DTYPE_TO_STR[torch.float8_e4m3fn] == "float8_e4m3fn"
    assert _TORCH_DTYPE_TO_STR[torch.long] == "int64" and _TORCH_DTYPE_TO_STR[torch.bfloat16] == "bfloat16"
    assert get_e_factor(T.float16, T.int16) == 16 and get_e_factor("float32", "int32") == 16
    assert get_e_factor(T.int8, T.int8) == 8 and get_e_replicate_factor(T.int8) == 1
    assert get_e_replicate_factor(T.bfloat16) == 2
    with pytest.raises(ValueError, match="no structured-sparsity format"):
        get_e_factor("int32", "int16")


# ---- multi-dimensional thread blocks ---------------------------------------------------------------------------------
def _splitk_gemv(N=256, K=1024, bn=8, rt=32):
    tile_k = K // rt

    @T.prim_func
    def gemv(A: T.Tensor((K,), "float16"), B: T.Tensor((N, K), "float16"), C: T.Tensor((N,), "float32")):
        with T.Kernel(N // bn, threads=(bn, rt)) as bx:
            a = T.alloc_local((tile_k,), "float16")
            b = T.alloc_local((tile_k,), "float16")
            acc = T.alloc_local((1,), "float32")
            red = T.alloc_local((1,), "float32")
            tn = T.thread_binding(0, bn, thread="threadIdx.x")
            tk = T.thread_binding(0, rt, thread="threadIdx.y")
            T.clear(acc)
            T.copy(A[tk * tile_k], a)
            T.copy(B[bx * bn + tn, tk * tile_k], b)
            for k in T.serial(tile_k):
                acc[0] += T.Cast("float32", a[k]) * T.Cast("float32", b[k])
            with T.attr(T.comm_reducer(lambda x, y: x + y, [T.float32(0)]), "reduce_scope",
                        T.reinterpret(T.uint64(0), dtype="handle")):
                T.evaluate(T.tvm_thread_allreduce(T.uint32(1), acc[0], True, red[0], tk, dtype="handle"))
            if tk == 0:
                C[bx * bn + tn] = red[0]

    return gemv


def test_per_thread_tile_operators_in_a_two_dimensional_block():
    src = body_of(cuda(_splitk_gemv()))
    # per-thread fills and copies; the thread-index loops are the launched indices, reduced over threadIdx.y
    assert "acc_ptr[0] = 0x0p+0f" in src and "a_ptr[cl0] = A_ptr[((((int)threadIdx.y) * 32) + cl0)];" in src
    assert "red_buf0_ptr" in src and "if (((int)threadIdx.y) == 0) {" in src


def test_tile_operators_that_spread_a_tile_still_need_a_one_dimensional_block():
    @T.prim_func
    def spread(A: T.Tensor((32, 64), "float32"), B: T.Tensor((32, 64), "float32")):
        with T.Kernel(1, threads=(32, 4)) as bx:
            f = T.alloc_fragment((32, 64), "float32")
            T.copy(A, f)
            T.copy(f, B)

    with pytest.raises(ValueError, match=r"1-d thread block.*threads=\(32, 4\).*T.copy"):
        tilex.compile(spread, target="sm_90a")


def test_thread_binding_of_another_range_stays_a_loop():
    @T.prim_func
    def f(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            for t in T.thread_binding(0, 32, thread="threadIdx.x"):
                A[t] = 1.0

    loops = []
    walk(f.body, (tirx.For, loops.append))
    assert any(lp.kind == tirx.ForKind.THREAD_BINDING for lp in loops)


# ---- names assigned in a T.vectorized body ---------------------------------------------------------------------------
def _vector_index(n=2048):
    @T.prim_func
    def scatter(A: T.Tensor((n,), "float16"), B: T.Tensor((n // 64, 64), "float16")):
        with T.Kernel(1, threads=256) as bx:
            loc = T.alloc_local((8,), "float16")
            tx = T.get_thread_binding()
            for v in T.vectorized(8):
                loc[v] = A[tx * 8 + v]
            for v in T.vectorized(8):
                index = tx * 8 + v
                B[index // 64, index % 64] = loc[v]

    return scatter


def test_a_name_bound_in_a_vectorized_loop_widens_with_it():
    func = _vector_index()
    assert "T.alloc_local((1,)" not in func.script()  # no one-element scalar written lane by lane
    src = body_of(cuda(func))
    assert "*(uint4*)(B_ptr + (((int)threadIdx.x) * 8)) = *(uint4*)(loc_ptr + 0);" in src


def test_names_outside_vectorized_loops_keep_tvmscripts_binding():
    @T.prim_func
    def f(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.get_thread_binding() * 2
            x = x + 1
            A[T.get_thread_binding()] = T.Cast("float32", x)

    assert "x: T.int32" in f.script() or "x = T.alloc_local" in f.script() or "x[0]" in f.script()


# ---- GPU values ------------------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_imported_device_function_runs():
    torch = pytest.importorskip("torch")
    a = torch.randn(128, device="cuda")
    b = torch.zeros(128, device="cuda")
    tilex.compile(_imports_twice())(a, b)
    torch.testing.assert_close(b, a * 2)


@pytest.mark.gpu
def test_persistent_loop_covers_every_tile():
    torch = pytest.importorskip("torch")
    c = torch.zeros(5 * 16, 13 * 16, device="cuda")
    tilex.compile(_persistent(5, 13, 4))(c)
    assert torch.equal(c, torch.ones_like(c))


@pytest.mark.gpu
def test_random_numbers_are_curands_philox():
    torch = pytest.importorskip("torch")
    M, per = 1024, 128
    a = torch.zeros(M, dtype=torch.uint32, device="cuda")
    u = torch.zeros(M, device="cuda")
    d = torch.zeros(M, dtype=torch.float64, device="cuda")
    tilex.compile(_random_program(M, per))(a, u, d)
    ref = [x for b in range(M // per) for x in curand_stream(42, 0, b * per, per)]
    assert a.cpu().to(torch.int64).tolist() == ref
    k = np.float32(2.3283064e-10)
    ref_u = []
    for b in range(M // per):  # per element: one uniform draw, then a normal double (four draws, every other call)
        stream, at = curand_stream(42, b, 0, 3 * per), 0
        for j in range(per):
            ref_u.append(np.float32(stream[at]) * k + k / np.float32(2))
            at += 1 + (4 if j % 2 == 0 else 0)
    torch.testing.assert_close(u.cpu(), torch.tensor(np.array(ref_u, dtype=np.float32)), rtol=1e-6, atol=0)
    assert 0 < float(u.min()) and float(u.max()) <= 1 and abs(float(d.mean())) < 0.2


@pytest.mark.gpu
def test_pointer_table_reads_each_tensor():
    torch = pytest.importorskip("torch")
    xs = [torch.randn(256, device="cuda", dtype=torch.float16) for _ in range(3)]
    ptrs = torch.tensor([x.data_ptr() for x in xs], dtype=torch.int64, device="cuda")
    out = torch.zeros(3, 256, device="cuda", dtype=torch.float16)
    tilex.compile(_pointer_table())(ptrs, out)
    torch.testing.assert_close(out, torch.stack(xs) * 2)


@pytest.mark.gpu
def test_two_dimensional_block_gemv():
    torch = pytest.importorskip("torch")
    a = torch.randn(1024, device="cuda", dtype=torch.float16)
    b = torch.randn(256, 1024, device="cuda", dtype=torch.float16)
    c = torch.zeros(256, device="cuda")
    tilex.compile(_splitk_gemv())(a, b, c)
    torch.testing.assert_close(c, b.float() @ a.float(), rtol=1e-3, atol=1e-2)


@pytest.mark.gpu
def test_vectorized_index_scatter():
    torch = pytest.importorskip("torch")
    a = torch.randn(2048, device="cuda", dtype=torch.float16)
    b = torch.zeros(32, 64, device="cuda", dtype=torch.float16)
    tilex.compile(_vector_index())(a, b)
    assert torch.equal(b.flatten(), a)
