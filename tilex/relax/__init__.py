"""tilex kernels inside TVM Relax graphs: :func:`offload` (or the pass :class:`OffloadToTilex`) replaces the
operators tilex has kernels for, :func:`call_kernel` / :func:`attach_kernels` put any compiled tile program into a
module by hand, :func:`from_exported_program` imports a ``torch.export`` program in a form the offload matches.
``tvm.compile(mod, target)`` then builds the rest with TVM's pipeline and links the kernels."""
from tilex.relax.extern import attach_kernels, call_kernel, compile_extern, output_types
from tilex.relax.frontend import from_exported_program
from tilex.relax.offload import OPS, OffloadToTilex, offload

__all__ = ["offload", "OffloadToTilex", "OPS", "call_kernel", "attach_kernels", "compile_extern", "output_types",
           "from_exported_program"]
