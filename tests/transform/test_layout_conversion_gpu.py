"""Programs whose layout conflicts tilex settles, on the GPU against torch: the three of examples/layout_conflicts.py
(staged through shared memory) beside their hand-written versions, an accumulator two mma.sync gemms lay out
differently and a reduction into a mislaid result (converted around one operator), and a register-only
conversion."""
import warnings

import pytest

torch = pytest.importorskip("torch")

import tilex  # noqa: E402
from programs import example  # noqa: E402
from test_layout_conversion import mislaid_reduction, two_policies  # noqa: E402

conflicts = example("layout_conflicts")


def _compile(prog, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tilex.LayoutConversionWarning)
        return tilex.compile(prog, **kw)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["register transpose", "split probabilities", "int4 gemm"])
@pytest.mark.parametrize("version", ["tilex", "by hand"])
def test_example_programs_match_torch(name, version):
    (case,) = [c for c in conflicts["cases"](512) if c[0] == name]
    _, prog, hand, make, ref = case
    torch.manual_seed(0)
    args = make()
    _compile(prog if version == "tilex" else hand)(*args)
    torch.testing.assert_close(args[-1], ref(*args), rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
def test_an_accumulator_converted_between_two_mma_sync_gemms():
    k = _compile(two_policies(), pass_configs={"tilex.disable_wgmma": True})
    a, b = torch.randn(128, 32, device="cuda").half(), torch.randn(32, 128, device="cuda").half()
    c = torch.empty(128, 128, device="cuda")
    k(a, b, c)
    torch.testing.assert_close(c, 2 * (a.float() @ b.float()), rtol=1e-3, atol=1e-2)


@pytest.mark.gpu
def test_a_reduction_into_a_mislaid_result():
    k = _compile(mislaid_reduction())
    x, x2 = torch.randn(64, 128, device="cuda"), torch.randn(64, 1024, device="cuda")
    z = torch.empty(64, device="cuda")
    k(x, x2, z)
    torch.testing.assert_close(z, torch.maximum(x.sum(1), x2.max(1).values), rtol=1e-5, atol=1e-4)
