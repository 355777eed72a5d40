"""Ready-made tile programs written in tilex.language, used by the examples, benchmarks and tests: each factory
takes the problem shape and tile parameters and returns a `T.prim_func` to pass to `tilex.compile`.
`tilex.kernels.gemm` has `matmul` (pipelined tensor-core GEMM), `matmul_splitk` and `matmul_swap_ab`;
`tilex.kernels.softmax` has `softmax_kernel`; `tilex.kernels.norms` has `rmsnorm_kernel` and `layernorm_kernel`.
"""
