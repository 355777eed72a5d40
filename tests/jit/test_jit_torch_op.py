"""Kernels as PyTorch custom operators (tilex.jit.torch_op): schema, fake shapes and a full-graph trace, on any
machine (the trace never runs the kernel)."""
import itertools

import pytest

torch = pytest.importorskip("torch")

import tilex  # noqa: E402
from tilex.jit import torch_op  # noqa: E402

import op_programs  # noqa: E402

_names = itertools.count()


def _op(kernel, **kw):
    return kernel.to_torch_op(f"cpu_test_{next(_names)}", **kw)


@pytest.fixture(scope="module")
def scale_kernel():
    return tilex.compile(op_programs.scale_rows(), out_idx=-1, target="sm_90a")


@pytest.fixture(scope="module")
def add_kernel():
    return tilex.compile(op_programs.add_into(), target="sm_90a")


def test_schema(scale_kernel, add_kernel):
    assert torch_op.schema_of(scale_kernel) == "(Tensor A, float s) -> Tensor"
    assert torch_op.schema_of(add_kernel, ("Y",)) == "(Tensor X, Tensor(a!) Y) -> ()"


def test_fake_outputs_follow_the_symbolic_size(scale_kernel):
    op = _op(scale_kernel)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        for m in (1, 37, 1000):
            a = torch.empty(m, 64, dtype=torch.float16, device="cuda")
            out = op(a, 2.0)
            assert out.shape == (m, 64) and out.dtype == torch.float16 and out.device.type == "cuda"
        with pytest.raises(TypeError, match="argument 'A'.*float16"):
            op(torch.empty(4, 64, dtype=torch.float32, device="cuda"), 2.0)
        with pytest.raises(ValueError, match="dimension 1 must be 64"):
            op(torch.empty(4, 32, dtype=torch.float16, device="cuda"), 2.0)


def test_full_graph_trace_of_two_ops(scale_kernel, add_kernel):
    scale = _op(scale_kernel)
    add = _op(add_kernel)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return lambda *args: (torch.zeros(()),)  # the kernels need a GPU; only the trace is checked here

    def f(x, y):
        z = scale(x, 0.5).float()
        add(z, y)
        return y

    compiled = torch.compile(f, backend=backend, fullgraph=True, dynamic=True)
    compiled(torch.zeros(48, 64, dtype=torch.float16), torch.zeros(48, 64))
    assert len(graphs) == 1
    targets = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert any(scale._qualname.split("::")[1] in t for t in targets)
    assert any(add._qualname.split("::")[1] in t for t in targets)


def test_names_and_mutation_arguments(scale_kernel, add_kernel):
    name = f"cpu_test_{next(_names)}"
    op = scale_kernel.to_torch_op(name)
    assert scale_kernel.to_torch_op(name) is op
    with pytest.raises(ValueError, match="already taken"):
        add_kernel.to_torch_op(name)
    with pytest.raises(ValueError, match="not tensor inputs"):
        _op(add_kernel, mutates_args=["Z"])
    assert "Tensor(a!) X, Tensor(a!) Y" in str(_op(add_kernel)._opoverload._schema)
