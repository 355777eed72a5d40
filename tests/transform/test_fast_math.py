"""FastMath: float32 exp2 / exp on the approximate instruction through CUDA lowering rules (generated CUDA and
the rules on hand-built calls; no GPU needed)."""
import re

from tvm import tirx

import tilex
import tilex.language as T
from tilex import config
from tilex.ir import intrin
from tilex.transform.fast_math import _lowering

SM90 = "sm_90a"


def _float_program(dtype="float32", n=1024):
    @T.prim_func
    def main(A: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype), C: T.Tensor((n,), dtype),
             D: T.Tensor((n,), dtype), E: T.Tensor((n,), dtype)):
        with T.Kernel(n // 256, threads=128) as bx:
            for i in T.Parallel(256):
                C[bx * 256 + i] = T.exp2(A[bx * 256 + i])
                D[bx * 256 + i] = T.exp(B[bx * 256 + i])
                E[bx * 256 + i] = A[bx * 256 + i] / B[bx * 256 + i]

    return main


def _exp2_program(dtype, n=1024):
    @T.prim_func
    def main(A: T.Tensor((n,), dtype), C: T.Tensor((n,), dtype)):
        with T.Kernel(n // 256, threads=128) as bx:
            for i in T.Parallel(256):
                C[bx * 256 + i] = T.exp2(A[bx * 256 + i])

    return main


def _src(func, **kw):
    return tilex.compile(func, target=SM90, **kw).get_kernel_source()


def _kernel_body(src):
    """The device function(s) only: the included headers define the approximate functions themselves."""
    return src[src.index('extern "C" __global__'):]


def test_float32_exp2_exp_use_approx_and_stay_vectorized():
    body = _kernel_body(_src(_float_program()))
    assert "tilex::exp2_approx(" in body
    assert "tilex::exp_approx(" in body
    assert not re.search(r"\bexp2f\(", body)
    assert not re.search(r"\bexpf\(", body)
    # the rules apply after vectorization: the loads and stores around them are still 16-byte vectors
    assert "float4" in body
    assert re.search(r"\(\w+(\.[xyzw])?\s*/\s*\w+(\.[xyzw])?\)", body)  # float division stays IEEE


def test_disable_fast_math_keeps_precise_functions():
    body = _kernel_body(_src(_float_program(), pass_configs={"tilex.disable_fast_math": True}))
    assert "_approx(" not in body
    assert re.search(r"\bexp2f\(", body)
    assert re.search(r"\bexpf\(", body)


def test_float16_exp2_is_left_alone():
    body = _kernel_body(_src(_exp2_program("float16")))
    assert "_approx(" not in body
    assert "hexp2(" in body




# ---- the rules on hand-built calls ----------------------------------------------------------------------------


def _rule_name(op, dtype, in_tilex=True, **cfg):
    lower = _lowering(intrin.EXP2_APPROX, "exp2f") if op == "exp2" else _lowering(intrin.EXP_APPROX, "expf")
    x = tirx.Var("x", dtype)
    call = tirx.exp2(x) if op == "exp2" else tirx.exp(x)
    if in_tilex:
        with config.scope(cfg):
            out = lower(call)
    else:
        out = lower(call)
    assert str(out.ty) == dtype
    return str(out.args[0].value)


def test_rules_by_dtype():
    assert _rule_name("exp2", "float32") == intrin.EXP2_APPROX
    assert _rule_name("exp", "float32") == intrin.EXP_APPROX
    assert _rule_name("exp2", "float32x4") == intrin.EXP2_APPROX
    assert _rule_name("exp2", "float32", disable_fast_math=True) == "exp2f"
    assert _rule_name("exp", "float32", disable_fast_math=True) == "expf"
    assert _rule_name("exp2", "float16") == "hexp2"
    assert _rule_name("exp2", "float64") == "exp2"
    # a plain TVM compilation in the same process (no tilex headers) keeps TVM's function
    assert _rule_name("exp2", "float32", in_tilex=False) == "exp2f"
