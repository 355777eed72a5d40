"""What ptxas reports about a compiled kernel: registers, spills, stack frame, shared memory.

nvcc runs with ``--resource-usage`` (:data:`tilex.engine.nvcc.RESOURCE_FLAGS`), so its output holds, for every
entry function::

    ptxas info    : Compiling entry function 'main_kernel' for 'sm_90a'
    ptxas info    : Function properties for main_kernel
        9728 bytes stack frame, 9724 bytes spill stores, 9720 bytes spill loads
    ptxas info    : Used 255 registers, used 1 barriers, 1024 bytes smem, 400 bytes cmem[0]

:func:`parse_ptxas` turns that into a :class:`KernelResources` (one :class:`FunctionResources` per entry
function); ``JITKernel.resources`` holds it, and the kernel cache stores it (:meth:`KernelResources.to_json`) so a
kernel loaded from the cache has it too. :func:`warn_spills` emits a :class:`TilexPerformanceWarning` when ptxas
reports spills.
"""
from __future__ import annotations

import re
import warnings
from dataclasses import asdict, dataclass, field

__all__ = ["FunctionResources", "KernelResources", "TilexPerformanceWarning", "parse_ptxas", "warn_spills"]


class TilexPerformanceWarning(UserWarning):
    """A kernel compiled, but ptxas reports something that costs speed (registers spilled to local memory)."""


@dataclass(frozen=True)
class FunctionResources:
    """ptxas's report for one kernel (entry) function. Sizes are bytes; ``registers``, ``spill_*`` and
    ``stack_frame`` are per thread; ``shared_memory`` is the *static* shared memory per block (the dynamic
    shared memory TVM allocates for tiles is given at launch and is not in it); ``constant_memory`` sums the
    ``cmem[i]`` banks."""

    name: str
    arch: str = ""
    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack_frame: int = 0
    shared_memory: int = 0
    barriers: int = 0
    constant_memory: int = 0
    wgmma_serialized: str = ""  # ptxas's reason when it serialized the function's wgmma instructions (C7514 etc.)

    @property
    def spilled(self) -> bool:
        return bool(self.spill_stores or self.spill_loads)


@dataclass(frozen=True)
class KernelResources:
    """ptxas's statistics of every kernel function of a compiled program (``functions``: name ->
    :class:`FunctionResources`, in ptxas's order). The properties summarize them: ``registers``,
    ``stack_frame``, ``shared_memory`` are the largest over the functions, ``spill_stores`` / ``spill_loads``
    the sums. ``kernel.resources["main_kernel"]`` is one function's report."""

    functions: dict = field(default_factory=dict)

    def __getitem__(self, name: str) -> FunctionResources:
        return self.functions[name]

    def __iter__(self):
        return iter(self.functions.values())

    def __len__(self) -> int:
        return len(self.functions)

    def _max(self, attr):
        return max((getattr(f, attr) for f in self.functions.values()), default=0)

    def _sum(self, attr):
        return sum(getattr(f, attr) for f in self.functions.values())

    @property
    def registers(self) -> int:
        return self._max("registers")

    @property
    def stack_frame(self) -> int:
        return self._max("stack_frame")

    @property
    def shared_memory(self) -> int:
        return self._max("shared_memory")

    @property
    def spill_stores(self) -> int:
        return self._sum("spill_stores")

    @property
    def spill_loads(self) -> int:
        return self._sum("spill_loads")

    @property
    def spilled(self) -> bool:
        return any(f.spilled for f in self.functions.values())

    def to_json(self) -> list:
        """A JSON-able list of dicts (what the kernel cache stores)."""
        return [asdict(f) for f in self.functions.values()]

    @classmethod
    def from_json(cls, data) -> "KernelResources":
        known = set(FunctionResources.__dataclass_fields__)
        funcs = [FunctionResources(**{k: v for k, v in d.items() if k in known}) for d in data or ()]
        return cls({f.name: f for f in funcs})

    def summary(self) -> str:
        """One line per function: ``main_kernel (sm_90a): 255 registers, 9724 B spill stores, ...``."""
        return "\n".join(
            f"{f.name} ({f.arch or '?'}): {f.registers} registers, {f.spill_stores} B spill stores, "
            f"{f.spill_loads} B spill loads, {f.stack_frame} B stack frame, {f.shared_memory} B static smem"
            for f in self.functions.values())


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"ptxas info\s*: Used (\d+) registers(.*)")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[\d+\]")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SERIALIZED = re.compile(r"wgmma\.mma_async instructions are serialized due to (.*?)\s+in the function '([^']+)'")


def parse_ptxas(output: str, arch: str = "") -> KernelResources:
    """Parse ptxas's ``-v`` / nvcc ``--resource-usage`` report (other lines are ignored). Only entry functions
    (those with a ``Compiling entry function`` line) are reported; the ``Function properties`` of device
    functions ptxas did not inline are not attributed to a kernel."""
    entries: dict[str, dict] = {}
    props: dict[str, tuple[int, int, int]] = {}
    current = None      # the entry function whose "Used ..." line comes next
    serialized: dict[str, str] = {}
    prop_name = None    # the function whose "N bytes stack frame" line comes next
    for line in output.splitlines():
        m = _SERIALIZED.search(line)
        if m:
            serialized[m.group(2)] = " ".join(m.group(1).split())
            continue
        m = _ENTRY.search(line)
        if m:
            current = m.group(1)
            entries[current] = {"name": current, "arch": m.group(2) or arch}
            prop_name = None
            continue
        m = _PROPERTIES.search(line)
        if m:
            prop_name = m.group(1)
            continue
        m = _FRAME.search(line)
        if m and prop_name is not None:
            props[prop_name] = tuple(int(g) for g in m.groups())
            prop_name = None
            continue
        m = _USED.search(line)
        if m and current is not None:
            rest = m.group(2)
            e = entries[current]
            e["registers"] = int(m.group(1))
            sm = _SMEM.search(rest)
            e["shared_memory"] = int(sm.group(1)) if sm else 0
            bar = _BARRIERS.search(rest)
            e["barriers"] = int(bar.group(1)) if bar else 0
            e["constant_memory"] = sum(int(c) for c in _CMEM.findall(rest))
            current = None
    funcs = {}
    for name, e in entries.items():
        stack, stores, loads = props.get(name, (0, 0, 0))
        funcs[name] = FunctionResources(stack_frame=stack, spill_stores=stores, spill_loads=loads,
                                        wgmma_serialized=serialized.get(name, ""), **e)
    return KernelResources(funcs)


#: Spill traffic (store + load bytes per thread) from which a kernel gets a warning. ptxas routinely spills a few
#: words around a warp-specialized kernel's register reconfiguration (the 128x256 GEMM of the quickstart: 4 + 4
#: bytes), which costs nothing measurable; `kernel.resources` reports every byte either way.
SPILL_WARNING_BYTES = 64


def warn_spills(resources: KernelResources | None, kernel_name: str, stacklevel: int = 2) -> None:
    """Emit one :class:`TilexPerformanceWarning` per function of ``resources`` whose spill stores + loads reach
    :data:`SPILL_WARNING_BYTES` per thread, or whose wgmma instructions ptxas serialized (each waits for the
    previous one: the asynchronous MMAs the kernel was built around are gone)."""
    if resources is None:
        return
    for f in resources:
        if f.wgmma_serialized:
            warnings.warn(f"tilex: kernel '{kernel_name}': ptxas serialized the wgmma instructions of '{f.name}' "
                          f"({f.arch}) due to {f.wgmma_serialized}; the MMAs no longer overlap other work",
                          TilexPerformanceWarning, stacklevel=stacklevel + 1)
        if f.spill_stores + f.spill_loads >= SPILL_WARNING_BYTES:
            warnings.warn(
                f"tilex: kernel '{kernel_name}' spills registers to local memory: function '{f.name}' ({f.arch}) "
                f"uses {f.registers} registers per thread with {f.spill_stores} bytes spill stores and "
                f"{f.spill_loads} bytes spill loads ({f.stack_frame} bytes stack frame); smaller tiles or more "
                f"threads per block give each thread fewer values to hold",
                TilexPerformanceWarning, stacklevel=stacklevel + 1)
