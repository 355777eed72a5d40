"""TileLang's pass-config keys (tilex.PassConfigKey) and compile_flags: every key honoured, translated, accepted as a
no-op or refused by name; translations reach the generated code; extra nvcc flags reach nvcc and the cache key
(sm_90a on the CPU: nvcc compiles, nothing runs)."""
import re

import pytest
import tvm_ffi

import tilex
import tilex.language as T
from tilex import config
from tilex.engine import nvcc
from tilex.ir import intrin
from tilex.jit import cache
from tilex.pass_config import HANDLING, KINDS, PassConfigKey, compile_flag_tokens

from programs import matmul
from sm90_lowering import PIN, SM90, lowered

K = PassConfigKey
NOTHING = ({}, {})


def _flags(*flags):
    return {"device_compile_flags": list(flags)}


# member -> (kind, a value programs pass, what split makes of it (tilex options, TVM options), a refused value)
EXPECTED = {
    K.TL_SIMPLIFY: ("no-op", {K.TL_SIMPLIFY_ENABLE_LET_INLINE: False}, NOTHING, None),
    **{k: ("sub-key", True, None, None) for k in K if k.name.startswith("TL_SIMPLIFY_")},
    K.TL_DISABLE_BUFFER_INIT_CHECK: ("no-op", True, NOTHING, None),
    K.TL_DISABLE_DATA_RACE_CHECK: ("refused", True, NOTHING, False),
    K.TL_DISABLE_PRELOWER_SEMANTIC_CHECK: ("no-op", True, NOTHING, None),
    K.TL_DISABLE_WARP_SPECIALIZED: ("translated", True, ({"disable_warp_specialized": True}, {}), None),
    K.TL_ENABLE_FAST_MATH: ("translated", True, ({"disable_fast_math": False, **_flags("--use_fast_math")}, {}),
                            None),
    K.TL_PTXAS_REGISTER_USAGE_LEVEL: ("honoured", 10, (_flags("--ptxas-options=--register-usage-level=10"), {}),
                                      None),
    K.TL_DEVICE_COMPILE_FLAGS: ("honoured", "-DA=1 -I/opt/inc", (_flags("-DA=1", "-I/opt/inc"), {}), None),
    K.TL_EMIT_LINE_DIRECTIVES: ("refused", False, NOTHING, True),
    K.TL_CONFIG_INDEX_BITWIDTH: ("honoured", 32, NOTHING, 64),
    K.TL_ENABLE_REDUCER_PLAN_VERBOSE: ("refused", False, NOTHING, True),
    K.TL_LAYOUT_COST_MODEL: ("no-op", "io-aware", NOTHING, None),
    K.TL_REDUCER_FORCE_BASELINE: ("no-op", True, NOTHING, None),
    K.TL_DISABLE_TMA_LOWER: ("translated", True, ({"disable_tma": True}, {}), None),
    K.TL_DISABLE_SAFE_MEMORY_ACCESS: ("no-op", True, NOTHING, None),
    K.TL_DISABLE_VECTORIZE_256: ("no-op", True, NOTHING, None),
    K.TL_ENABLE_ASYNC_COPY: ("honoured", True, NOTHING, False),
    K.TL_ENABLE_LOWER_LDGSTG: ("no-op", True, NOTHING, None),
    K.TL_ENABLE_LOWER_LDGSTG_PREDICATED: ("no-op", True, NOTHING, None),
    K.TL_ENABLE_VECTORIZE_PLANNER_VERBOSE: ("refused", False, NOTHING, True),
    K.TL_DISABLE_WGMMA: ("translated", True, ({"disable_wgmma": True}, {}), None),
    K.TL_DEBUG_MERGE_SHARED_MEMORY_ALLOCATIONS: ("refused", False, NOTHING, True),
    K.TL_ENABLE_AGGRESSIVE_SHARED_MEMORY_MERGE: ("no-op", True, NOTHING, None),
    K.TL_DISABLE_SHARED_MEMORY_REUSE: ("honoured", True, NOTHING, None),
    K.TL_DISABLE_SHUFFLE_ELECT: ("no-op", True, NOTHING, None),
    K.TL_DISABLE_LOOP_UNSWITCHING: ("no-op", True, NOTHING, None),
    K.TL_LOOP_UNSWITCHING_ALLOW_NON_TRIVIAL_ELSE: ("no-op", True, NOTHING, None),
    K.TL_IF_STMT_BINDING_INLINE_REPLAYABLE_BINDS: ("no-op", False, NOTHING, None),
    K.TL_DISABLE_THREAD_STORAGE_SYNC: ("translated", True, ({"trust_program_barriers": True}, {}), None),
    K.TL_FORCE_LET_INLINE: ("no-op", True, NOTHING, None),
    K.TL_AST_PRINT_ENABLE: ("refused", False, NOTHING, True),
    K.TL_LAYOUT_VISUALIZATION_ENABLE: ("refused", False, NOTHING, True),
    K.TL_LAYOUT_VISUALIZATION_FORMATS: ("no-op", "png", NOTHING, None),
    K.TL_STORAGE_REWRITE_DETECT_INPLACE: ("no-op", True, NOTHING, None),
    K.TIR_ENABLE_EQUIV_TERMS_IN_CSE: ("no-op", True, NOTHING, None),
    K.TIR_DISABLE_CSE: ("honoured", True, ({}, {"tirx.disable_cse_tir": True}), None),
    K.TIR_SIMPLIFY: ("no-op", True, NOTHING, None),
    K.TIR_DISABLE_STORAGE_REWRITE: ("honoured", True, ({}, {"tirx.disable_storage_rewrite": True}), None),
    K.TIR_DISABLE_VECTORIZE: ("honoured", True, ({}, {"tirx.disable_vectorize": True}), None),
    K.TIR_USE_ASYNC_COPY: ("honoured", True, NOTHING, False),
    K.TIR_ENABLE_DEBUG: ("no-op", True, NOTHING, None),
    K.TIR_MERGE_STATIC_SMEM: ("no-op", True, NOTHING, None),
    K.TIR_ADD_LOWER_PASS: ("refused", [], NOTHING, [(1, "a pass")]),
    K.TIR_NOALIAS: ("honoured", True, NOTHING, False),
    K.CUDA_KERNELS_OUTPUT_DIR: ("honoured", "/tmp/kernels", ({"kernels_output_dir": "/tmp/kernels"}, {}), None),
    K.TL_DISABLE_OUT_OF_BOUND_WARNING: ("no-op", True, NOTHING, None),
    K.TL_ENABLE_DUMP_IR: ("refused", False, NOTHING, True),
    K.TL_DUMP_IR_DIR: ("no-op", "./dump_ir", NOTHING, None),
    K.TL_PASS_PROFILE: ("refused", False, NOTHING, True),
    K.TL_PASS_PROFILE_THRESHOLD_MS: ("no-op", 5, NOTHING, None),
    K.TL_DISABLE_FAST_MATH: ("translated", True, ({"disable_fast_math": True}, {}), None),
    K.TL_ENABLE_PTXAS_VERBOSE_OUTPUT: ("no-op", True, NOTHING, None),
}


# ------------------------------------------------------------------------------------------------
# the enum
# ------------------------------------------------------------------------------------------------
def test_enum_is_exported_and_behaves_like_its_strings():
    assert tilex.PassConfigKey is PassConfigKey and "PassConfigKey" in tilex.__all__
    assert K.TL_DISABLE_TMA_LOWER == "tl.disable_tma_lower" and isinstance(K.TL_DISABLE_TMA_LOWER, str)
    assert {K.TL_DISABLE_TMA_LOWER: True}["tl.disable_tma_lower"] is True
    assert K("tirx.disable_vectorize") is K.TIR_DISABLE_VECTORIZE
    assert K.TL_ENABLE_FAST_MATH.handling is HANDLING[K.TL_ENABLE_FAST_MATH]


def test_every_member_is_handled_and_listed_here():
    assert set(HANDLING) == set(K) == set(EXPECTED)
    assert {h.kind for h in HANDLING.values()} <= set(KINDS)
    assert all(h.note for h in HANDLING.values())


def test_translations_name_tilex_options():
    for key, (_, value, expected, _) in EXPECTED.items():
        if expected is not None:
            assert set(expected[0]) <= set(config.KNOWN), key


@pytest.mark.parametrize("key", list(K), ids=lambda k: k.name)
def test_each_key_is_honoured_translated_no_op_or_refused(key):
    kind, value, expected, refused = EXPECTED[key]
    assert key.handling.kind == kind
    if kind == "sub-key":
        with pytest.raises(ValueError, match="tl.Simplify"):
            config.split({key: value})
        return
    assert config.split({key: value}) == expected
    assert config.split({key.value: value}) == expected  # the string spelling is the same key
    if kind == "no-op":
        assert expected == NOTHING
    if kind == "translated":
        assert expected[0]
    if kind == "refused":
        assert refused is not None
    if refused is not None:
        with pytest.raises(NotImplementedError, match=re.escape(key.value)):
            config.split({key: refused})


# ------------------------------------------------------------------------------------------------
# split: values, conflicts, unknown keys, TVM's keys
# ------------------------------------------------------------------------------------------------
def test_fast_math_false_asks_for_precise_math():
    assert config.split({K.TL_ENABLE_FAST_MATH: False}) == ({"disable_fast_math": True}, {})


def test_tilex_names_keep_working():
    ours, theirs = config.split({"tilex.disable_tma": True, "tl.num_sms": 132, "tilex.stream_k": 0})
    assert ours == {"disable_tma": True, "num_sms": 132, "stream_k": 0} and theirs == {}


def test_legacy_tir_spelling_reads_as_tirx():
    assert config.split({"tir.disable_vectorize": True}) == ({}, {"tirx.disable_vectorize": True})


def test_other_tvm_options_go_to_tvm():
    assert config.split({"tirx.disable_assert": True}) == ({}, {"tirx.disable_assert": True})


@pytest.mark.parametrize("key", ["tl.no_such_option", "tilex.no_such_option", "foo.bar", "tir.no_such_option"])
def test_unknown_keys_are_value_errors(key):
    with pytest.raises(ValueError, match="unknown pass config"):
        config.split({key: True})


def test_bad_values_and_keys():
    with pytest.raises(TypeError, match="True or False"):
        config.split({K.TL_DISABLE_WARP_SPECIALIZED: "false"})
    with pytest.raises(ValueError, match="0 to 10"):
        config.split({K.TL_PTXAS_REGISTER_USAGE_LEVEL: 11})
    with pytest.raises(ValueError, match="unknown simplifier option"):
        config.split({K.TL_SIMPLIFY: {"no_such_option": True}})
    with pytest.raises(TypeError, match="strings or tilex.PassConfigKey"):
        config.split({3: True})


def test_two_keys_disagreeing_on_one_option():
    with pytest.raises(ValueError, match="disagree on tilex.disable_fast_math"):
        config.split({K.TL_ENABLE_FAST_MATH: True, "tilex.disable_fast_math": True})
    with pytest.raises(ValueError, match="disagree on tilex.disable_tma"):
        config.split({K.TL_DISABLE_TMA_LOWER: True, "tilex.disable_tma": False})
    assert config.split({K.TL_DISABLE_TMA_LOWER: True, "tilex.disable_tma": True})[0] == {"disable_tma": True}


def test_flags_of_several_keys_join_in_order():
    ours, _ = config.split({K.TL_DEVICE_COMPILE_FLAGS: ["-DA"], K.TL_ENABLE_FAST_MATH: True,
                            "tilex.device_compile_flags": "-DB"})
    assert ours["device_compile_flags"] == ["-DA", "--use_fast_math", "-DB"]


# ------------------------------------------------------------------------------------------------
# translations reach the generated code
# ------------------------------------------------------------------------------------------------
def _gemm():
    return matmul(1024, 1024, 1024)


@pytest.mark.parametrize("tl_key, tilex_key", [(K.TL_DISABLE_WARP_SPECIALIZED, "tilex.disable_warp_specialized"),
                                               (K.TL_DISABLE_TMA_LOWER, "tilex.disable_tma"),
                                               ("tl.disable_wgmma", "tilex.disable_wgmma")])
def test_translated_keys_lower_as_their_tilex_option(tl_key, tilex_key):
    default = lowered(_gemm()).script()
    translated = lowered(_gemm(), **{tl_key: True}).script()
    assert translated == lowered(_gemm(), **{tilex_key: True}).script()
    assert translated != default


def test_disable_warp_specialized_changes_the_cuda_as_tilex_option_does():
    def source(**cfg):
        return tilex.compile(_gemm(), out_idx=-1, target="sm_90a", pass_configs={**PIN, **cfg}).get_kernel_source()

    default = source()
    assert intrin.REG_ALLOC in default  # warp-specialized: the consumers raise their register budget
    tl = source(**{K.TL_DISABLE_WARP_SPECIALIZED: True})
    assert tl == source(**{"tilex.disable_warp_specialized": True})
    assert intrin.REG_ALLOC not in tl


def _exp2_program(n=1024):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), C: T.Tensor((n,), "float32")):
        with T.Kernel(n // 256, threads=128) as bx:
            for i in T.Parallel(256):
                C[bx * 256 + i] = T.exp2(A[bx * 256 + i])

    return main


def _body(kernel):
    src = kernel.get_kernel_source()
    return src[src.index('extern "C" __global__'):]


def test_enable_fast_math_reaches_codegen_and_nvcc():
    with nvcc.capture() as runs:
        fast = tilex.compile(_exp2_program(), target="sm_90a", pass_configs={K.TL_ENABLE_FAST_MATH: True})
    assert intrin.EXP2_APPROX in _body(fast)
    assert "--use_fast_math" in runs[-1].command
    with nvcc.capture() as runs:
        precise = tilex.compile(_exp2_program(), target="sm_90a", pass_configs={K.TL_ENABLE_FAST_MATH: False})
    assert re.search(r"\bexp2f\(", _body(precise)) and intrin.EXP2_APPROX not in _body(precise)
    assert "--use_fast_math" not in runs[-1].command


def test_disable_vectorize_reaches_tvm_in_both_spellings():
    vectorized = _body(tilex.compile(_exp2_program(), target="sm_90a"))
    serial = _body(tilex.compile(_exp2_program(), target="sm_90a", pass_configs={K.TIR_DISABLE_VECTORIZE: True}))
    assert "float4" in vectorized and "float4" not in serial
    assert serial == _body(tilex.compile(_exp2_program(), target="sm_90a",
                                         pass_configs={"tir.disable_vectorize": True}))


def test_refused_key_fails_the_compilation_by_name():
    with pytest.raises(NotImplementedError, match="tl.enable_async_copy"):
        tilex.compile(_exp2_program(), target="sm_90a", pass_configs={K.TL_ENABLE_ASYNC_COPY: False})


def test_kernels_output_dir_receives_the_source(tmp_path):
    out = tmp_path / "kernels"
    tilex.compile(_exp2_program(), target="sm_90a", cache=False,
                  pass_configs={K.CUDA_KERNELS_OUTPUT_DIR: str(out)})
    files = list(out.glob("*.cu"))
    assert len(files) == 1 and "__global__" in files[0].read_text()


# ------------------------------------------------------------------------------------------------
# compile_flags
# ------------------------------------------------------------------------------------------------
def test_flag_tokens():
    assert compile_flag_tokens("-DA=1  -I'/opt/my inc'") == ["-DA=1", "-I/opt/my inc"]
    assert compile_flag_tokens(["-DA=1 -DB", "--use_fast_math"]) == ["-DA=1", "-DB", "--use_fast_math"]
    assert compile_flag_tokens(("-lineinfo",)) == ["-lineinfo"]
    assert compile_flag_tokens("-O3 -objtemp") == ["-O3", "-objtemp"]  # -O3 is not -o
    with pytest.raises(TypeError, match="string or a list of strings"):
        compile_flag_tokens(3)
    with pytest.raises(TypeError, match="string or a list of strings"):
        compile_flag_tokens(["-DA", 1])


@pytest.mark.parametrize("flags", ["-o x", "-o=x.cubin", "--output-file x", "-odir /tmp", "-arch=sm_80",
                                   "-arch sm_80", "--gpu-architecture=sm_80", "-code=sm_80",
                                   "-gencode arch=compute_80,code=sm_80", "--generate-code=arch=compute_80",
                                   "--ptx", "-c", "-E", "--fatbin", "-optf more.txt", "-Xptxas -arch=sm_80",
                                   "--ptxas-options=-v,-o,x"])
def test_flags_that_change_output_or_arch_are_refused(flags):
    with pytest.raises(ValueError, match="not allowed"):
        compile_flag_tokens(flags)


def test_compile_refuses_bad_flags_before_compiling():
    count = nvcc.compile_count()
    with pytest.raises(ValueError, match="'-o' is not allowed"):
        tilex.compile(_exp2_program(), target="sm_90a", compile_flags="-o x")
    with pytest.raises(ValueError, match="-gencode"):
        tilex.compile(_exp2_program(), target="sm_90a", pass_configs={K.TL_DEVICE_COMPILE_FLAGS: ["-gencode", "x"]})
    with pytest.raises(ValueError, match="-arch=sm_80"):
        tilex.jit(compile_flags=["-arch=sm_80"])
    assert nvcc.compile_count() == count


def test_compile_flags_reach_nvcc():
    with nvcc.capture() as runs:
        tilex.compile(_exp2_program(), target="sm_90a", cache=False, compile_flags=["-DTILEX_TEST_FLAG=1 -DB"],
                      pass_configs={K.TL_DEVICE_COMPILE_FLAGS: "-DA"})
    cmd = list(runs[-1].command)
    assert cmd.index("-DA") < cmd.index("-DTILEX_TEST_FLAG=1") < cmd.index("-DB") < cmd.index("-o")


def test_compile_flags_change_what_nvcc_compiles(tmp_path):
    header = tmp_path / "flag_check.h"
    header.write_text("#ifdef TILEX_TEST_FLAG\n#error tilex test flag reached nvcc\n#endif\n")
    tilex.compile(_exp2_program(), target="sm_90a", cache=False, compile_flags=["-include", str(header)])
    with pytest.raises(tilex.TilexCompileError, match="tilex test flag reached nvcc"):
        tilex.compile(_exp2_program(), target="sm_90a", cache=False,
                      compile_flags=["-DTILEX_TEST_FLAG=1", "-include", str(header)])


def test_jit_compile_flags_reach_nvcc_and_autotune():
    @tilex.jit(compile_flags="-DTILEX_TEST_FLAG=2")
    def exp2(n):
        return _exp2_program(n)

    assert exp2.compile_flags == "-DTILEX_TEST_FLAG=2"
    assert exp2.__tilex_compile_args__["pass_configs"] == {"tilex.device_compile_flags": ["-DTILEX_TEST_FLAG=2"]}
    with nvcc.capture() as runs:
        exp2.compile(512)
    assert "-DTILEX_TEST_FLAG=2" in runs[-1].command


def test_compile_flags_are_part_of_the_cache_key():
    f = _exp2_program()
    base = cache.make_key(f, None, SM90, None)
    with_flags = cache.make_key(f, None, SM90, config.with_compile_flags(None, ["-DX=1"]))
    assert with_flags != base
    assert with_flags != cache.make_key(f, None, SM90, config.with_compile_flags(None, ["-DX=2"]))
    kernel = tilex.compile(f, target="sm_90a", compile_flags="-DX=1")
    assert kernel.pass_configs == {"tilex.device_compile_flags": ["-DX=1"]}
    assert kernel.cache_key == cache.make_key(f, kernel.out_idx, kernel.target, kernel.pass_configs)
    assert kernel.cache_key != tilex.compile(f, target="sm_90a").cache_key
    # a member and its string are one key
    assert cache.make_key(f, None, SM90, {K.TL_DISABLE_TMA_LOWER: True}) == \
        cache.make_key(f, None, SM90, {"tl.disable_tma_lower": True})


def test_with_compile_flags_appends_to_the_tilex_option():
    merged = config.with_compile_flags({"tilex.device_compile_flags": "-DA", "tilex.num_sms": 132}, "-DB -DC")
    assert merged == {"tilex.device_compile_flags": ["-DA", "-DB", "-DC"], "tilex.num_sms": 132}
    cfg = {"tilex.num_sms": 132}
    assert config.with_compile_flags(cfg, None) is cfg and config.with_compile_flags(cfg, []) is cfg


def test_compile_callback_passes_the_options_in_effect(tmp_path):
    """What TVM's compile callback (a GPU machine's path) gives nvcc: the flags of the tilex options in effect."""
    source = tilex.compile(_exp2_program(), target="sm_90a", cache=False).get_kernel_source()
    options = config.split({K.TL_ENABLE_FAST_MATH: True, K.CUDA_KERNELS_OUTPUT_DIR: str(tmp_path)})[0]
    with config.scope(options), SM90, nvcc.capture() as runs:
        nvcc.register_hooks()
        tvm_ffi.get_global_func("tvm_callback_cuda_compile")(source)
    assert "--use_fast_math" in runs[-1].command
    assert len(list(tmp_path.glob("*.cu"))) == 1
    with nvcc.capture() as runs:  # outside a tilex compilation: no extra flags
        nvcc.compile_cuda(source, "sm_90a")
    assert "--use_fast_math" not in runs[-1].command


@pytest.mark.gpu
def test_compile_flags_reach_nvcc_on_a_gpu(tmp_path):
    """On a GPU machine TVM runs nvcc through tilex's compile callback while it builds."""
    import torch

    with nvcc.capture() as runs:
        kernel = tilex.compile(_exp2_program(), cache=False, compile_flags=["-DTILEX_TEST_FLAG=3"],
                               pass_configs={K.TL_ENABLE_FAST_MATH: True})
    assert "-DTILEX_TEST_FLAG=3" in runs[-1].command and "--use_fast_math" in runs[-1].command
    a = torch.randn(1024, device="cuda")
    c = torch.empty_like(a)
    kernel(a, c)
    torch.testing.assert_close(c, torch.exp2(a), rtol=1e-5, atol=1e-6)
    header = tmp_path / "flag_check.h"
    header.write_text("#ifdef TILEX_TEST_FLAG\n#error tilex test flag reached nvcc\n#endif\n")
    with pytest.raises(tilex.TilexCompileError, match="tilex test flag reached nvcc"):
        tilex.compile(_exp2_program(), cache=False, compile_flags=["-DTILEX_TEST_FLAG=1", "-include", str(header)])
