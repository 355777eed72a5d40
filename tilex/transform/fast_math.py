"""FastMath: float32 ``exp2`` / ``exp`` on the hardware's approximate instruction.

Not a pass over the IR but CUDA lowering rules for TVM's ``tirx.exp2`` / ``tirx.exp``, registered on import ahead of
TVM's own and applied by its LowerIntrin, which runs after vectorization (an extern call in the IR would keep
TVM's VectorizeLoop from vectorizing the loads and stores around it). Float32 ``exp2(x)`` becomes
``tilex::exp2_approx(x)`` and ``exp(x)`` ``tilex::exp_approx(x)`` (one ``ex2.approx.ftz`` each; relative error about
2^-22, results below 2^-126 flushed to zero); ``tilex.disable_fast_math`` keeps the precise ``exp2f`` / ``expf``, as
does any compilation that is not tilex's, and other dtypes get what TVM's rules give them. The precise ``exp2f`` costs a range check and two multiplies around
the same instruction, which an attention softmax pays for every score.
"""
from __future__ import annotations

from tvm import tirx

from tilex import config
from tilex.ir import intrin

#: Above TVM's own CUDA rules (level 10), so these are the ones LowerIntrin applies.
RULE_LEVEL = 99


def _lowering(approx, precise):
    """The rule for one op: `approx` for float32 (scalar or vector) unless disabled, `precise` (the C function for
    float32; ``h``-prefixed for 16-bit floats, unsuffixed for float64, as TVM's CUDA rules print them)."""
    def lower(call):
        dtype = str(call.ty)
        base = dtype.split("x")[0]
        if base == "float32":
            # outside a tilex compilation (a plain TVM build in the same process) the kernel does not include
            # tilex's headers: TVM's own function then
            fast = config.active() and not config.get("disable_fast_math", False)
            name = approx if fast else precise
        elif base in ("float16", "bfloat16"):
            name = "h" + precise[:-1]
        else:
            name = precise[:-1]
        return tirx.call_pure_extern(dtype, name, *call.args)
    return lower


def register_rules():
    """Install the rules (done once on import; a later registration at a lower level does not replace them)."""
    tirx.op.register_intrin_lowering("tirx.exp2", "cuda", f=_lowering(intrin.EXP2_APPROX, "exp2f"),
                                     level=RULE_LEVEL)
    tirx.op.register_intrin_lowering("tirx.exp", "cuda", f=_lowering(intrin.EXP_APPROX, "expf"), level=RULE_LEVEL)


register_rules()
