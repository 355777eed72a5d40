"""``tilex.cuda``: TileLang's ``tilelang.cuda`` names that tile programs import -- ``tilelang.cuda.intrinsics``:
the shared-memory swizzle layouts, the mma.sync fragment maps (``intrinsics.layout``) and the warp-level MMA
emitter ``TensorCoreIntrinEmitter`` (``intrinsics.macro``), with which a program writes its own ldmatrix /
mma.sync GEMM over per-thread registers. ``T.gemm`` needs none of this: it chooses and lowers its MMA instructions
itself."""
