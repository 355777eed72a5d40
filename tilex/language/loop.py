"""Loop constructs of tile programs: T.Parallel, T.Pipelined, T.Persistent, and TileLang's spellings of the plain
loops: T.serial / T.Serial (a positional step), T.unroll / T.Unroll (``explicit=``, ``unroll_factor=``),
T.vectorized / T.Vectorized (TVMScript's, with the loops being parsed known to the parser: a name assigned in their
body is an immutable binding, as in TileLang, which TVM's vectorizer can widen; see ``parser.py``)."""
from __future__ import annotations

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.tirx.script.builder import ir as _ir

from tilex.ir.names import NUM_STAGES, PARALLEL_MARKER, PERSISTENT_MARKER, PIPELINE_ORDER, PIPELINE_STAGE
from tilex.language.kernel import integer_arg
from tilex.language.options import as_bool, as_int, constant, no_annotations, positive_extents, unsupported


#: T.Parallel annotation (with prefer_async) accepted as a hint: see Parallel
ASYNC_NO_WAIT = "parallel_async_without_async_commit_wait"


def Parallel(*extents, coalesced_width=None, loop_layout=None, prefer_async=None, annotations=None):
    """``for i, j in T.Parallel(M, N)``: an element-wise loop nest whose iterations are spread over the block's
    threads (the mapping comes from layout inference).

    A 1-d nest is a TVM parallel loop; an n-d nest is a grid preceded by a marker statement that the frontend
    turns into n nested parallel loops right after parsing (TVMScript's grid frame cannot carry the kind).
    ``prefer_async`` (TileLang's request for cp.async copies outside pipelined loops) is accepted as a hint and does
    nothing: tilex issues the loop's shared-memory stores as written, with the same results, and uses cp.async where
    its own pipelining finds global-to-shared copies; so is the annotation
    ``{"parallel_async_without_async_commit_wait": True}`` (the program commits and waits itself).
    Not implemented (NotImplementedError): ``coalesced_width``, ``loop_layout``, other ``annotations``.
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
    if prefer_async is not None:
        as_bool(api, "prefer_async", prefer_async)  # a hint (see above)
    if isinstance(annotations, dict) and ASYNC_NO_WAIT in annotations:
        # TileLang's cp.async copies left for the program's own T.ptx_commit_group / T.ptx_wait_group: tilex's
        # stores are complete when issued, so those calls find nothing outstanding and the results are the same
        as_bool(api, ASYNC_NO_WAIT, annotations[ASYNC_NO_WAIT])
        annotations = {k: v for k, v in annotations.items() if k != ASYNC_NO_WAIT}
    no_annotations(api, annotations)
    if len(extents) == 1:
        return _ir.parallel(0, extents[0])
    _ir.evaluate(tirx.call_intrin("void", PARALLEL_MARKER, len(extents)))
    return _ir.grid(*extents)


def Persistent(domain, wave_size, index, group_size=8):  # noqa: N802 - TileLang's spelling
    """``for bx, by in T.Persistent([m_tiles, n_tiles], wave_size, index)``: a persistent-tile loop. The tiles of
    `domain` are visited by `wave_size` workers (the blocks of a persistent grid, one per multiprocessor), worker
    `index` taking tiles ``index, index + wave_size, ...`` in turn; the loop yields each tile's coordinates.

    The tiles are ordered in groups of `group_size` (clamped to 1..the last extent) consecutive tiles along the last
    dimension: tile ``t`` is element ``t % g`` of its group, the groups running over the other dimensions first
    (row-major: the one before the last fastest), then along the last one -- for a 2-d domain
    ``bx = t // g % m_tiles``, ``by = t // g // m_tiles * g + t % g``, so the workers of one wave share panels of
    A and B in L2. The body runs for tiles inside the domain only. The frontend writes it as plain TIR
    (`canonicalize.py`): a serial loop over the waves, the coordinates bound from ``w * wave_size + index`` and the
    body under a guard."""
    api = "T.Persistent"
    if not isinstance(domain, (list, tuple)) or not domain:
        raise TypeError(f"{api}: domain must be a non-empty list of extents (tiles per dimension), got {domain!r}")
    positive_extents(api, "domain extents", domain)
    wave_size, index, group_size = (integer_arg(api, name, value) for name, value in
                                     (("wave_size", wave_size), ("index", index), ("group_size", group_size)))
    for name, value in (("wave_size", wave_size), ("group_size", group_size)):
        if isinstance(value, int):
            as_int(api, name, value, minimum=1)
    _ir.evaluate(tirx.call_intrin("void", PERSISTENT_MARKER, len(domain), wave_size, index, group_size))
    return _ir.grid(*domain)


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


def serial(start, stop=None, step=None, *, annotations=None, **kwargs):
    """``for i in T.serial(n)`` / ``T.serial(lo, hi)`` / ``T.serial(lo, hi, step)``: a sequential loop (TVMScript's,
    with TileLang's positional step; TVMScript's keywords ``unroll=`` and ``dtype=`` pass through)."""
    api = "T.serial"
    if step is not None:
        _check_step(api, step)
        kwargs["step"] = step
    return _ir.serial(start, stop, annotations=_annotations(api, annotations), **kwargs)


def unroll(start, stop=None, step=None, *, explicit=False, unroll_factor=None, annotations=None, **kwargs):
    """``for i in T.unroll(n)``: a loop the compiler unrolls (``#pragma unroll``), as in TileLang.

    ``unroll_factor=f`` unrolls by `f` (``#pragma unroll f``: `f` iterations per pass of the loop).
    ``explicit=True`` asks for the loop's iterations written out one after the other; the loop must have a
    constant trip count, for which ``#pragma unroll`` already makes nvcc write them out (tilex emits that rather
    than unrolling in its own IR). The two are exclusive, as in TileLang; ``annotations`` may carry them as
    ``pragma_unroll_explicit`` / ``pragma_unroll_factor``."""
    api = "T.unroll"
    ann = _annotations(api, annotations)
    explicit_ann, factor_ann = ann.pop("pragma_unroll_explicit", False), ann.pop("pragma_unroll_factor", None)
    explicit = as_bool(api, "explicit", explicit) or as_bool(api, "pragma_unroll_explicit", explicit_ann)
    factor = unroll_factor if unroll_factor is not None else factor_ann
    if explicit and factor is not None:
        raise ValueError(f"{api}: explicit and unroll_factor are exclusive")
    if step is not None:
        _check_step(api, step)
        kwargs["step"] = step
    if explicit:
        lo, hi = (0, start) if stop is None else (start, stop)
        for name, v in (("start", lo), ("stop", hi), ("step", step if step is not None else 1)):
            if isinstance(constant(v), bool) or not isinstance(constant(v), int):
                raise ValueError(f"{api}(explicit=True): the loop must have a constant trip count, got {name} = {v}")
    if factor is not None:
        factor = as_int(api, "unroll_factor", factor, minimum=1)
        ann["pragma_unroll"] = factor  # TVM's CUDA code generator writes `#pragma unroll <factor>`
        return _ir.serial(start, stop, annotations=ann, **kwargs)
    return _ir.unroll(start, stop, annotations=ann or None, **kwargs)


def Serial(start, stop=None, step=None, *, annotations=None):  # noqa: N802 - TileLang's spelling
    """``T.serial`` (TileLang's capitalized alias for a tile-level sequential loop)."""
    return serial(start, stop, step, annotations=annotations)


def Unroll(start, stop=None, step=None, *, explicit=False, unroll_factor=None, annotations=None):  # noqa: N802
    """``T.unroll`` (TileLang's capitalized alias)."""
    return unroll(start, stop, step, explicit=explicit, unroll_factor=unroll_factor, annotations=annotations)


def vectorized(start, stop=None, *, annotations=None, step=None):
    """``for v in T.vectorized(n)``: a loop TVM turns into vector instructions (TVMScript's). While its body is
    parsed it is listed in :data:`OPEN_VECTORIZED` (with the IRBuilder building it), so that the parser binds a
    name assigned there immutably (``index = i * 8 + v``: a vector of indices), as TileLang does."""
    frame = _ir.vectorized(start, stop, annotations=annotations, step=step)
    entry = (IRBuilder.current() if IRBuilder.is_in_scope() else None, frame)
    OPEN_VECTORIZED.append(entry)
    frame.add_callback(lambda: _close_vectorized(entry))
    return frame


def _close_vectorized(entry):
    for k, e in enumerate(OPEN_VECTORIZED):
        if e is entry:
            del OPEN_VECTORIZED[k]
            return


#: (IRBuilder, loop frame) of the T.vectorized loops being parsed, innermost last (the parser reads it)
OPEN_VECTORIZED: list = []


def in_vectorized_loop() -> bool:
    """Whether the program being built is inside the body of a T.vectorized loop."""
    if not IRBuilder.is_in_scope():
        return False
    builder = IRBuilder.current()
    return any(b is not None and b.same_as(builder) for b, _ in OPEN_VECTORIZED)


def Vectorized(start, stop=None, *, annotations=None):  # noqa: N802 - TileLang's spelling
    """``T.vectorized`` (TileLang's capitalized alias): a loop TVM turns into vector instructions."""
    return vectorized(start, stop, annotations=annotations)


def _check_step(api, step):
    s = constant(step)
    if isinstance(s, bool) or isinstance(s, float):
        raise TypeError(f"{api}: step must be an int or an integer expression, got {step!r}")
    if isinstance(s, int) and s == 0:
        raise ValueError(f"{api}: step must not be 0")


def _annotations(api, annotations):
    if annotations is None:
        return {}
    if not isinstance(annotations, dict):
        raise TypeError(f"{api}: annotations must be a dict, got {annotations!r}")
    return dict(annotations)
