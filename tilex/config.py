"""tilex's own compile options (``pass_configs`` keys ``tilex.*``; TileLang's ``tl.*`` spellings are accepted).

TVM's PassContext only takes options registered in C++, so tilex keeps its own next to it: `build` splits the
user's ``pass_configs`` into TVM options and tilex options and makes the latter current while it compiles.
"""
from __future__ import annotations

import contextlib
import contextvars

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
}

_current: contextvars.ContextVar[dict] = contextvars.ContextVar("tilex_config", default={})


def split(pass_configs):
    """(tilex options {short name: value}, TVM PassContext options) from a user ``pass_configs`` dict."""
    ours, theirs = {}, {}
    for key, value in dict(pass_configs or {}).items():
        for prefix in ("tilex.", "tl."):
            if key.startswith(prefix):
                name = key[len(prefix):]
                if name not in KNOWN:
                    raise ValueError(f"unknown pass config '{key}'; tilex knows: "
                                     + ", ".join(f"tilex.{k} ({v})" for k, v in KNOWN.items()))
                ours[name] = value
                break
        else:
            theirs[key] = value
    return ours, theirs


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
