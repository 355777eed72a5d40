"""T.Parallel: a store of a select whose integer condition is uniform over the tile (a causal or bounds mask) is
split three ways -- the condition holds everywhere, nowhere, or per element (`tile_uniform_select` and the
generated CUDA; no GPU needed)."""
import re

import tvm
import tvm_ffi
from tvm import tirx

import tilex
import tilex.language as T
from tilex.ir.visit import substitute, walk
from tilex.op.parallel import tile_uniform_select

NEG_INF = -tirx.infinity("float32")


def _vars():
    return (tirx.Var("i", "int32"), tirx.Var("j", "int32"), tirx.Var("bx", "int32"), tirx.Var("k", "int32"),
            tirx.Var("n", "int32"))


def _acc():
    return tirx.decl_buffer((64, 64), "float32", "acc", scope="local.fragment")


def _select_store(cond, i, j, buf=None):
    buf = buf if buf is not None else _acc()
    return tirx.BufferStore(buf, tirx.if_then_else(cond, tirx.const(0.0, "float32"), NEG_INF), [i, j])


def _free_vars(expr):
    out = []
    walk(expr, (tvm.ir.Var, out.append))
    return out


def _value(cond, **binds):
    """The condition with block / loop scalars replaced by values, simplified to a Python bool."""
    ana = tvm.sym.Analyzer()
    names = {v.name: v for v in _free_vars(cond)}
    e = ana.simplify(substitute(cond, {names[k]: tirx.const(v, "int32") for k, v in binds.items() if k in names}))
    assert isinstance(e, tirx.IntImm), e
    return bool(e.value)


def test_causal_mask_splits():
    i, j, bx, k, _ = _vars()
    body = _select_store(bx * 64 + i >= k * 64 + j, i, j)
    split = tile_uniform_select(body, [i, j], [64, 64], tvm.sym.Analyzer())
    assert split is not None
    everywhere, nowhere, when_true, when_false = split
    for c in (everywhere, nowhere):
        names = {v.name for v in _free_vars(c)}
        assert "i" not in names and "j" not in names and names <= {"bx", "k"}, c
    # below the diagonal: every element kept; above it: every element masked; on it: per element
    assert _value(everywhere, bx=3, k=1) and not _value(nowhere, bx=3, k=1)
    assert not _value(everywhere, bx=1, k=3) and _value(nowhere, bx=1, k=3)
    for b in range(4):
        assert not _value(everywhere, bx=b, k=b) and not _value(nowhere, bx=b, k=b)
    # exact edges: bx - k = 1 keeps rows 64.. >= keys 0..63 everywhere; bx - k = -1: row 63 < key 64 everywhere
    assert _value(everywhere, bx=2, k=1) and _value(nowhere, bx=1, k=2)
    # the two bodies store the select's branches at the same indices
    assert isinstance(when_true, tirx.BufferStore) and isinstance(when_false, tirx.BufferStore)
    assert when_true.buffer.same_as(body.buffer) and when_false.buffer.same_as(body.buffer)
    assert [str(x) for x in when_true.indices] == ["i", "j"] == [str(x) for x in when_false.indices]
    assert isinstance(when_true.value, tirx.FloatImm) and when_true.value.value == 0.0
    assert tvm_ffi.structural_equal(when_false.value, NEG_INF)


def test_conjunction_of_comparisons():
    i, j, bx, k, n = _vars()
    # causal and key bounds (k * 64 + j < n)
    body = _select_store(tirx.And(bx * 64 + i >= k * 64 + j, k * 64 + j < n), i, j)
    split = tile_uniform_select(body, [i, j], [64, 64], tvm.sym.Analyzer())
    assert split is not None
    everywhere, nowhere = split[:2]
    for c in (everywhere, nowhere):
        assert {v.name for v in _free_vars(c)} <= {"bx", "k", "n"}, c
    # both hold on the whole tile only when the block is below the diagonal and inside the keys
    assert _value(everywhere, bx=3, k=1, n=1024)
    assert not _value(everywhere, bx=3, k=1, n=100)  # keys 64..127 partly past n = 100
    assert not _value(nowhere, bx=3, k=1, n=100)
    # either part failing everywhere masks the whole tile
    assert _value(nowhere, bx=1, k=3, n=1024)
    assert _value(nowhere, bx=3, k=1, n=64)  # keys 64.. all past n
    assert not _value(everywhere, bx=2, k=2, n=1024) and not _value(nowhere, bx=2, k=2, n=1024)


def test_float_condition_is_not_split():
    i, j, _, _, _ = _vars()
    src = tirx.decl_buffer((64, 64), "float32", "s", scope="local.fragment")
    body = _select_store(tirx.BufferLoad(src, [i, j]) > tirx.const(0.0, "float32"), i, j)
    assert tile_uniform_select(body, [i, j], [64, 64], tvm.sym.Analyzer()) is None


def test_non_select_body_is_not_split():
    i, j, bx, k, _ = _vars()
    acc = _acc()
    plain = tirx.BufferStore(acc, tirx.const(0.0, "float32"), [i, j])
    assert tile_uniform_select(plain, [i, j], [64, 64], tvm.sym.Analyzer()) is None
    # a select inside arithmetic is not a stored select
    inner = tirx.BufferStore(acc, tirx.BufferLoad(acc, [i, j]) + tirx.if_then_else(
        bx * 64 + i >= k * 64 + j, tirx.const(0.0, "float32"), NEG_INF), [i, j])
    assert tile_uniform_select(inner, [i, j], [64, 64], tvm.sym.Analyzer()) is None
    # a sequence of statements
    seq = tirx.SeqStmt([plain, _select_store(bx * 64 + i >= k * 64 + j, i, j, acc)])
    assert tile_uniform_select(seq, [i, j], [64, 64], tvm.sym.Analyzer()) is None


def test_statically_decided_condition_is_not_split():
    i, j, _, _, _ = _vars()
    # i >= 0 holds on the whole tile whatever the block: nothing to hoist
    assert tile_uniform_select(_select_store(i + 64 >= j, i, j), [i, j], [64, 64], tvm.sym.Analyzer()) is None


# ---- generated CUDA --------------------------------------------------------------------------------------------


def _masked_program(M=256, N=256, bm=64, bn=64, pipelined=False):
    """Per row block bx, the sum over key blocks k of A's tile masked causally (row >= key), written to C."""
    stage = T.Pipelined if pipelined else T.serial

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), C: T.Tensor((M, bn), "float32")):
        with T.Kernel(M // bm, threads=128) as bx:
            acc = T.alloc_fragment((bm, bn), "float32")
            total = T.alloc_fragment((bm, bn), "float32")
            T.clear(total)
            for k in stage(N // bn):
                for i, j in T.Parallel(bm, bn):
                    acc[i, j] = T.if_then_else(bx * bm + i >= k * bn + j, 0, -T.infinity("float32"))
                for i, j in T.Parallel(bm, bn):
                    total[i, j] += T.exp2(acc[i, j] + A[bx * bm + i, k * bn + j])
            T.copy(total, C[bx * bm, 0])

    return main


_SPLIT = re.compile(r"if \(([^\n]*)\) \{\n(.*?)\n\s*\} else \{\n\s*if \(([^\n]*)\) \{\n(.*?)\n\s*\} else \{\n"
                    r"(.*?acc_ptr\[[^\n]*\] = condval;)", re.S)


def _eval_c(cond, bx, k):
    """A C condition of blockIdx.x and k, evaluated in Python."""
    expr = cond.replace("((int)blockIdx.x)", str(bx)).replace("&&", " and ").replace("||", " or ")
    expr = re.sub(r"\bk\b", str(k), expr)
    assert re.fullmatch(r"[0-9 ()+\-*<>=a-z]*", expr), expr
    return bool(eval(expr))


def _check_three_way(src):
    body = src[src.index('extern "C" __global__'):]
    m = _SPLIT.search(body)
    assert m, body
    everywhere, unmasked, nowhere, masked, per_element = m.groups()
    # the two tests read the block index and the loop variable only
    for cond in (everywhere, nowhere):
        assert "blockIdx.x" in cond and re.search(r"\bk\b", cond) and "threadIdx" not in cond, cond
    # the unmasked fill stores zeros, the all-masked fill -inf, both without a per-element test
    assert "acc_ptr" in unmasked and "0x0p+0f" in unmasked and "INF" not in unmasked and " if " not in unmasked
    assert "acc_ptr" in masked and "-CUDART_INF_F" in masked and "0x0p+0f" not in masked and " if " not in masked
    # the diagonal block selects per element on the thread's row and column
    sel = re.search(r"if \(([^\n]*)\) \{\s*condval = 0x0p\+0f", per_element)
    assert sel and "threadIdx.x" in sel.group(1) and "blockIdx.x" in sel.group(1), per_element
    assert "condval = -CUDART_INF_F;" in per_element
    # the uniform tests: below the diagonal (bx > k) unmasked, above it masked, on it per element
    for bx, k in [(3, 1), (2, 1), (3, 0)]:
        assert _eval_c(everywhere, bx, k)
    for bx, k in [(1, 3), (1, 2), (0, 3)]:
        assert not _eval_c(everywhere, bx, k) and _eval_c(nowhere, bx, k)
    for b in range(4):
        assert not _eval_c(everywhere, b, b) and not _eval_c(nowhere, b, b)


def test_compiled_serial_loop_has_three_way_split():
    src = tilex.compile(_masked_program(), target="sm_90a").get_kernel_source()
    _check_three_way(src)


def test_compiled_pipelined_loop_has_three_way_split():
    src = tilex.compile(_masked_program(pipelined=True), target="sm_90a").get_kernel_source()
    _check_three_way(src)
