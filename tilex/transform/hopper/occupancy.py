"""Occupancy of a warp-specialized kernel: resident blocks per multiprocessor and the register split that follows.

One rule, used by WarpSpecialize (the register split and the launch bounds) and by the passes that decide how much
shared memory to spend before it runs (StageEpilogue): what they plan and what the launch gets must agree.
"""
from __future__ import annotations

from tvm import tirx

from tilex import config, env
from tilex.ir.hardware import (REGS_PER_SM, SMEM_PER_SM, SMEM_RESERVED_PER_BLOCK, block_shared_memory_limit,
                               compute_capability, num_sms)
from tilex.ir.shared_memory import block_footprint, buffer_bits, shared_usage
from tilex.ir.visit import walk

#: Registers the producer warpgroup keeps after ``setmaxnreg.dec``.
PRODUCER_REGS = 40
#: Registers a consumer thread needs beyond its locals (accumulators): addresses, descriptors, loop counters and
#: the epilogue's temporaries. The consumers' budget after ``setmaxnreg.inc`` must leave this much; ptxas
#: allocates the consumer branch up to that budget (0 spills for a 128-register accumulator under a 128-register
#: entry cap raised to 216, nvcc 13.0).
CONSUMER_SPARE_REGS = 64
#: A ``setmaxnreg`` operand: a multiple of 8 in [24, 256); tilex raises to at most 240.
MAX_CONSUMER_REGS = 240


def multiprocessors(target) -> int:
    """The multiprocessors a grid is planned for: ``tilex.num_sms``, else the target arch's count (the default
    arch's without a target)."""
    arch = env.target_arch(target) if target is not None else env.DEFAULT_ARCH
    return int(config.get("num_sms", 0) or num_sms(arch))


def fits_block(static: int, dynamic: int, target) -> bool:
    """Whether a block with that much shared memory can launch on `target`."""
    return block_footprint(static, dynamic) <= block_shared_memory_limit(compute_capability(target)[0])


def register_budget(consumers: int, smem_bytes: int, local_words: int = 0):
    """(blocks per multiprocessor, registers per thread at entry, consumer registers after ``setmaxnreg``) for a
    block of `consumers` threads plus the producer warpgroup taking `smem_bytes` of shared memory (its footprint)
    and `local_words` registers of locals per consumer thread.

    Two blocks share a multiprocessor when their shared memory fits and the consumers' raised budget still holds
    their locals with CONSUMER_SPARE_REGS to spare. The producer warpgroup drops to PRODUCER_REGS and the
    consumers take what it frees (a multiple of 8, at most MAX_CONSUMER_REGS)."""
    total = consumers + 128

    def plan(blocks):
        entry = min(255, REGS_PER_SM // (blocks * total)) // 8 * 8
        return blocks, entry, min(MAX_CONSUMER_REGS, (entry * total - PRODUCER_REGS * 128) // consumers // 8 * 8)

    if SMEM_PER_SM // max(1, smem_bytes + SMEM_RESERVED_PER_BLOCK) >= 2:
        two = plan(2)
        if two[2] >= local_words + CONSUMER_SPARE_REGS:
            return two
    return plan(1)


def blocks_per_sm(consumers: int, static: int, dynamic: int, local_words: int = 0) -> int:
    """Resident blocks per multiprocessor of a warp-specialized kernel (`register_budget`)."""
    return register_budget(consumers, block_footprint(static, dynamic), local_words)[0]


def local_words(body, threads: int) -> int:
    """32-bit registers per thread the fragments (dealt to `threads` threads) and locals allocated in a tile
    program's `body` take, as WarpSpecialize counts them once they are lowered."""
    words = [0]

    def on_alloc(node):
        scope, bits = str(node.buffer.scope()), buffer_bits(node.buffer)
        if bits is None:
            return
        if scope == "local.fragment":
            words[0] += (bits // threads + 31) // 32
        elif scope == "local":
            words[0] += (bits + 31) // 32

    walk(body, (tirx.AllocBuffer, on_alloc))
    return words[0]


def tile_program_blocks_per_sm(body, threads: int, extra_dynamic: int = 0) -> int | None:
    """`blocks_per_sm` of a warp-specialized tile program (after pipelining: its stages are allocated) with
    `extra_dynamic` more bytes of dynamic shared memory; None when a shared buffer's size is not constant."""
    usage, unknown = shared_usage(body)
    if unknown:
        return None
    return blocks_per_sm(threads, usage["static"], usage["dynamic"] + extra_dynamic, local_words(body, threads))
