"""tilex kernels inside TVM Relax graphs: :func:`offload` (or the pass :class:`OffloadToTilex`) replaces the
operators tilex has kernels for, :func:`call_kernel` / :func:`attach_kernels` put any compiled tile program into a
module by hand. ``tvm.compile(mod, target)`` then builds the rest with TVM's pipeline and links the kernels."""
from tilex.relax.extern import attach_kernels, call_kernel, compile_extern, output_types
from tilex.relax.offload import OPS, OffloadToTilex, offload

__all__ = ["offload", "OffloadToTilex", "OPS", "call_kernel", "attach_kernels", "compile_extern", "output_types"]
