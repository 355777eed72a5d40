"""``tilex.cuda``: TileLang's ``tilelang.cuda`` names that tile programs import (``tilelang.cuda.intrinsics``'s
shared-memory swizzle layouts). TileLang's hand-written MMA macro generators (``tilelang.cuda.intrinsics.macro``)
are not provided: tilex's ``T.gemm`` chooses and lowers the MMA instructions itself."""
