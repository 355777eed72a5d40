"""Write the CUDA tilex generates for every benchmark and example kernel into a directory, one file per kernel.

A refactor that must not change kernels is checked by comparing two snapshots byte for byte::

    git stash; python tools/cuda_snapshot.py /tmp/before; git stash pop
    python tools/cuda_snapshot.py /tmp/after
    diff -r /tmp/before /tmp/after

Runs without a GPU (TVM code generation for sm_90a, kernel cache off). The kernels: every configuration of
benchmarks/bench_gemm.py over its --all shapes (plus a stream-K friendly one) in fp16 and bf16, the configurations of
benchmarks/bench_ops.py, and the programs of the examples.
"""
import argparse
import os
import runpy

os.environ["TILEX_DISABLE_CACHE"] = "1"

import tilex  # noqa: E402
from tilex.kernels.gemm import matmul  # noqa: E402
from tilex.kernels.norms import layernorm_kernel, rmsnorm_kernel  # noqa: E402
from tilex.kernels.softmax import softmax_kernel  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _script(*parts):
    """The globals of a repository script (its `main` is not run)."""
    return runpy.run_path(os.path.join(ROOT, *parts))


def jobs():
    """(file name, function returning the compiled kernel) for every kernel of the snapshot."""
    bg, ops = _script("benchmarks", "bench_gemm.py"), _script("benchmarks", "bench_ops.py")
    out = []
    for dtype in ("float16", "bfloat16"):
        for shape in bg["ALL_SHAPES"] + ["2048x4608x4096"]:
            M, N, K = map(int, shape.split("x"))
            for cfg in bg["CONFIGS"]:
                if bg["applies"](M, dtype, cfg):
                    name = f"bench_gemm-{shape}-{dtype}-{'_'.join(map(str, cfg))}"
                    out.append((name, lambda M=M, N=N, K=K, d=dtype, c=cfg: tilex.compile(
                        bg["program"](M, N, K, d, c), pass_configs=bg["pass_configs"](c))))
    for M, N in ops["SHAPES"]:
        for cfg in ops["CONFIGS"]:
            tag = f"{M}x{N}-bm{cfg['bm']}-t{cfg['threads']}"
            out.append((f"bench_ops-softmax-{tag}", lambda M=M, N=N, c=cfg: tilex.compile(
                softmax_kernel(M, N, **c), out_idx=[1])))
            out.append((f"bench_ops-rmsnorm-{tag}", lambda M=M, N=N, c=cfg: tilex.compile(
                rmsnorm_kernel(M, N, **c), out_idx=[2])))
    col = _script("examples", "column_sum.py")
    epi = _script("examples", "gemm_epilogue.py")
    spk = _script("examples", "splitk_gemm.py")
    tr = _script("examples", "transpose.py")
    out += [
        ("example-quickstart", lambda: tilex.compile(
            matmul(4096, 4096, 4096, bm=128, bn=256, bk=64, num_stages=3, threads=256, stage_c=True), out_idx=[2])),
        ("example-column_sum", lambda: tilex.compile(col["column_sum_kernel"](8192, 8192))),
        ("example-gemm_epilogue-relu", lambda: tilex.compile(epi["gemm_bias_act_kernel"](4096, 4096, 4096, "relu"),
                                                             out_idx=[3])),
        ("example-gemm_epilogue-gelu", lambda: tilex.compile(epi["gemm_bias_act_kernel"](4096, 4096, 4096, "gelu"),
                                                             out_idx=[3])),
        ("example-rmsnorm", lambda: tilex.compile(rmsnorm_kernel(4096, 4096), out_idx=[2])),
        ("example-layernorm", lambda: tilex.compile(layernorm_kernel(4096, 4096), out_idx=[3])),
        ("example-softmax", lambda: tilex.compile(softmax_kernel(4096, 4096), out_idx=[1])),
        ("example-splitk_gemm", lambda: tilex.compile(spk["splitk_gemm_kernel"](512, 512, 16384, 8))),
        ("example-transpose", lambda: tilex.compile(tr["transpose_kernel"](8192, 8192), out_idx=[1])),
    ]
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="directory to write <kernel>.cu files into")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    failed = 0
    todo = jobs()
    for name, build in todo:
        try:
            source = build().get_kernel_source()
        except Exception as e:  # noqa: BLE001 - a failing kernel is part of the snapshot
            source = f"// compile failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}\n"
            failed += 1
        with open(os.path.join(args.out, name + ".cu"), "w") as f:
            f.write(source)
    print(f"{len(todo)} kernels written to {args.out} ({failed} failed to compile)")


if __name__ == "__main__":
    main()
