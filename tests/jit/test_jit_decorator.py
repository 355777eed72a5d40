"""The @tilex.jit decorator: the callable tilex.jit package, memoized kernels per argument list, a decorated
T.prim_func, TileLang's arguments (supported or rejected by name), and @tilex.autotune stacked on top.

Without a GPU tilex.compile still generates code (for sm_90a), so everything but running the kernel is tested
on CPU; the last tests run kernels from @tilex.jit factories against torch on a GPU."""
import pytest
import torch

import tilex
import tilex.autotuner as at
import tilex.language as T
from tilex import env
from tilex.jit import JITKernel, JitFactory

import jit_kernels


def _add(N, block=256, threads=128, dtype="float32"):
    """C = A + B in blocks of `block` elements (a tile program: T.Kernel + T.Parallel)."""

    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype), C: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block), threads=threads) as bx:
            for i in T.Parallel(block):
                C[bx * block + i] = A[bx * block + i] + B[bx * block + i]

    return main


calls = []


@tilex.jit(out_idx=[-1])
def add(N, block=256, threads=128, dtype="float32"):
    calls.append((N, block, threads, dtype))
    return _add(N, block, threads, dtype)


@tilex.jit
def add_no_out(N, block=256):
    return _add(N, block)


@tilex.jit(out_idx=-1)
@T.prim_func
def add_1024(A: T.Tensor((1024,), "float32"), B: T.Tensor((1024,), "float32"), C: T.Tensor((1024,), "float32")):
    with T.Kernel(4, threads=128) as bx:
        for i in T.Parallel(256):
            C[bx * 256 + i] = A[bx * 256 + i] + B[bx * 256 + i]


# ------------------------------------------------------------------------------------------------
# the package is callable and still a package
# ------------------------------------------------------------------------------------------------
def test_tilex_jit_is_the_package_and_the_decorator():
    import tilex.jit as jit_pkg
    from tilex.jit import cache, compile

    assert callable(tilex.jit) and jit_pkg is tilex.jit
    assert compile is tilex.compile and tilex.jit.JITKernel is tilex.JITKernel is JITKernel
    assert cache is tilex.jit.cache and hasattr(tilex.jit.cache, "make_key")
    assert at.jit is tilex.jit.jit  # the old spelling is the same decorator
    assert isinstance(add, JitFactory) and isinstance(add_no_out, JitFactory)
    assert add.__name__ == "add" and add.__wrapped__.__name__ == "add" and "tilex.jit" in repr(add)


# ------------------------------------------------------------------------------------------------
# factories
# ------------------------------------------------------------------------------------------------
def test_factory_returns_compiled_kernel():
    k = add(1024)
    assert isinstance(k, JITKernel) and k.out_idx == [2]
    assert [p.name for p in k.params if not p.is_output] == ["A", "B"]
    src = k.get_kernel_source()
    assert "__global__" in src and "extern \"C\"" in src  # CUDA text (runnable only on a GPU)
    assert add.get_kernel_source(1024) == src
    k0 = add_no_out(1024)
    assert isinstance(k0, JITKernel) and k0.out_idx == []


def test_memoized_per_argument_list():
    add.cache_clear()
    calls.clear()
    k = add(2048)
    assert add(2048) is k and add(N=2048) is k and add(2048, 256) is k and add(2048, block=256, threads=128) is k
    assert calls == [(2048, 256, 128, "float32")]  # the factory ran once
    k2 = add(2048, block=512)
    assert k2 is not k and add(2048, block=512) is k2 and len(calls) == 2
    assert add(1024) is not k and add(1024).params[0].shape == (1024,)
    assert add.compile(2048) is not k  # compile() bypasses the memo
    add.cache_clear()
    assert add(2048) is not k


def test_unhashable_arguments_compile_every_time():
    class Size:
        __hash__ = None

        def __init__(self, n):
            self.n = n

    @tilex.jit(out_idx=[-1])
    def f(size, shape_list):
        return _add(size.n * len(shape_list))

    a = f(Size(512), [1, 2])
    assert a.params[0].shape == (1024,) and f(Size(512), [1, 2]) is not a
    g = tilex.jit(out_idx=[-1])(lambda dims, opts: _add(dims[0], **opts))  # lists and dicts are frozen: memoized
    assert g([1024], {"block": 128}) is g([1024], {"block": 128})


def test_compile_options():
    @tilex.jit(out_idx=-1, target="sm_80", pass_configs={"tirx.disable_vectorize": True})
    def f(N):
        return _add(N)

    k = f(1024)
    assert k.out_idx == [2] and env.target_arch(k.target) == "sm_80"
    assert k.pass_configs == {"tirx.disable_vectorize": True}
    assert f.out_idx == -1 and f.target == "sm_80" and f.pass_configs == {"tirx.disable_vectorize": True}
    assert tilex.jit(target=None)(_add).target == "auto"  # TileLang's default spelling
    assert f.get_tir(1024).script() == _add(1024).script()


def test_debug_root_path(tmp_path):
    f = tilex.jit(out_idx=[-1], debug_root_path=str(tmp_path / "dbg"))(_add)
    k = f(1024)
    assert (tmp_path / "dbg" / "tilex_jit_kernel__add.cu").read_text() == k.get_kernel_source()
    assert "T.prim_func" in (tmp_path / "dbg" / "tilex_jit_program__add.py").read_text()


def test_factory_must_return_a_prim_func():
    f = tilex.jit(lambda n: n)
    with pytest.raises(TypeError, match="returned int, not a T.prim_func"):
        f(3)


# ------------------------------------------------------------------------------------------------
# a decorated T.prim_func
# ------------------------------------------------------------------------------------------------
def test_decorated_prim_func():
    k = add_1024()
    assert isinstance(k, JITKernel) and k.out_idx == [2] and add_1024() is k
    assert "__global__" in k.get_kernel_source()
    with pytest.raises(TypeError, match="call it with no arguments"):
        add_1024(torch.zeros(1024), torch.zeros(1024))
    # hand-written TIR works the same way
    vk = tilex.jit(out_idx=[2])(jit_kernels.vec_add(256))()
    assert vk.out_idx == [2] and vk.func.attrs["global_symbol"] == "vec_add_k"
    with pytest.raises(TypeError, match="nothing to tune"):
        at.autotune(configs=[{}])(add_1024)


# ------------------------------------------------------------------------------------------------
# TileLang's arguments
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, value", [("execution_backend", "cython"), ("target_host", "llvm"),
                                         ("verbose", True)])
def test_unsupported_tilelang_arguments_are_rejected(name, value):
    with pytest.raises(TypeError, match=f"{name}=.* is not supported"):
        tilex.jit(**{name: value})
    with pytest.raises(TypeError, match=name):
        tilex.jit(_add, **{name: value})


def test_tilelang_defaults_are_accepted():
    f = tilex.jit(out_idx=[-1], target_host=None, execution_backend="auto", verbose=False, compile_flags=None)(_add)
    assert isinstance(f(1024), JITKernel)
    assert isinstance(tilex.jit(execution_backend="tvm_ffi")(_add), JitFactory)


def test_bad_decorator_use():
    with pytest.raises(TypeError, match="pass compile options as keywords"):
        tilex.jit([-1])
    with pytest.raises(TypeError, match="unexpected keyword argument 'out_index'"):
        tilex.jit(out_index=[-1])


# ------------------------------------------------------------------------------------------------
# @tilex.autotune over @tilex.jit
# ------------------------------------------------------------------------------------------------
def test_autotune_takes_compile_args_from_jit():
    tuned = tilex.autotune(configs=[dict(block=256), dict(block=512)], progress=False, parallel="thread")(
        tilex.jit(out_idx=[-1], target="sm_80", pass_configs={"tirx.disable_vectorize": True})(_add))
    assert tuned.tuner.factory is _add
    assert tuned.tuner.out_idx == [-1] and tuned.tuner.target == "sm_80"
    assert tuned.tuner.pass_configs == {"tirx.disable_vectorize": True}
    rep = tuned.tuner.compile(4096)
    assert [r.status for r in rep.results] == [at.COMPILED, at.COMPILED]
    assert env.target_arch(rep.results[0].kernel.target) == "sm_80" and rep.results[1].kernel.out_idx == [2]
    k = tuned(4096, block=512)  # every tuned parameter given: compiled as asked, nothing tuned
    assert k.config == dict(block=512) and k.out_idx == [2]
    # arguments given to autotune win over jit's
    assert tilex.autotune(configs=[{}], out_idx=[0])(add).tuner.out_idx == [0]


# ------------------------------------------------------------------------------------------------
# on a GPU
# ------------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_jit_factory_runs_on_gpu():
    a = torch.randn(4096, device="cuda")
    b = torch.randn(4096, device="cuda")
    k = add(4096)
    torch.testing.assert_close(k(a, b), a + b)
    assert add(4096) is k
    torch.testing.assert_close(add(4096, block=512, threads=256)(a, b), a + b)
    x = torch.randn(1024, device="cuda")
    torch.testing.assert_close(add_1024()(x, x), 2 * x)


@pytest.mark.gpu
def test_jit_gemm_on_gpu():
    from tilex.kernels.gemm import matmul

    mm = tilex.jit(out_idx=[2])(matmul)
    a = torch.randn(256, 128, device="cuda", dtype=torch.float16)
    b = torch.randn(128, 192, device="cuda", dtype=torch.float16)
    k = mm(256, 192, 128, bm=64, bn=64, bk=32, num_stages=2, threads=128)
    torch.testing.assert_close(k(a, b), (a.float() @ b.float()).half(), rtol=1e-2, atol=1e-2)
    assert mm(256, 192, 128, 64, 64, 32, 2, 128) is k
