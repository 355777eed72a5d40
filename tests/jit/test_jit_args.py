"""Argument checking of JITKernel, without a GPU (CPU tensors; the device check comes last)."""
import pytest
import torch
import tvm

import tilex
from tilex.jit.args import ArgChecker, normalize_out_idx
from tilex.jit.dtypes import torch_to_tvm_dtype, tvm_to_torch_dtype

import jit_kernels


@pytest.fixture(scope="module")
def add_checker():
    return ArgChecker(jit_kernels.vec_add(1024), out_idx=-1)


def test_params_and_outputs(add_checker):
    assert [p.name for p in add_checker.params] == ["A", "B", "C"]
    assert [p.name for p in add_checker.inputs] == ["A", "B"]
    assert [p.name for p in add_checker.outputs] == ["C"]
    assert add_checker.out_idx == [2]


def test_wrong_count(add_checker):
    a = torch.zeros(1024)
    with pytest.raises(TypeError, match=r"takes 2 argument\(s\) \(A, B\), got 1"):
        add_checker.prepare((a,))
    with pytest.raises(TypeError, match="got 3"):
        add_checker.prepare((a, a, a))


def test_not_a_tensor(add_checker):
    with pytest.raises(TypeError, match=r"argument 'B' \(index 1\): expected a torch.Tensor, got list"):
        add_checker.prepare((torch.zeros(1024), [0.0] * 1024))


def test_wrong_dtype(add_checker):
    with pytest.raises(TypeError, match=r"argument 'B' \(index 1\): expected dtype float32, got torch.float16"):
        add_checker.prepare((torch.zeros(1024), torch.zeros(1024, dtype=torch.float16)))


def test_wrong_shape(add_checker):
    with pytest.raises(ValueError, match=r"argument 'A' \(index 0\): expected shape \(1024,\), got \(1000,\)"):
        add_checker.prepare((torch.zeros(1000), torch.zeros(1024)))
    with pytest.raises(ValueError, match=r"argument 'B' \(index 1\): expected a 1-d tensor"):
        add_checker.prepare((torch.zeros(1024), torch.zeros(32, 32)))


def test_non_contiguous(add_checker):
    a = torch.zeros(2048)[::2]
    with pytest.raises(ValueError, match=r"argument 'A' \(index 0\): expected a contiguous tensor"):
        add_checker.prepare((a, torch.zeros(1024)))


def test_misaligned_data_pointer(add_checker):
    """A view that starts 4 bytes into its storage: TMA and 16-byte vector accesses would fault or misread."""
    a = torch.zeros(1025)[1:]
    assert a.is_contiguous() and a.data_ptr() % 16 == 4
    with pytest.raises(ValueError, match=r"argument 'A' \(index 0\): data pointer 0x[0-9a-f]+ is not 16-byte "
                                         r"aligned \(it is 4 bytes past a boundary\)"):
        add_checker.prepare((a, torch.zeros(1024)))


def test_cpu_tensor_device_error(add_checker):
    with pytest.raises(ValueError, match=r"argument 'A' \(index 0\): expected a CUDA tensor, got device cpu"):
        add_checker.prepare((torch.zeros(1024), torch.zeros(1024)))


def test_device_checked_after_dtype():
    # a dtype error on the 2nd argument wins over the device error on the 1st
    c = ArgChecker(jit_kernels.vec_add(1024), out_idx=[2])
    with pytest.raises(TypeError, match="argument 'B'"):
        c.prepare((torch.zeros(1024), torch.zeros(1024, dtype=torch.int32)))


def test_symbolic_dims_and_scalars():
    c = ArgChecker(jit_kernels.mixed(), out_idx=2)
    assert [p.name for p in c.inputs] == ["A", "W", "k"]
    A = torch.zeros(5, 8, dtype=torch.float16)
    W = torch.zeros(8, 64, dtype=torch.bfloat16)
    # k bound to 8 by A and W, then contradicted by the scalar
    with pytest.raises(ValueError, match=r"argument 'k' \(index 2\).*already bound to 8"):
        c.prepare((A, W, 7))
    # W's first dim must equal A's second
    with pytest.raises(ValueError, match=r"argument 'W' \(index 1\): dimension 0 is 'k'=4"):
        c.prepare((A, torch.zeros(4, 64, dtype=torch.bfloat16), 8))
    with pytest.raises(TypeError, match=r"argument 'k' \(index 2\): expected a Python int"):
        c.prepare((A, W, 8.0))
    with pytest.raises(ValueError, match="expected a CUDA tensor"):
        c.prepare((A, W, 8))


def test_scalar_float():
    c = ArgChecker(jit_kernels.scale_sym(), out_idx=1)
    assert [p.name for p in c.inputs] == ["A", "alpha"]
    with pytest.raises(TypeError, match=r"argument 'alpha' \(index 1\): expected a Python float"):
        c.prepare((torch.zeros(3, 8), "2"))
    with pytest.raises(ValueError, match="CUDA"):
        c.prepare((torch.zeros(3, 8), 2))  # int is accepted for a float scalar


def test_declared_strides():
    c = ArgChecker(jit_kernels.strided(), out_idx=1)
    base = torch.zeros(4, 16)
    with pytest.raises(ValueError, match="CUDA"):  # strides (16, 1) accepted, only the device fails
        c.prepare((base[:, :8],))
    with pytest.raises(ValueError, match=r"argument 'A' \(index 0\): expected strides \(16, 1\), got \(8, 1\)"):
        c.prepare((torch.zeros(4, 8),))


def test_out_idx_forms():
    assert normalize_out_idx(None, 3) == []
    assert normalize_out_idx(-1, 3) == [2]
    assert normalize_out_idx([0, -1], 3) == [0, 2]
    with pytest.raises(ValueError):
        normalize_out_idx(3, 3)
    with pytest.raises(ValueError):
        normalize_out_idx([1, -2], 3)
    with pytest.raises(TypeError):
        normalize_out_idx(["C"], 3)
    # a scalar cannot be an output
    with pytest.raises(ValueError, match="scalar"):
        ArgChecker(jit_kernels.scale_sym(), out_idx=2)


def test_output_shape_must_be_known():
    # B's rows 'm' are known from A when A is an input, but not if A is an output too
    with pytest.raises(ValueError, match="cannot allocate output"):
        ArgChecker(jit_kernels.scale_sym(), out_idx=[0, 1])


def test_multiple_outputs_order():
    c = ArgChecker(jit_kernels.vec_add(128), out_idx=[2, 0])
    assert [p.name for p in c.outputs] == ["C", "A"]
    assert [p.name for p in c.inputs] == ["B"]


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32", "float64", "int8", "int32", "int64", "uint8",
                                  "bool", "float8_e4m3fn", "float8_e5m2"])
def test_dtype_roundtrip(name):
    t = tvm_to_torch_dtype(name)
    assert isinstance(t, torch.dtype)
    assert torch_to_tvm_dtype(t) == name
    assert tvm_to_torch_dtype(tvm.DataType(name) if hasattr(tvm, "DataType") else name) == t


def test_dtype_unknown():
    with pytest.raises(TypeError):
        tvm_to_torch_dtype("int4")


def test_jitkernel_cpu_machine_flow(monkeypatch):
    """Without a GPU: compile goes through tilex.engine.build (inside the target scope), yields CUDA source,
    writes nothing to the cache, and rejects CPU tensors."""
    from tilex import engine

    seen = {}
    real_build = engine.build

    def fake_build(func, target, pass_configs):
        seen["args"] = (func, target, pass_configs)
        seen["current"] = tvm.target.Target.current(allow_none=True)
        return real_build(func, target, pass_configs)

    monkeypatch.setattr(engine, "build", fake_build)
    func = jit_kernels.vec_add(512)
    k = tilex.compile(func, out_idx=-1, target="sm_80", pass_configs={"tirx.disable_vectorize": True})
    f, tgt, pc = seen["args"]
    assert f.same_as(func) and tgt.attrs["arch"] == "sm_80" and pc == {"tirx.disable_vectorize": True}
    assert seen["current"] is not None and seen["current"].attrs["arch"] == "sm_80"
    assert "vec_add_k_kernel" in k.get_kernel_source()
    assert k.symbol == "vec_add_k" and k.func.same_as(func) and k.target.attrs["arch"] == "sm_80"
    assert [p.name for p in k.params] == ["A", "B", "C"]
    if not torch.cuda.is_available():
        assert not k.from_cache
        with pytest.raises(ValueError, match="expected a CUDA tensor"):
            k(torch.zeros(512), torch.zeros(512))


def test_negative_size_scalar_is_refused():
    c = ArgChecker(jit_kernels.mixed(), out_idx=2)
    A = torch.zeros(5, 8, dtype=torch.float16)
    W = torch.zeros(8, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"argument 'k' \(index 2\): 'k' sizes a tensor and must not be negative"):
        c.prepare((A, W, -8))


def test_fast_call_allocates_outputs_and_orders_arguments(monkeypatch):
    """The fast path hands the compiled function the inputs and the outputs it allocates in parameter order, the
    outputs shaped from the inputs' symbolic dimensions; a misaligned tensor makes it raise (the kernel then falls
    back to the checked path). (Here the outputs are allocated in Python: the C++ call is tested below.)"""
    monkeypatch.setattr("tilex.jit.args.caller_factory", lambda: None)
    seen = []
    c = ArgChecker(jit_kernels.mixed(), out_idx=2)  # mixed_k(A: (m, k), W: (k, n), O: (m, n), k)
    call = c.fast_call(lambda *a: seen.append(a))
    A = torch.zeros(5, 8, dtype=torch.float16)
    W = torch.zeros(8, 64, dtype=torch.bfloat16)
    out = call(A, W, 8)
    assert len(seen) == 1 and seen[0][0] is A and seen[0][1] is W and seen[0][2] is out and seen[0][3] == 8
    assert out.shape == (5, 64) and out.dtype == torch.float32
    base = torch.zeros(5 * 8 + 1, dtype=torch.float16)
    with pytest.raises(ValueError):
        call(base[1:].view(5, 8), W, 8)
    two = ArgChecker(jit_kernels.vec_add(128), out_idx=[2, 0]).fast_call(lambda *a: seen.append(a))
    b = torch.zeros(128)
    c_out, a_out = two(b)
    assert seen[-1] == (a_out, b, c_out)


def test_fast_call_through_cpp_allocates_in_one_crossing():
    """With the C++ caller (tilex.jit.launcher, built here with the host compiler), the output is allocated by the
    allocator tvm-ffi installs for torch tensors and comes back as a torch.Tensor; the compiled function gets it
    at its parameter position, shaped from the symbolic dimensions; a misaligned tensor or a wrong argument count
    is refused (the kernel then names the problem through the checked path)."""
    import tvm_ffi

    from tilex.jit.launcher import caller_factory

    if caller_factory() is None:
        pytest.skip("no host C++ compiler to build the C++ call path")
    seen = []

    def fn(a, w, o, k):
        seen.append((torch.from_dlpack(a).data_ptr(), torch.from_dlpack(w).data_ptr(), torch.from_dlpack(o), k))

    c = ArgChecker(jit_kernels.mixed(), out_idx=2)  # mixed_k(A: (m, k), W: (k, 64), O: (m, 64), k)
    call = c.fast_call(tvm_ffi.convert(fn))
    A = torch.zeros(5, 8, dtype=torch.float16)
    W = torch.zeros(8, 64, dtype=torch.bfloat16)
    out = call(A, W, 8)
    assert isinstance(out, torch.Tensor) and out.shape == (5, 64) and out.dtype == torch.float32
    a_ptr, w_ptr, o, k = seen[0]
    assert (a_ptr, w_ptr, k) == (A.data_ptr(), W.data_ptr(), 8) and o.data_ptr() == out.data_ptr()
    static = ArgChecker(jit_kernels.vec_add(128), out_idx=0).fast_call(tvm_ffi.convert(
        lambda a, b, c: seen.append((torch.from_dlpack(a).data_ptr(), torch.from_dlpack(b).data_ptr()))))
    b, c2 = torch.zeros(128), torch.zeros(128)
    a_out = static(b, c2)
    assert seen[-1] == (a_out.data_ptr(), b.data_ptr()) and a_out.shape == (128,)
    with pytest.raises(ValueError, match="misaligned"):
        static(torch.zeros(129)[1:], c2)
    none = ArgChecker(jit_kernels.vec_add(128)).fast_call(tvm_ffi.convert(lambda a, b, c: seen.append("none")))
    assert none(b, c2, b) is None and seen[-1] == "none"
    with pytest.raises(TypeError, match="number of arguments"):
        none(b, c2)
