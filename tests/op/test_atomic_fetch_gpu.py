"""Element atomics with the value before and a memory order, on the GPU (programs from test_atomic_fetch.py)."""
import os
import runpy

import pytest

torch = pytest.importorskip("torch")

import tilex  # noqa: E402

pytestmark = pytest.mark.gpu
_cpu = runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "test_atomic_fetch.py"))


def test_tickets_are_a_permutation():
    blocks, threads = 64, 128
    cnt = torch.zeros(1, device="cuda", dtype=torch.int32)
    out = torch.full((blocks * threads,), -1, device="cuda", dtype=torch.int32)
    tilex.compile(_cpu["tickets"](blocks, threads))(cnt, out)
    assert int(cnt) == blocks * threads
    assert torch.equal(out.sort().values, torch.arange(blocks * threads, device="cuda", dtype=torch.int32))


def test_last_block_writes_the_sum_and_cleans_up():
    blocks, n = 96, 256
    k = tilex.compile(_cpu["last_block_sum"](blocks, n))
    ws = torch.zeros(n, device="cuda")
    cnt = torch.zeros(1, device="cuda", dtype=torch.int32)
    for _ in range(3):  # the workspace and counter are left at zero for the next launch
        x = torch.randn(blocks, n, device="cuda")
        y = torch.full((n,), float("nan"), device="cuda")
        k(x, ws, cnt, y)
        torch.testing.assert_close(y, x.sum(0), atol=1e-4, rtol=1e-4)
        assert int(cnt) == 0 and not ws.any()
