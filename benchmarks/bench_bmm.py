"""Batched GEMM as TileLang users write it (a 3-d grid, ``T.copy(C_l, C[bz, by * bm, bx * bn])``) against
``torch.bmm``: the epilogue as the compiler stages it (a shared tile and rank-3 TMA stores, StageEpilogue) and
pinned to per-thread stores (``tilex.disable_staged_epilogue``). Ratios are torch time / tilex time timed call
by call in turn (bench_gemm.alternate: medians), after a 3 s warm-up.
"""
import argparse

import tilex
import tilex.language as T


def bmm(batch, M, N, K, bm=128, bn=256, bk=64, stages=3, threads=256, dtype="float16"):
    @T.prim_func
    def main(A: T.Tensor((batch, M, K), dtype), B: T.Tensor((batch, K, N), dtype),
             C: T.Tensor((batch, M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), batch, threads=threads) as (bx, by, bz):
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared((bk, bn), dtype)
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                T.copy(A[bz, by * bm, k * bk], A_s)
                T.copy(B[bz, k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[bz, by * bm, bx * bn])

    return main


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="8x2048x2048x2048,16x1024x4096x1024,4x4096x4096x4096")
    args = p.parse_args()
    import torch
    from bench_gemm import alternate, warm_up

    print(f"device: {torch.cuda.get_device_name()}")
    warm_up()
    for shape in args.shapes.split(","):
        batch, M, N, K = map(int, shape.split("x"))
        a = torch.randn(batch, M, K, device="cuda", dtype=torch.float16)
        b = torch.randn(batch, K, N, device="cuda", dtype=torch.float16)
        c = torch.empty(batch, M, N, device="cuda", dtype=torch.float16)
        ref = torch.bmm(a, b)
        runs = {"torch": lambda: torch.bmm(a, b)}
        for name, cfg in (("staged", {}), ("per-thread", {"tilex.disable_staged_epilogue": True})):
            k = tilex.compile(bmm(batch, M, N, K), pass_configs=cfg)
            k(a, b, c)
            torch.testing.assert_close(c.float(), ref.float(), atol=1e-1, rtol=1e-2)
            runs[name] = (lambda k=k: k(a, b, c))
        best = alternate(runs)
        print(f"{shape}: torch.bmm / staged {best['torch'] / best['staged']:.3f}, torch.bmm / per-thread stores "
              f"{best['torch'] / best['per-thread']:.3f}", flush=True)


if __name__ == "__main__":
    main()
