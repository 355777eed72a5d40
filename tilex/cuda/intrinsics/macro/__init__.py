"""``tilex.cuda.intrinsics.macro``: TileLang's hand-written MMA emitters -- :class:`TensorCoreIntrinEmitter`
(:mod:`.mma_macro_generator`: ldmatrix + mma.sync + accumulator stores, written into a tile program). The other
emitters TileLang's package names (ladder-transform, SM120, sparse) raise NotImplementedError naming them."""
from tilex.cuda.intrinsics.macro.mma_macro_generator import TensorCoreIntrinEmitter, not_provided

__all__ = ["TensorCoreIntrinEmitter"]

#: TileLang's names here that tilex does not provide
NOT_PROVIDED = ("TensorCoreIntrinEmitterWithLadderTransform", "TensorCoreIntrinEmitterSM120",
                "SparseTensorCoreIntrinEmitter")


def __getattr__(name):
    if name in NOT_PROVIDED:
        raise not_provided(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
