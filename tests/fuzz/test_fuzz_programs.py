"""Random TileLang-style programs: each compiles (TVM codegen and nvcc) or is refused with a tilex error, never a
TVM internal error or a crash; on a GPU each compiled one matches torch.

The programs come from a seeded generator (GEMMs with random tiles, stages, threads, dtypes, transposes and ragged
shapes; element-wise tiles through fragments or shared memory; row reductions; softmax / RMSNorm). The default
run draws ``TILEX_FUZZ_N`` programs (24); ``TILEX_FUZZ_N=200`` is the full run. ``TILEX_FUZZ_LOG=<file>`` appends
one JSON line per program (its parameters and outcome) for counting.
"""
import json
import os
import random

import pytest
import torch

import tilex
import tilex.language as T
from tilex.engine.nvcc import TilexCompileError
from tilex.kernels.gemm import matmul
from tilex.kernels.norms import rmsnorm_kernel
from tilex.kernels.softmax import softmax_kernel
from tilex.layout import LayoutError
from tilex.op.base import LayoutConflictError, TileOpError

COUNT = int(os.environ.get("TILEX_FUZZ_N", "24"))
SEED = int(os.environ.get("TILEX_FUZZ_SEED", "1123"))
GPU = torch.cuda.is_available()

#: What a refused program may raise: tilex's own errors, or a plain ValueError / TypeError / NotImplementedError
#: raised by tilex code (checked by the innermost frame's file).
TILEX_ERRORS = (TileOpError, LayoutConflictError, LayoutError)
PLAIN_ERRORS = (ValueError, TypeError, NotImplementedError)
TILEX_DIR = os.path.dirname(os.path.abspath(tilex.__file__))


def _gemm(rng):
    dtype = rng.choice(["float16", "bfloat16"])
    M, N, K = (rng.choice([64, 128, 256, 200, 384, 1000]) for _ in range(3))
    p = dict(bm=rng.choice([64, 128]), bn=rng.choice([64, 128, 256]), bk=rng.choice([32, 64]),
             num_stages=rng.choice([1, 2, 3, 4]), threads=rng.choice([128, 256]), dtype=dtype,
             trans_a=rng.random() < 0.3, trans_b=rng.random() < 0.3, stage_c=rng.random() < 0.4)
    params = dict(family="gemm", M=M, N=N, K=K, **p)

    def inputs():
        a = torch.randn(*((K, M) if p["trans_a"] else (M, K)), device="cuda").to(getattr(torch, dtype))
        b = torch.randn(*((N, K) if p["trans_b"] else (K, N)), device="cuda").to(getattr(torch, dtype))
        return a, b

    def ref(a, b):
        aa = a.float().t() if p["trans_a"] else a.float()
        bb = b.float().t() if p["trans_b"] else b.float()
        return aa @ bb

    return params, lambda: matmul(M, N, K, **p), [2], inputs, ref, 2e-2 * K ** 0.5


def _elementwise(rng):
    dtype = rng.choice(["float16", "float32"])
    M, N = rng.choice([64, 100, 256, 1000]), rng.choice([64, 96, 256, 1000])
    bm, bn = rng.choice([16, 32, 64]), rng.choice([32, 64, 128])
    threads = rng.choice([64, 128, 256])
    through_shared, op = rng.random() < 0.5, rng.choice(["axpb", "relu"])
    params = dict(family="elementwise", M=M, N=N, bm=bm, bn=bn, threads=threads, dtype=dtype,
                  through_shared=through_shared, op=op)

    def build():
        @T.prim_func
        def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
            with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
                A_l = T.alloc_fragment((bm, bn), dtype)
                if through_shared:
                    A_s = T.alloc_shared((bm, bn), dtype)
                    T.copy(A[by * bm, bx * bn], A_s)
                    T.copy(A_s, A_l)
                else:
                    T.copy(A[by * bm, bx * bn], A_l)
                for i, j in T.Parallel(bm, bn):
                    if op == "axpb":
                        A_l[i, j] = A_l[i, j] * T.cast(2, dtype) + T.cast(1, dtype)
                    else:
                        A_l[i, j] = T.max(A_l[i, j], T.cast(0, dtype))
                T.copy(A_l, B[by * bm, bx * bn])

        return main

    def inputs():
        return (torch.randn(M, N, device="cuda").to(getattr(torch, dtype)),)

    def ref(a):
        return a.float() * 2 + 1 if op == "axpb" else torch.relu(a.float())

    return params, build, [1], inputs, ref, 1e-2


def _reduce(rng):
    M, N = rng.choice([64, 100, 512, 1000]), rng.choice([64, 128, 256, 512])
    bm, threads, kind = rng.choice([1, 2, 4, 8, 16]), rng.choice([64, 128, 256]), rng.choice(["sum", "max"])
    params = dict(family="reduce", M=M, N=N, bm=bm, threads=threads, kind=kind)

    def build():
        @T.prim_func
        def main(A: T.Tensor((M, N), "float32"), S: T.Tensor((M,), "float32")):
            with T.Kernel(T.ceildiv(M, bm), threads=threads) as bx:
                A_l = T.alloc_fragment((bm, N), "float32")
                S_l = T.alloc_fragment((bm,), "float32")
                T.copy(A[bx * bm, 0], A_l)
                if kind == "sum":
                    T.reduce_sum(A_l, S_l, dim=1)
                else:
                    T.reduce_max(A_l, S_l, dim=1)
                T.copy(S_l, S[bx * bm])

        return main

    def inputs():
        return (torch.randn(M, N, device="cuda"),)

    def ref(a):
        return a.sum(1) if kind == "sum" else a.amax(1)

    return params, build, [1], inputs, ref, 1e-3 * N ** 0.5


def _row_kernel(rng):
    which = rng.choice(["softmax", "rmsnorm"])
    M, N = rng.choice([64, 100, 1024]), rng.choice([256, 1024, 4096])
    bm, threads = rng.choice([1, 2]), rng.choice([128, 256, 512])
    params = dict(family=which, M=M, N=N, bm=bm, threads=threads)
    if which == "softmax":
        return (params, lambda: softmax_kernel(M, N, bm=bm, threads=threads), [1],
                lambda: (torch.randn(M, N, device="cuda", dtype=torch.float16),),
                lambda x: torch.softmax(x.float(), 1), 1e-2)
    return (params, lambda: rmsnorm_kernel(M, N, bm=bm, threads=threads), [2],
            lambda: (torch.randn(M, N, device="cuda", dtype=torch.float16),
                     torch.randn(N, device="cuda", dtype=torch.float16)),
            lambda x, w: torch.nn.functional.rms_norm(x.float(), (N,), w.float(), eps=1e-6), 2e-2)


FAMILIES = [_gemm, _gemm, _elementwise, _reduce, _row_kernel]


def program(i):
    rng = random.Random(SEED * 100003 + i)
    return rng.choice(FAMILIES)(rng)


def _is_tilex_error(e):
    if isinstance(e, TILEX_ERRORS):
        return True
    if type(e) in PLAIN_ERRORS:
        tb = e.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        return tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(TILEX_DIR)
    return False


def _log(record):
    path = os.environ.get("TILEX_FUZZ_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")


@pytest.mark.parametrize("i", range(COUNT))
def test_random_program(i):
    params, build, out_idx, inputs, ref, tol = program(i)
    record = {"i": i, **params}
    try:
        kernel = tilex.compile(build(), out_idx=out_idx)  # runs nvcc, with or without a GPU
    except TilexCompileError as e:
        _log({**record, "outcome": "nvcc_rejected"})
        pytest.fail(f"nvcc rejected the CUDA tilex generated for {params}: {str(e).splitlines()[0]}")
    except Exception as e:  # noqa: BLE001 - classified below
        if _is_tilex_error(e):
            _log({**record, "outcome": "rejected", "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"})
            return
        _log({**record, "outcome": "internal_error", "error": f"{type(e).__name__}: {str(e)[:300]}"})
        raise AssertionError(f"{params}: not a tilex error: {type(e).__name__}: {e}") from e
    assert kernel.resources is not None, "tilex.compile did not run nvcc (is it installed?)"
    if not GPU:
        _log({**record, "outcome": "compiled"})
        return
    args = inputs()
    out = kernel(*args)
    expected = ref(*args)
    try:
        torch.testing.assert_close(out.float(), expected, atol=tol, rtol=tol)
    except AssertionError:
        _log({**record, "outcome": "mismatch"})
        raise
    _log({**record, "outcome": "matched"})
