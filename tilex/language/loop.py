"""Loop constructs of tile programs: T.Parallel, T.Pipelined (T.serial/T.unroll come from TVMScript)."""
from __future__ import annotations

from tvm import tirx
from tvm.tirx.script.builder import ir as _ir

PARALLEL_MARKER = "tilex.parallel_marker"
NUM_STAGES = "tilex.num_stages"
PIPELINE_ORDER = "tilex.pipeline_order"
PIPELINE_STAGE = "tilex.pipeline_stage"


def Parallel(*extents, coalesced_width=None, loop_layout=None):
    """``for i, j in T.Parallel(M, N)``: an element-wise loop nest whose iterations are spread over the block's
    threads (the mapping comes from layout inference).

    A 1-d nest is a TVM parallel loop; an n-d nest is a grid preceded by a marker statement that the frontend
    turns into n nested parallel loops right after parsing (TVMScript's grid frame cannot carry the kind).
    """
    if not extents:
        raise ValueError("T.Parallel needs at least one extent")
    if coalesced_width is not None or loop_layout is not None:
        raise NotImplementedError("T.Parallel(coalesced_width=/loop_layout=) is not supported yet")
    if len(extents) == 1:
        return _ir.parallel(0, extents[0])
    _ir.evaluate(tirx.call_intrin("void", PARALLEL_MARKER, len(extents)))
    return _ir.grid(*extents)


def Pipelined(num_iters, num_stages=0, order=None, stage=None, sync=None, group=None, start=None):
    """``for k in T.Pipelined(n, num_stages=3)``: a serial loop whose global->shared copies are software-pipelined
    over `num_stages` shared-memory buffers (cp.async on sm80+)."""
    if group is not None or sync is not None:
        raise NotImplementedError("T.Pipelined(group=/sync=) is not supported yet")
    ann = {NUM_STAGES: int(num_stages)}
    if order is not None or stage is not None:
        import warnings

        warnings.warn("T.Pipelined(order=, stage=): tilex derives the pipeline schedule itself (copies ahead, "
                      "compute in the last stage); the explicit schedule is recorded but not used yet",
                      stacklevel=2)
    if order is not None:
        ann[PIPELINE_ORDER] = [int(x) for x in order]
    if stage is not None:
        ann[PIPELINE_STAGE] = [int(x) for x in stage]
    if start is not None:
        return _ir.serial(start, num_iters, annotations=ann)
    return _ir.serial(0, num_iters, annotations=ann)
