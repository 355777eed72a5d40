"""tilex's own compile options (``pass_configs`` keys ``tilex.*``), and how a user's ``pass_configs`` become them.

TVM's PassContext only takes options registered in C++, so tilex keeps its own next to it: `build` splits the
user's ``pass_configs`` into TVM options and tilex options (:func:`split`) and makes the latter current while it
compiles. TileLang's keys (``tilex.PassConfigKey`` members or their strings) are read as ``tilex.pass_config`` says:
translated into tilex options, passed to TVM, accepted as no-ops, or refused by name; ``tl.<name>`` is also accepted
for every tilex option.
"""
from __future__ import annotations

import contextlib
import contextvars
import enum

import tvm

from tilex import pass_config

KNOWN = {
    "disable_wgmma": "use mma.sync instead of wgmma for T.gemm on sm90",
    "disable_warp_specialized": "keep pipelined loops on cp.async in every thread (no producer warpgroup)",
    "disable_tma": "no TMA loads (implies no warp specialization)",
    "disable_tma_store": "shared->global tile copies use per-thread stores instead of a TMA store on sm90",
    "disable_block_coarsening": "a one-warpgroup GEMM block of 128 x N <= 128 output keeps its shape instead of running with its right-hand neighbour as one 128 x 2N block of two warpgroups (transform/coarsen_blocks.py)",
    "disable_skinny_swap": "a plain GEMM whose A has few rows (at most 64; up to 128 when that fills more blocks) keeps its blocks instead of computing C^T tiles in 128-thread blocks with a deep pipeline (transform/swap_skinny_gemm.py)",
    "disable_skinny_narrow": "a plain GEMM whose B has 64 to 256 columns keeps its blocks instead of smaller blocks of 128 threads (64-row, or 128 x 128) with a deep pipeline that fill the multiprocessors (transform/narrow_skinny_gemm.py)",
    "disable_pipeline_deepening": "a two-warpgroup 128 x 256 GEMM block keeps the T.Pipelined depth it was written with instead of 4 stages (transform/deepen_pipeline.py)",
    "disable_staged_epilogue": "a warp-specialized kernel's T.copy(fragment, global) epilogue stores from registers instead of through a swizzled shared tile and TMA stores (T.copy(..., disable_tma=True) pins one copy)",
    "disable_persistent": "warp-specialized kernels launch one block per output tile instead of a persistent grid",
    "disable_tma_multicast": "persistent kernels do not pair blocks in clusters that multicast a shared operand",
    "cluster_size": "opt in: a warp-specialized grid that is not made persistent runs in clusters of 2 or 4 blocks along x that multicast the operand not depending on bx",
    "persistent_cluster": "blocks per cluster of a persistent grid (1, 2 or 4; default 2): the tiles of a cluster share one operand, loaded once and multicast",
    "stream_k": "'auto' (default): persistent GEMMs whose output tiles do not divide evenly among the blocks split the last tiles' K iterations between all blocks (stream-K; partial sums meet in a per-stream workspace) when its cost rule says it saves 0.5 % (transform/hopper/stream_k.py: a skinny GEMM, the last half round of a large grid); 1: whenever the tiles do not divide evenly; 0: never",
    "disable_mma_overlap": "warp-specialized loops that compute between their MMAs (attention) wait for every gemm at once instead of running the last one (P V) during the next iteration's softmax",
    "warpgroup_turns": "opt in: in such loops with two consumer warpgroups, each issues its block of MMAs (S of this key block, P V of the last) in turns with the other (named barriers), as FlashAttention-3's ping-pong",
    "disable_fast_math": "float32 T.exp2 / T.exp use the precise exp2f / expf instead of ex2.approx (one instruction, relative error about 2^-22)",
    "disable_decode_into_registers": "a shared tile that one T.Parallel loop writes whole and one T.gemm reads as B (transpose_B) stays in shared memory instead of becoming the MMA's register operand (the gemm swapped, C^T = B A^T; sm_90a)",
    "disable_bank_swizzle": "shared tiles without a layout of their own stay row-major instead of taking the swizzle the bank-conflict model synthesizes for their loads and stores",
    "num_sms": "multiprocessor count a persistent grid is sized for (default: the current GPU's, or the arch's)",
    "device_compile_flags": "extra nvcc flags for this kernel: a list of strings or one string, split like a shell command line (compile_flags=, TileLang's tl.device_compile_flags); flags that change the output file, its kind or the target arch (-o, -arch, -gencode, --ptx, ...) are a ValueError",
    "trust_program_barriers": "the program places its own barriers (TileLang's TL_DISABLE_THREAD_STORAGE_SYNC): where a shared-memory dependency inside a branch or loop that the threads of a block may run differently would need a block barrier (which not every thread would reach), its inside keeps the program's barriers instead of the kernel being refused; tilex still adds the barriers every thread reaches",
    "kernels_output_dir": "a directory that receives the kernel's CUDA source (.cu) when nvcc compiles it, as $TILEX_DUMP_DIR does for every kernel (TileLang's cuda.kernels_output_dir)",
}

#: The option that collects extra nvcc flags (its values from several keys are joined in order).
DEVICE_COMPILE_FLAGS = "device_compile_flags"

_current: contextvars.ContextVar[dict] = contextvars.ContextVar("tilex_config", default={})


def split(pass_configs):
    """(tilex options {short name: value}, TVM PassContext options) from a user ``pass_configs`` dict.

    A key is a string or a ``tilex.PassConfigKey`` member:
    * ``tilex.<name>`` (``tl.<name>`` too) for a name of KNOWN: that tilex option;
    * one of TileLang's keys: as ``tilex.pass_config.HANDLING`` says (a tilex option, nvcc flags, a TVM option, a
      no-op, or NotImplementedError naming the key);
    * any other option TVM's PassContext registers (``tirx.*``, ...): passed to TVM.
    Anything else is a ValueError, as are two keys that set one tilex option to different values. The nvcc flags
    of several keys (``device_compile_flags``) are joined in the dict's order."""
    ours, theirs, origin, flags = {}, {}, {}, []
    for key, value in dict(pass_configs or {}).items():
        name = key_name(key)
        tl_key = pass_config.lookup(name)
        if tl_key is not None:
            effect = pass_config.resolve(tl_key, value)
            for option, v in effect.options.items():
                _set(ours, origin, option, v, name)
            flags += effect.flags
            theirs.update(effect.tvm)
            continue
        short = _tilex_name(name)
        if short == DEVICE_COMPILE_FLAGS:
            if value is not None:
                flags += pass_config.compile_flag_tokens(value, name)
        elif short is not None:
            _set(ours, origin, short, value, name)
        elif name in _tvm_options():
            theirs[name] = value
        else:
            raise ValueError(f"unknown pass config '{name}': not a tilex option, not one of TileLang's keys "
                             "(tilex.PassConfigKey) and not an option of TVM's PassContext; tilex knows: "
                             + ", ".join(f"tilex.{k} ({v})" for k, v in KNOWN.items()))
    if flags:
        ours[DEVICE_COMPILE_FLAGS] = flags
    return ours, theirs


def key_name(key) -> str:
    """The string of a pass-config key (a ``tilex.PassConfigKey`` member's value, or the string itself)."""
    if isinstance(key, enum.Enum) and isinstance(key.value, str):
        return key.value
    if isinstance(key, str):
        return str(key)
    raise TypeError(f"pass_configs keys are strings or tilex.PassConfigKey members, got {key!r}")


def plain(pass_configs) -> dict:
    """``pass_configs`` with its keys as plain strings (PassConfigKey members as their values; other keys as they
    are), so that both spellings of a key compare, print and hash alike."""
    return {key.value if isinstance(key, enum.Enum) else key: value for key, value in dict(pass_configs or {}).items()}


def with_compile_flags(pass_configs, compile_flags):
    """``pass_configs`` with ``compile_flags`` (``tilex.compile(..., compile_flags=...)``: a list of strings or one
    string) appended to its ``tilex.device_compile_flags``, checked (TypeError / ValueError, see
    ``tilex.pass_config.compile_flag_tokens``). ``pass_configs`` itself when there are none."""
    if compile_flags is None:
        return pass_configs
    tokens = pass_config.compile_flag_tokens(compile_flags, "compile_flags")
    if not tokens:
        return pass_configs
    merged = dict(pass_configs or {})
    key = "tilex." + DEVICE_COMPILE_FLAGS
    before = merged.get(key)
    merged[key] = (pass_config.compile_flag_tokens(before, key) if before is not None else []) + tokens
    return merged


def _tilex_name(name):
    """The tilex option `name` spells (``tilex.<option>`` or ``tl.<option>``), None for another name; ValueError for
    ``tilex.<something tilex does not know>``."""
    for prefix in ("tilex.", "tl."):
        if name.startswith(prefix) and name[len(prefix):] in KNOWN:
            return name[len(prefix):]
    if name.startswith("tilex."):
        raise ValueError(f"unknown pass config '{name}'; tilex knows: "
                         + ", ".join(f"tilex.{k} ({v})" for k, v in KNOWN.items()))
    return None


def _set(ours, origin, option, value, name):
    if option in ours and ours[option] != value:
        raise ValueError(f"pass configs '{origin[option]}' and '{name}' disagree on tilex.{option} "
                         f"({ours[option]!r} vs {value!r})")
    ours[option] = value
    origin.setdefault(option, name)


def _tvm_options():
    """The option names TVM's PassContext registers."""
    return tvm.transform.PassContext.list_configs()


_active: contextvars.ContextVar[bool] = contextvars.ContextVar("tilex_build_active", default=False)


@contextlib.contextmanager
def scope(options):
    """Make `options` the tilex options in effect (and mark a tilex compilation as running)."""
    token, active = _current.set(dict(options)), _active.set(True)
    try:
        yield
    finally:
        _current.reset(token)
        _active.reset(active)


def active() -> bool:
    """Whether a tilex compilation is running in this context (hooks tilex installs in TVM leave other
    compilations alone)."""
    return _active.get()


def current() -> dict:
    """The tilex options in effect (short names)."""
    return dict(_current.get())


def get(name, default=None):
    return _current.get().get(name, default)
