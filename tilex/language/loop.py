"""Loop constructs of tile programs: T.Parallel, T.Pipelined (T.serial/T.unroll come from TVMScript)."""
from __future__ import annotations

from tvm import tirx
from tvm.tirx.script.builder import ir as _ir

from tilex.ir.names import NUM_STAGES, PARALLEL_MARKER, PIPELINE_ORDER, PIPELINE_STAGE


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
    over `num_stages` shared-memory buffers (cp.async on sm80+).

    An explicit schedule gives, for each top-level statement i of the loop body, the pipeline stage it runs in
    (``stage[i]``: statement i of iteration k runs together with stage-0 statements of iteration k + stage[i]) and
    its position in the steady-state loop body (``order[i]``, a permutation). The pipeline then has
    max(stage) + 1 stages (this overrides `num_stages`); InjectSoftwarePipeline checks it against the body.
    """
    if group is not None or sync is not None:
        raise NotImplementedError("T.Pipelined(group=/sync=) is not supported yet")
    ann = {NUM_STAGES: int(num_stages)}
    if order is not None:
        order = [int(x) for x in order]
        if sorted(order) != list(range(len(order))):
            raise ValueError(f"T.Pipelined(order={order}): order must be a permutation of 0..{len(order) - 1} "
                             f"(the position of each loop-body statement in the pipelined loop body)")
        ann[PIPELINE_ORDER] = order
    if stage is not None:
        stage = [int(x) for x in stage]
        if any(s < 0 for s in stage):
            raise ValueError(f"T.Pipelined(stage={stage}): stages must be >= 0")
        ann[PIPELINE_STAGE] = stage
    if order is not None and stage is not None and len(order) != len(stage):
        raise ValueError(f"T.Pipelined: order has {len(order)} entries but stage has {len(stage)}; both need one "
                         f"entry per top-level statement of the loop body")
    if start is not None:
        return _ir.serial(start, num_iters, annotations=ann)
    return _ir.serial(0, num_iters, annotations=ann)
