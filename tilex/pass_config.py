"""TileLang's pass-config keys under tilex: ``tilex.PassConfigKey`` and what each key does here.

A TileLang program passes ``pass_configs={tilelang.PassConfigKey.TL_ENABLE_FAST_MATH: True, ...}`` (or the same keys
as strings: ``"tl.disable_tma_lower"``, ``"tirx.disable_vectorize"``) to ``compile``, ``@jit`` and ``@autotune``.
:class:`PassConfigKey` has every key of TileLang's enum under the same name and string; it is a ``str`` enum, so a
member equals its string and hashes like it (either spelling is the same dict key). :data:`HANDLING` says what
tilex does with each key, as one of these kinds:

* ``honoured``   -- the key means here what it means in TileLang: an option of TVM's PassContext that the TVM
  passes tilex runs read, nvcc flags, or what tilex's pipeline always does (some keys only for one value: the
  other is refused, e.g. ``TL_ENABLE_ASYNC_COPY: False``);
* ``translated`` -- the key becomes a tilex option (``tilex.config.KNOWN``): ``TL_DISABLE_TMA_LOWER`` ->
  ``disable_tma``, ``TL_DISABLE_WARP_SPECIALIZED`` -> ``disable_warp_specialized``, ...;
* ``no-op``      -- a performance or checking hint tilex has no use for: any value is accepted, nothing changes;
* ``refused``    -- asks for something tilex cannot do (a debug dump, custom TVM passes): ``NotImplementedError``
  naming the key and why; the value that asks for nothing (``False``, empty) is accepted;
* ``sub-key``    -- not a pass config but a key of the ``TL_SIMPLIFY`` dict: at the top level it is a ValueError.

:func:`resolve` turns one key and value into an :class:`Effect` (tilex options, nvcc flags, TVM PassContext options)
for ``tilex.config.split``. :func:`compile_flag_tokens` checks extra nvcc flags (``compile_flags=``, the value of
``TL_DEVICE_COMPILE_FLAGS``). This module sits below ``tilex.config`` and imports nothing from tilex.
"""
from __future__ import annotations

import enum
import numbers
import shlex
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["PassConfigKey", "Handling", "Effect", "HANDLING", "KINDS", "lookup", "resolve", "compile_flag_tokens",
           "SIMPLIFY_SUB_KEYS"]


class PassConfigKey(str, enum.Enum):
    """TileLang's pass-config keys (``tilelang.PassConfigKey``), same names, same strings. What tilex does with each:
    ``PassConfigKey.X.handling`` (a :class:`Handling`: ``kind`` and ``note``), listed in :data:`HANDLING`."""

    # TileLang's own keys (tl.*)
    TL_SIMPLIFY = "tl.Simplify"
    TL_SIMPLIFY_TRANSITIVELY_PROVE_INEQUALITIES = "transitively_prove_inequalities"
    TL_SIMPLIFY_CONVERT_BOOLEAN_TO_AND_OF_ORS = "convert_boolean_to_and_of_ors"
    TL_SIMPLIFY_APPLY_CONSTRAINTS_TO_BOOLEAN_BRANCHES = "apply_constraints_to_boolean_branches"
    TL_SIMPLIFY_PROPAGATE_KNOWNS_TO_PROVE_CONDITIONAL = "propagate_knowns_to_prove_conditional"
    TL_SIMPLIFY_PROPAGATE_KNOWNS_TO_SIMPLIFY_EXPRESSIONS = "propagate_knowns_to_simplify_expressions"
    TL_SIMPLIFY_ENABLE_LET_INLINE = "enable_simplify_let_inline"
    TL_DISABLE_BUFFER_INIT_CHECK = "tl.disable_buffer_init_check"
    TL_DISABLE_DATA_RACE_CHECK = "tl.disable_data_race_check"
    TL_DISABLE_PRELOWER_SEMANTIC_CHECK = "tl.disable_prelower_semantic_check"
    TL_DISABLE_WARP_SPECIALIZED = "tl.disable_warp_specialized"
    TL_ENABLE_FAST_MATH = "tl.enable_fast_math"
    TL_PTXAS_REGISTER_USAGE_LEVEL = "tl.ptxas_register_usage_level"
    TL_DEVICE_COMPILE_FLAGS = "tl.device_compile_flags"
    TL_EMIT_LINE_DIRECTIVES = "tl.emit_line_directives"
    TL_CONFIG_INDEX_BITWIDTH = "tl.config_index_bitwidth"
    TL_ENABLE_REDUCER_PLAN_VERBOSE = "tl.enable_reducer_plan_verbose"
    TL_LAYOUT_COST_MODEL = "tl.layout_cost_model"
    TL_REDUCER_FORCE_BASELINE = "tl.reducer_force_baseline"
    TL_DISABLE_TMA_LOWER = "tl.disable_tma_lower"
    TL_DISABLE_SAFE_MEMORY_ACCESS = "tl.disable_safe_memory_legalize"
    TL_DISABLE_VECTORIZE_256 = "tl.disable_vectorize_256"
    TL_ENABLE_ASYNC_COPY = "tl.enable_async_copy"
    TL_ENABLE_LOWER_LDGSTG = "tl.enable_lower_ldgstg"
    TL_ENABLE_LOWER_LDGSTG_PREDICATED = "tl.enable_lower_ldgstg_predicated"
    TL_ENABLE_VECTORIZE_PLANNER_VERBOSE = "tl.enable_vectorize_planner_verbose"
    TL_DISABLE_WGMMA = "tl.disable_wgmma"
    TL_DEBUG_MERGE_SHARED_MEMORY_ALLOCATIONS = "tl.debug_merge_shared_memory_allocations"
    TL_ENABLE_AGGRESSIVE_SHARED_MEMORY_MERGE = "tl.enable_aggressive_shared_memory_merge"
    TL_DISABLE_SHARED_MEMORY_REUSE = "tl.disable_shared_memory_reuse"
    TL_DISABLE_SHUFFLE_ELECT = "tl.disable_shuffle_elect"
    TL_DISABLE_LOOP_UNSWITCHING = "tl.disable_loop_unswitching"
    TL_LOOP_UNSWITCHING_ALLOW_NON_TRIVIAL_ELSE = "tl.loop_unswitching_allow_non_trivial_else"
    TL_IF_STMT_BINDING_INLINE_REPLAYABLE_BINDS = "tl.if_stmt_binding_inline_replayable_binds"
    TL_DISABLE_THREAD_STORAGE_SYNC = "tl.disable_thread_storage_sync"
    TL_FORCE_LET_INLINE = "tl.force_let_inline"
    TL_AST_PRINT_ENABLE = "tl.ast_print_enable"
    TL_LAYOUT_VISUALIZATION_ENABLE = "tl.layout_visualization_enable"
    TL_LAYOUT_VISUALIZATION_FORMATS = "tl.layout_visualization_formats"
    TL_STORAGE_REWRITE_DETECT_INPLACE = "tl.storage_rewrite_detect_inplace"
    # TVM's keys as TileLang names them (TVM 0.27 registers most of them; the older spelling tir.* is read as tirx.*)
    TIR_ENABLE_EQUIV_TERMS_IN_CSE = "tir.enable_equiv_terms_in_cse_tir"
    TIR_DISABLE_CSE = "tirx.disable_cse_tir"
    TIR_SIMPLIFY = "tirx.Simplify"
    TIR_DISABLE_STORAGE_REWRITE = "tirx.disable_storage_rewrite"
    TIR_DISABLE_VECTORIZE = "tirx.disable_vectorize"
    TIR_USE_ASYNC_COPY = "tirx.use_async_copy"
    TIR_ENABLE_DEBUG = "tirx.enable_debug"
    TIR_MERGE_STATIC_SMEM = "tirx.merge_static_smem"
    TIR_ADD_LOWER_PASS = "tirx.add_lower_pass"
    TIR_NOALIAS = "tirx.noalias"
    # output and debugging
    CUDA_KERNELS_OUTPUT_DIR = "cuda.kernels_output_dir"
    TL_DISABLE_OUT_OF_BOUND_WARNING = "tl.disable_out_of_bound_warning"
    TL_ENABLE_DUMP_IR = "tl.enable_dump_ir"
    TL_DUMP_IR_DIR = "tl.dump_ir_path"
    TL_PASS_PROFILE = "tl.pass_profile"
    TL_PASS_PROFILE_THRESHOLD_MS = "tl.pass_profile_threshold_ms"
    # keys of earlier TileLang releases that programs still spell
    TL_DISABLE_FAST_MATH = "tl.disable_fast_math"
    TL_ENABLE_PTXAS_VERBOSE_OUTPUT = "tl.enable_ptxas_verbose_output"

    @property
    def handling(self) -> "Handling":
        """What tilex does with this key."""
        return HANDLING[self]


#: The keys of a ``TL_SIMPLIFY`` dict.
SIMPLIFY_SUB_KEYS = frozenset(k.value for k in PassConfigKey if k.name.startswith("TL_SIMPLIFY_"))

KINDS = ("honoured", "translated", "no-op", "refused", "sub-key")


@dataclass(frozen=True)
class Effect:
    """What one pass-config entry asks of tilex: ``options`` (tilex option name -> value), ``flags`` (extra nvcc
    flags, in order) and ``tvm`` (TVM PassContext options)."""

    options: dict = field(default_factory=dict)
    flags: tuple = ()
    tvm: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Handling:
    """``kind`` (one of :data:`KINDS`), ``note`` (what TileLang does with the key and what tilex does), and
    ``apply(key, value) -> Effect``, which raises for a value tilex refuses."""

    kind: str
    note: str
    apply: Callable[["PassConfigKey", Any], Effect]


# -- values
def _as_bool(key, value) -> bool:
    """A boolean pass-config value (bool, or an integer / numpy bool); a string or anything else is a TypeError
    (``"false"`` would read as true)."""
    if isinstance(value, (bool, numbers.Integral)) or type(value).__name__ == "bool_":
        return bool(value)
    raise TypeError(f"pass config {key.value!r} takes True or False, got {value!r}")


def _refused(key, value, why) -> NotImplementedError:
    return NotImplementedError(f"pass config {key.value!r} = {value!r} is not supported by tilex: {why}")


# -- the rules, one builder per kind of behaviour
def _translate(option: str, invert: bool = False):
    return lambda key, value: Effect(options={option: _as_bool(key, value) != invert})


def _no_op(key, value) -> Effect:
    return Effect()


def _to_tvm(key, value) -> Effect:
    return Effect(tvm={key.value: _as_bool(key, value)})


def _refuse_if(asks: Callable[[Any], bool], why: str):
    """Accepted (nothing to do) unless ``asks(value)``; then refused with ``why``."""
    def apply(key, value):
        if asks(value):
            raise _refused(key, value, why)
        return Effect()
    return apply


def _truthy(value) -> bool:
    return bool(value)


def _is_false(value) -> bool:
    return value is not None and not value


def _sub_key(key, value) -> Effect:
    raise ValueError(f"{key.value!r} ({key.name}) is not a pass config but an option inside "
                     f"PassConfigKey.TL_SIMPLIFY: pass_configs={{'tl.Simplify': {{{key.value!r}: {value!r}}}}}")


def _simplify_dict(key, value) -> Effect:
    if value is None:
        return Effect()
    if not isinstance(value, dict):
        raise TypeError(f"pass config {key.value!r} takes a dict of simplifier options, got {value!r}")
    for sub in value:
        name = sub.value if isinstance(sub, PassConfigKey) else sub
        if name not in SIMPLIFY_SUB_KEYS:
            raise ValueError(f"pass config {key.value!r}: unknown simplifier option {name!r}; TileLang's are "
                             + ", ".join(sorted(SIMPLIFY_SUB_KEYS)))
    return Effect()


def _fast_math(key, value) -> Effect:
    if _as_bool(key, value):
        return Effect(options={"disable_fast_math": False}, flags=("--use_fast_math",))
    return Effect(options={"disable_fast_math": True})


def _device_flags(key, value) -> Effect:
    if value is None:
        return Effect()
    return Effect(flags=tuple(compile_flag_tokens(value, key.value)))


def _register_usage_level(key, value) -> Effect:
    if value is None:
        return Effect()
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= int(value) <= 10:
        raise ValueError(f"pass config {key.value!r} takes an integer from 0 to 10, got {value!r}")
    return Effect(flags=(f"--ptxas-options=--register-usage-level={int(value)}",))


def _index_bitwidth(key, value) -> Effect:
    if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
        raise TypeError(f"pass config {key.value!r} takes an integer bit width, got {value!r}")
    if value is not None and int(value) != 32:
        raise _refused(key, value, "tilex does not widen index arithmetic; its indices are 32-bit wherever their "
                                   "bounds allow (TVM's NarrowDataType(32)) and follow the program's types elsewhere "
                                   "(declare sizes that need 64 bits as T.int64)")
    return Effect()


def _output_dir(key, value) -> Effect:
    if not value:
        return Effect()
    if not isinstance(value, str):
        raise TypeError(f"pass config {key.value!r} takes a directory path, got {value!r}")
    return Effect(options={"kernels_output_dir": value})


def _honour_true(why_false: str):
    """A key whose True is what tilex always does: True accepted, False refused with ``why_false``."""
    def apply(key, value):
        if not _as_bool(key, value):
            raise _refused(key, value, why_false)
        return Effect()
    return apply


_DEBUG_OUTPUT = "it asks for debugging output of TileLang's own passes, which tilex does not have"

HANDLING: dict[PassConfigKey, Handling] = {
    PassConfigKey.TL_SIMPLIFY: Handling(
        "no-op", "options of TileLang's simplifier (a dict of the TL_SIMPLIFY_* keys); tilex simplifies with TVM's "
        "StmtSimplify at its own settings, and these only change how hard the simplifier tries, never the results: "
        "the dict is checked and not used", _simplify_dict),
    **{k: Handling("sub-key", f"a key inside the TL_SIMPLIFY dict ({k.value}), not a pass config", _sub_key)
       for k in PassConfigKey if k.name.startswith("TL_SIMPLIFY_")},
    PassConfigKey.TL_DISABLE_BUFFER_INIT_CHECK: Handling(
        "no-op", "silences TileLang's warning about local buffers read before written; tilex has no such warning",
        _no_op),
    PassConfigKey.TL_DISABLE_DATA_RACE_CHECK: Handling(
        "refused", "True (TileLang's default) is accepted: tilex has no data-race check; False asks for that check",
        _refuse_if(_is_false, "tilex has no data-race check")),
    PassConfigKey.TL_DISABLE_PRELOWER_SEMANTIC_CHECK: Handling(
        "no-op", "skips TileLang's Python-side checks before lowering; tilex's checks are part of its passes "
        "(TileOpError, LayoutConflictError) and always run", _no_op),
    PassConfigKey.TL_DISABLE_WARP_SPECIALIZED: Handling(
        "translated", "-> tilex.disable_warp_specialized: pipelined loops stay on cp.async in every thread",
        _translate("disable_warp_specialized")),
    PassConfigKey.TL_ENABLE_FAST_MATH: Handling(
        "translated", "TileLang passes --use_fast_math to nvcc when True (float32 exp2f / expf / division / sqrt "
        "approximate, denormals flushed) and compiles precise math otherwise. True: --use_fast_math to nvcc and "
        "tilex.disable_fast_math = False (exp2 / exp on ex2.approx); False: tilex.disable_fast_math = True (precise "
        "exp2f / expf, as TileLang); absent: tilex's default (ex2.approx for exp2 / exp, no --use_fast_math)",
        _fast_math),
    PassConfigKey.TL_PTXAS_REGISTER_USAGE_LEVEL: Handling(
        "honoured", "0..10: --ptxas-options=--register-usage-level=N to nvcc", _register_usage_level),
    PassConfigKey.TL_DEVICE_COMPILE_FLAGS: Handling(
        "honoured", "extra nvcc flags for this kernel (a list of strings or one string, split like a shell line), "
        "as compile_flags=; flags that change the output file, its kind or the target arch are a ValueError",
        _device_flags),
    PassConfigKey.TL_EMIT_LINE_DIRECTIVES: Handling(
        "refused", "#line directives to the Python source in the generated CUDA: TVM's CUDA codegen writes none "
        "(tilex's errors name the tile program's line; nvcc always gets -lineinfo); False is accepted",
        _refuse_if(_truthy, "TVM's CUDA codegen writes no #line directives")),
    PassConfigKey.TL_CONFIG_INDEX_BITWIDTH: Handling(
        "honoured", "32 is what tilex does (indices in 32 bits where their bounds allow); other widths are refused",
        _index_bitwidth),
    PassConfigKey.TL_ENABLE_REDUCER_PLAN_VERBOSE: Handling(
        "refused", "logs of TileLang's reducer planner; False is accepted", _refuse_if(_truthy, _DEBUG_OUTPUT)),
    PassConfigKey.TL_LAYOUT_COST_MODEL: Handling(
        "no-op", "ranks TileLang's free-mode layout candidates; tilex's layout inference chooses with its own rules "
        "(a performance choice: results are the same)", _no_op),
    PassConfigKey.TL_REDUCER_FORCE_BASELINE: Handling(
        "no-op", "forces TileLang's reference lowering of reductions instead of its narrower plans; tilex has one "
        "lowering of each reduction", _no_op),
    PassConfigKey.TL_DISABLE_TMA_LOWER: Handling(
        "translated", "-> tilex.disable_tma: no TMA loads or stores (so no warp specialization either)",
        _translate("disable_tma")),
    PassConfigKey.TL_DISABLE_SAFE_MEMORY_ACCESS: Handling(
        "no-op", "skips TileLang's bounds guards on global accesses (faster, unsafe); tilex keeps the guards its "
        "copies need", _no_op),
    PassConfigKey.TL_DISABLE_VECTORIZE_256: Handling(
        "no-op", "no 256-bit global loads / stores (sm100); tilex emits at most 128-bit vectors", _no_op),
    PassConfigKey.TL_ENABLE_ASYNC_COPY: Handling(
        "honoured", "True (the default) is what tilex does: pipelined global->shared copies use cp.async (or TMA); "
        "False is refused", _honour_true("tilex always lowers pipelined global->shared copies to cp.async or TMA")),
    PassConfigKey.TL_ENABLE_LOWER_LDGSTG: Handling(
        "no-op", "global loads / stores as explicit ldg / stg intrinsics (a code-generation preference)", _no_op),
    PassConfigKey.TL_ENABLE_LOWER_LDGSTG_PREDICATED: Handling(
        "no-op", "predicated loads / stores as ldg / stg intrinsics (a code-generation preference)", _no_op),
    PassConfigKey.TL_ENABLE_VECTORIZE_PLANNER_VERBOSE: Handling(
        "refused", "prints of TileLang's vectorize planner; False is accepted", _refuse_if(_truthy, _DEBUG_OUTPUT)),
    PassConfigKey.TL_DISABLE_WGMMA: Handling(
        "translated", "-> tilex.disable_wgmma: T.gemm uses mma.sync on sm90", _translate("disable_wgmma")),
    PassConfigKey.TL_DEBUG_MERGE_SHARED_MEMORY_ALLOCATIONS: Handling(
        "refused", "prints of TileLang's shared-memory merge; False is accepted", _refuse_if(_truthy, _DEBUG_OUTPUT)),
    PassConfigKey.TL_ENABLE_AGGRESSIVE_SHARED_MEMORY_MERGE: Handling(
        "no-op", "packs shared buffers more tightly; tilex keeps each tile in its own range (a shared-memory size "
        "hint)", _no_op),
    PassConfigKey.TL_DISABLE_SHARED_MEMORY_REUSE: Handling(
        "honoured", "True is what tilex always does: no two shared tiles share memory (KeepTilesApart); False, "
        "allowing reuse, is a size hint tilex does not act on", _no_op),
    PassConfigKey.TL_DISABLE_SHUFFLE_ELECT: Handling(
        "no-op", "how TileLang elects one thread (a performance choice)", _no_op),
    PassConfigKey.TL_DISABLE_LOOP_UNSWITCHING: Handling(
        "no-op", "TileLang's loop unswitching (a performance transformation tilex does not run)", _no_op),
    PassConfigKey.TL_LOOP_UNSWITCHING_ALLOW_NON_TRIVIAL_ELSE: Handling(
        "no-op", "a setting of TileLang's loop unswitching, which tilex does not run", _no_op),
    PassConfigKey.TL_IF_STMT_BINDING_INLINE_REPLAYABLE_BINDS: Handling(
        "no-op", "a rewrite that shows guarded statements to TileLang's pipeline planner (a performance choice)",
        _no_op),
    PassConfigKey.TL_DISABLE_THREAD_STORAGE_SYNC: Handling(
        "translated", "-> tilex.trust_program_barriers: the program places its own barriers (TileLang then inserts "
        "none); tilex still plans shared-memory barriers where every thread of the block reaches them, and leaves "
        "the inside of a branch or loop the threads may run differently to the program's barriers instead of "
        "refusing the kernel (transform/thread_sync.py)", _translate("trust_program_barriers")),
    PassConfigKey.TL_FORCE_LET_INLINE: Handling(
        "no-op", "inlines let bindings in TileLang's simplifier (the results are the same)", _no_op),
    PassConfigKey.TL_AST_PRINT_ENABLE: Handling(
        "refused", "prints TileLang's IR between passes; False is accepted", _refuse_if(_truthy, _DEBUG_OUTPUT)),
    PassConfigKey.TL_LAYOUT_VISUALIZATION_ENABLE: Handling(
        "refused", "draws TileLang's inferred layouts; False is accepted", _refuse_if(_truthy, _DEBUG_OUTPUT)),
    PassConfigKey.TL_LAYOUT_VISUALIZATION_FORMATS: Handling(
        "no-op", "file formats of TL_LAYOUT_VISUALIZATION_ENABLE (refused); alone it changes nothing", _no_op),
    PassConfigKey.TL_STORAGE_REWRITE_DETECT_INPLACE: Handling(
        "no-op", "lets TileLang's StorageRewrite reuse a local buffer in place (tilex runs no StorageRewrite)",
        _no_op),
    PassConfigKey.TIR_ENABLE_EQUIV_TERMS_IN_CSE: Handling(
        "no-op", "a setting of TVM's common-subexpression elimination, which tilex's pipeline does not run", _no_op),
    PassConfigKey.TIR_DISABLE_CSE: Handling(
        "honoured", "passed to TVM's PassContext; tilex's pipeline runs no common-subexpression elimination", _to_tvm),
    PassConfigKey.TIR_SIMPLIFY: Handling(
        "no-op", "options of TileLang's TVM simplifier (TVM 0.27 has no such key); tilex's simplification uses its "
        "own settings, and the results are the same", _no_op),
    PassConfigKey.TIR_DISABLE_STORAGE_REWRITE: Handling(
        "honoured", "passed to TVM's PassContext; tilex's pipeline runs no StorageRewrite", _to_tvm),
    PassConfigKey.TIR_DISABLE_VECTORIZE: Handling(
        "honoured", "passed to TVM's PassContext: VectorizeLoop leaves vectorized loops as serial loops", _to_tvm),
    PassConfigKey.TIR_USE_ASYNC_COPY: Handling(
        "honoured", "True (the default) is what tilex does: pipelined copies use cp.async (or TMA); False is refused",
        _honour_true("tilex always lowers pipelined global->shared copies to cp.async or TMA")),
    PassConfigKey.TIR_ENABLE_DEBUG: Handling(
        "no-op", "TVM's debug information; tilex always compiles with -lineinfo", _no_op),
    PassConfigKey.TIR_MERGE_STATIC_SMEM: Handling(
        "no-op", "lets TVM's MergeSharedMemoryAllocations merge static shared buffers too; tilex keeps them apart "
        "(its barrier planning relies on it), so the hint is not passed on (a shared-memory size hint)", _no_op),
    PassConfigKey.TIR_ADD_LOWER_PASS: Handling(
        "refused", "extra passes for TVM's default lowering pipeline; tilex compiles with its own pipeline, which "
        "takes none; an empty list is accepted",
        _refuse_if(_truthy, "tilex's compilation pipeline takes no user passes")),
    PassConfigKey.TIR_NOALIAS: Handling(
        "honoured", "True is what tilex does: kernel pointer parameters are __restrict__ (TVMScript marks every "
        "T.prim_func tirx.noalias); False is refused (drop it per function with "
        "T.func_attr({'tirx.noalias': False}))",
        _honour_true("tilex's kernels take their pointer parameters as __restrict__ (the function attribute "
                     "tirx.noalias decides, not the pass config)")),
    PassConfigKey.CUDA_KERNELS_OUTPUT_DIR: Handling(
        "honoured", "a directory that receives this kernel's CUDA source (.cu) when nvcc compiles it, as "
        "$TILEX_DUMP_DIR does for every kernel", _output_dir),
    PassConfigKey.TL_DISABLE_OUT_OF_BOUND_WARNING: Handling(
        "no-op", "silences TileLang's out-of-bound access warnings; tilex has no such warning", _no_op),
    PassConfigKey.TL_ENABLE_DUMP_IR: Handling(
        "refused", "dumps TileLang's IR between passes; False is accepted ($TILEX_DUMP_DIR keeps the CUDA source, "
        "tilex.engine.lower_to_tir gives the per-thread TIR)", _refuse_if(_truthy, _DEBUG_OUTPUT)),
    PassConfigKey.TL_DUMP_IR_DIR: Handling(
        "no-op", "directory of TL_ENABLE_DUMP_IR (refused); alone it changes nothing", _no_op),
    PassConfigKey.TL_PASS_PROFILE: Handling(
        "refused", "times TileLang's passes; False is accepted", _refuse_if(_truthy, _DEBUG_OUTPUT)),
    PassConfigKey.TL_PASS_PROFILE_THRESHOLD_MS: Handling(
        "no-op", "threshold of TL_PASS_PROFILE (refused); alone it changes nothing", _no_op),
    PassConfigKey.TL_DISABLE_FAST_MATH: Handling(
        "translated", "(earlier TileLang) -> tilex.disable_fast_math: float32 exp2 / exp use precise exp2f / expf",
        _translate("disable_fast_math")),
    PassConfigKey.TL_ENABLE_PTXAS_VERBOSE_OUTPUT: Handling(
        "no-op", "(earlier TileLang) ptxas's verbose report; tilex always collects it (kernel.resources)", _no_op),
}

_BY_VALUE = {k.value: k for k in PassConfigKey}


def lookup(name: str) -> PassConfigKey | None:
    """The TileLang key spelled `name` (a member's string; ``tir.X``, the spelling of earlier TileLang releases, for
    the key ``tirx.X``), or None."""
    key = _BY_VALUE.get(name)
    if key is None and name.startswith("tir."):
        key = _BY_VALUE.get("tirx." + name[len("tir."):])
    return key


def resolve(key: PassConfigKey, value) -> Effect:
    """What ``{key: value}`` asks of tilex. Raises NotImplementedError (a value tilex cannot honour, naming the
    key), ValueError / TypeError (a bad value, a TL_SIMPLIFY sub-key at the top level)."""
    return HANDLING[key].apply(key, value)


# -- extra nvcc flags
_OUTPUT = "tilex names the file nvcc writes and reads it back"
_ARCH = "tilex compiles for the kernel's target (-gencode from target=)"
_KIND = "tilex asks nvcc for a cubin"
#: nvcc options a kernel's extra flags may not carry (long and short spellings), and why
_REFUSED_FLAGS = {
    **dict.fromkeys(("-o", "--output-file", "-odir", "--output-directory"), _OUTPUT),
    **dict.fromkeys(("-arch", "--gpu-architecture", "-code", "--gpu-code", "-gencode", "--generate-code",
                     "-arch-ls", "--list-gpu-arch", "-code-ls", "--list-gpu-code"), _ARCH),
    **dict.fromkeys(("-cuda", "--cuda", "-cubin", "--cubin", "-fatbin", "--fatbin", "-ptx", "--ptx", "-optix-ir",
                     "--optix-ir", "-ltoir", "--ltoir", "-E", "--preprocess", "-M", "--generate-dependencies", "-MM",
                     "--generate-nonsystem-dependencies", "-MD", "--generate-dependencies-with-compile", "-MMD",
                     "--generate-nonsystem-dependencies-with-compile", "-c", "--compile", "-dc", "--device-c", "-dw",
                     "--device-w", "-dlink", "--device-link", "-link", "--link", "-lib", "--lib", "-run", "--run",
                     "-dryrun", "--dryrun", "-fdevice-syntax-only", "--fdevice-syntax-only", "-h", "--help", "-V",
                     "--version"), _KIND),
    **dict.fromkeys(("-optf", "--options-file"), "an options file could carry any flag; pass the flags themselves"),
}
_PTXAS_FLAGS = ("-Xptxas", "--ptxas-options")
_REFUSED_PTXAS = {"-o": _OUTPUT, "--output-file": _OUTPUT, "-arch": _ARCH, "--gpu-name": _ARCH}


def _matches(token: str, option: str) -> bool:
    return token == option or token.startswith(option + "=")


def compile_flag_tokens(flags, what: str = "compile_flags") -> list[str]:
    """Extra nvcc flags as a list of arguments: ``flags`` is one string or a list / tuple of strings, each split
    like a shell command line (``"-DX=1 -I/opt/inc"``). ``what`` names the source in errors. TypeError for other
    types; ValueError for a flag that would change the output file, its kind or the target arch (``-o``,
    ``-arch``, ``-gencode``, ``--ptx``, ...; also inside ``-Xptxas`` / ``--ptxas-options``)."""
    if isinstance(flags, str):
        parts = [flags]
    elif isinstance(flags, (list, tuple)) and all(isinstance(f, str) for f in flags):
        parts = list(flags)
    else:
        raise TypeError(f"{what} takes a string or a list of strings (nvcc flags), got {flags!r}")
    try:
        tokens = [t for part in parts for t in shlex.split(part)]
    except ValueError as e:  # an unclosed quote
        raise ValueError(f"{what}: cannot split {flags!r} into nvcc flags ({e})") from None
    for i, tok in enumerate(tokens):
        for option, why in _REFUSED_FLAGS.items():
            if _matches(tok, option):
                raise ValueError(f"{what}: nvcc flag {tok!r} is not allowed ({why})")
        for ptxas in _PTXAS_FLAGS:
            if _matches(tok, ptxas):
                arg = tok[len(ptxas) + 1:] if tok != ptxas else (tokens[i + 1] if i + 1 < len(tokens) else "")
                for sub in arg.split(","):
                    for option, why in _REFUSED_PTXAS.items():
                        if _matches(sub.strip(), option):
                            raise ValueError(f"{what}: ptxas flag {sub.strip()!r} in {tok!r} is not allowed ({why})")
    return tokens
