"""Loop constructs of tile programs: T.Parallel, T.Pipelined (T.serial/T.unroll come from TVMScript)."""
from __future__ import annotations

from tvm import tirx
from tvm.tirx.script.builder import ir as _ir

from tilex.ir.names import NUM_STAGES, PARALLEL_MARKER, PIPELINE_ORDER, PIPELINE_STAGE
from tilex.language.options import as_bool, as_int, constant, no_annotations, positive_extents, unsupported


def Parallel(*extents, coalesced_width=None, loop_layout=None, prefer_async=None, annotations=None):
    """``for i, j in T.Parallel(M, N)``: an element-wise loop nest whose iterations are spread over the block's
    threads (the mapping comes from layout inference).

    A 1-d nest is a TVM parallel loop; an n-d nest is a grid preceded by a marker statement that the frontend
    turns into n nested parallel loops right after parsing (TVMScript's grid frame cannot carry the kind).
    Not implemented (NotImplementedError): ``coalesced_width``, ``loop_layout``, ``prefer_async=True``,
    ``annotations``.
    """
    api = "T.Parallel"
    if not extents:
        raise ValueError("T.Parallel needs at least one extent")
    positive_extents(api, "extents", extents)
    if coalesced_width is not None:
        as_int(api, "coalesced_width", coalesced_width, minimum=1)
        unsupported(api, "coalesced_width", constant(coalesced_width),
                    "the vector width comes from the loop's layout")
    if loop_layout is not None:
        unsupported(api, "loop_layout", loop_layout, "the loop's layout comes from layout inference")
    if prefer_async is not None and as_bool(api, "prefer_async", prefer_async):
        unsupported(api, "prefer_async", True)
    no_annotations(api, annotations)
    if len(extents) == 1:
        return _ir.parallel(0, extents[0])
    _ir.evaluate(tirx.call_intrin("void", PARALLEL_MARKER, len(extents)))
    return _ir.grid(*extents)


def Pipelined(start, stop=None, num_stages=0, order=None, stage=None, sync=None, group=None, annotations=None):
    """``for k in T.Pipelined(n, num_stages=3)`` (or ``T.Pipelined(lo, hi, num_stages=3)``): a serial loop whose
    global->shared copies are software-pipelined over `num_stages` shared-memory buffers (cp.async on sm80+;
    0 or 1 leaves the loop serial).

    An explicit schedule gives, for each top-level statement i of the loop body, the pipeline stage it runs in
    (``stage[i]``: statement i of iteration k runs together with stage-0 statements of iteration k + stage[i]) and
    its position in the steady-state loop body (``order[i]``, a permutation). The pipeline then has
    max(stage) + 1 stages (this overrides `num_stages`); InjectSoftwarePipeline checks it against the body.
    Not implemented (NotImplementedError): ``sync``, ``group``, ``annotations``.
    """
    api = "T.Pipelined"
    num_stages = as_int(api, "num_stages", num_stages, minimum=0)
    for name, value in (("sync", sync), ("group", group)):
        if value is not None and (not isinstance(value, (list, tuple)) or len(value)):
            unsupported(api, name, value, "tilex places the pipeline's waits and barriers itself")
    no_annotations(api, annotations)
    if stop is None:
        start, stop = 0, start
    ann = {NUM_STAGES: num_stages}
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
    return _ir.serial(start, stop, annotations=ann)
