"""tilex.relax.offload on the GPU: the offloaded module, run by the Relax VM, against torch (and against the same
module built by TVM alone)."""
import pytest
import torch
import tvm
from tvm import relax

import tilex
import tilex.relax as tr

import relax_modules

pytestmark = pytest.mark.gpu


def _vm(mod):
    ex = tvm.compile(mod, target=tilex.env.resolve_target("auto"))
    return relax.VirtualMachine(ex, tvm.cuda(0))


def _run(vm, *args):
    out = vm["main"](*[tvm.runtime.from_dlpack(a) for a in args])
    return torch.from_dlpack(out)


def _reference(x, w, g, w2):
    xf = x.float()
    y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * g.float()).half()
    z = (y.float() @ w.float().t()).half()
    p = torch.softmax(z.float(), -1).half()
    return torch.relu(p.float() @ w2.float()).half()


def test_offloaded_block_matches_torch_and_tvm():
    mod = relax_modules.norm_linear_softmax_linear()
    offloaded, plain = _vm(tr.offload(mod)), _vm(mod)
    w = torch.randn(512, 256, device="cuda", dtype=torch.float16) / 16
    g = torch.rand(256, device="cuda", dtype=torch.float16) + 0.5
    w2 = torch.randn(512, 256, device="cuda", dtype=torch.float16)
    for b, s in ((1, 1), (2, 37), (3, 100)):
        x = torch.randn(b, s, 256, device="cuda", dtype=torch.float16)
        want = _reference(x, w, g, w2)
        got = _run(offloaded, x, w, g, w2)
        assert got.shape == (b, s, 256)
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
        torch.testing.assert_close(_run(plain, x, w, g, w2), want, rtol=2e-2, atol=2e-2)


def test_offloaded_decode_linear():
    vm = _vm(tr.offload(relax_modules.decode_linear()))
    x = torch.randn(1, 256, device="cuda", dtype=torch.float16)
    w = torch.randn(768, 256, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(_run(vm, x, w), (x.float() @ w.float().t()).half(), rtol=2e-2, atol=5e-2)


@pytest.mark.parametrize("frontend", ["nn", "torch"])
@pytest.mark.parametrize("mode", ["decode", "prefill"])
def test_llama_style_block_small(mode, frontend):
    import pathlib
    import runpy

    blk = runpy.run_path(str(pathlib.Path(__file__).resolve().parents[2] / "examples" / "llama_block_relax.py"))
    # asserts tilex's output against PyTorch's
    blk["run"](blk["SMALL"], mode, seq=200, context=300, bench=False, frontend=frontend)


def test_offloaded_layer_norm():
    vm = _vm(tr.offload(relax_modules.layer_norm_gelu()))
    g = torch.rand(384, device="cuda", dtype=torch.float16) + 0.5
    b = torch.randn(384, device="cuda", dtype=torch.float16)
    for n in (1, 77, 1000):
        x = torch.randn(n, 384, device="cuda", dtype=torch.float16)
        want = torch.nn.functional.gelu(torch.nn.functional.layer_norm(x.float(), (384,), g.float(), b.float(), 1e-5))
        torch.testing.assert_close(_run(vm, x, g, b), want.half(), rtol=2e-2, atol=2e-2)


def _rope(u, cos, sin):
    u1, u2 = u.float().chunk(2, -1)
    return (u.float() * cos.float() + torch.cat([-u2, u1], -1) * sin.float()).half()


def test_offloaded_rope_and_the_per_head_fallback():
    mod = tr.offload(relax_modules.rope_tables())
    ex = tvm.compile(mod, target=tilex.env.resolve_target("auto"))
    vm = relax.VirtualMachine(ex, tvm.cuda(0))
    for b, s in ((1, 1), (2, 37), (3, 128)):
        u = torch.randn(b, s, 4, 64, device="cuda", dtype=torch.float16)
        cos, sin = torch.randn(2, b, s, 1, 64, device="cuda", dtype=torch.float16)
        got = torch.from_dlpack(vm["main"](*[tvm.runtime.from_dlpack(t) for t in (u, cos, sin)]))
        torch.testing.assert_close(got, _rope(u, cos, sin), rtol=1e-2, atol=1e-2)
    u = torch.randn(2, 8, 4, 64, device="cuda", dtype=torch.float16)
    cos, sin = torch.randn(2, 8, 4, 64, device="cuda", dtype=torch.float16)
    got = torch.from_dlpack(vm["per_head"](*[tvm.runtime.from_dlpack(t) for t in (u, cos, sin)]))
    torch.testing.assert_close(got, _rope(u, cos, sin), rtol=1e-2, atol=1e-2)


def test_offloaded_split_parts():
    vm = _vm(tr.offload(relax_modules.split_parts()))
    for n in (1, 5, 300):
        x = torch.randn(n, 384, device="cuda", dtype=torch.float16)
        got = [torch.from_dlpack(t) for t in vm["main"](tvm.runtime.from_dlpack(x))]
        want = torch.relu(x.view(n, 6, 64)).split([1, 3, 2], dim=1)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)


def test_offloaded_kv_append():
    vm = _vm(tr.offload(relax_modules.kv_append()))
    for b in (1, 3):
        cache = torch.randn(b, 300, 4, 64, device="cuda", dtype=torch.float16)
        new = torch.randn(b, 1, 4, 64, device="cuda", dtype=torch.float16)
        got = torch.from_dlpack(vm["main"](tvm.runtime.from_dlpack(cache), tvm.runtime.from_dlpack(new)))
        torch.testing.assert_close(got, torch.cat([cache, new], 1))


def test_offloaded_bias_and_activations():
    F = torch.nn.functional
    vm = _vm(tr.offload(relax_modules.mlp_bias_act()))
    g = torch.Generator(device="cuda").manual_seed(0)

    def rnd(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g, device="cuda") * scale).half()

    w1, b1, w2, b2 = rnd(1024, 256, scale=1 / 16), rnd(1024), rnd(256, 1024, scale=1 / 32), rnd(256)
    w3, b3 = rnd(256, 512, scale=1 / 16), rnd(1, 512)
    for n in (1, 77, 300):
        x = rnd(n, 256)
        h = F.gelu(F.linear(x.float(), w1.float(), b1.float()))
        r = x.float() + F.linear(h.half().float(), w2.float(), b2.float()).half().float()
        z, u = vm["main"](*[tvm.runtime.from_dlpack(t) for t in (x, w1, b1, w2, b2, w3, b3)])
        mm = r.half().float() @ w3.float()
        torch.testing.assert_close(torch.from_dlpack(z).float(), torch.relu(mm + b3.float()), rtol=2e-2, atol=3e-2)
        torch.testing.assert_close(torch.from_dlpack(u).float(), F.silu(mm), rtol=2e-2, atol=3e-2)


def test_offloaded_block_runs_inside_relax_cuda_graphs():
    """relax.backend.use_cuda_graph captures the tilex kernels with TVM's; replays match PyTorch."""
    import pathlib
    import runpy

    blk = runpy.run_path(str(pathlib.Path(__file__).resolve().parents[2] / "examples" / "llama_block_relax.py"))
    cfg = blk["SMALL"]
    mod, names = blk["export"](cfg, "decode", 1, 64, 300)
    with tvm.transform.PassContext(config={"relax.backend.use_cuda_graph": True}):
        ex = tvm.compile(tr.offload(mod), target=tilex.env.resolve_target("auto"))
    assert "vm.builtin.cuda_graph.run_or_capture" in ex.as_text()
    fn = relax.VirtualMachine(ex, tvm.cuda(0))["decode"]
    w, _ = blk["make_inputs"](cfg, "decode", 1, 64, 300, names)
    for seed in (0, 1, 2):  # the first call captures, the others replay with new inputs (the weights are
        # parameters, which Relax's graphs take as fixed, so they stay)
        _, inputs = blk["make_inputs"](cfg, "decode", 1, 64, 300, names, seed=seed)
        args = [tvm.runtime.from_dlpack(t) for t in list(inputs.values()) + [w[n] for n in names]]
        want = blk["torch_block"](w, **inputs, heads=cfg["heads"])
        torch.testing.assert_close(torch.from_dlpack(fn(*args)), want, rtol=3e-2, atol=3e-2)


def test_offloaded_dequantizing_linear_layers():
    mod = relax_modules.dequant_linear()
    mod["main"] = mod["main"].with_attr("num_input", 1)
    off = tr.offload(mod)
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randint(-128, 128, (1024, 512), generator=g, device="cuda", dtype=torch.int8)
    s = (torch.rand(1024, 1, generator=g, device="cuda") / 512).half()
    q2 = torch.randint(0, 256, (256, 1024), generator=g, device="cuda", dtype=torch.uint8)
    s2 = (torch.rand(256, 8, 1, generator=g, device="cuda") / 1024).half()
    w = (q.float() * s.float()).half().float()
    w2 = (q2.float().view(256, 8, 128) * s2.float()).half().float().view(256, 1024)
    params = [tvm.runtime.from_dlpack(t) for t in (q, s, q2, s2)]
    plain = _vm(off)
    lifted_mod = relax.transform.LiftTransformParams()(off)
    lifted = _vm(lifted_mod)
    packed = lifted["main_transform_params"](params)
    for n in (1, 16, 300):
        x = torch.randn(n, 512, generator=g, device="cuda").half()
        want = ((x.float() @ w.t()).half().float() @ w2.t())
        got = torch.from_dlpack(plain["main"](tvm.runtime.from_dlpack(x), *params)).float()
        torch.testing.assert_close(got, want, rtol=2e-2, atol=5e-2)
        got2 = torch.from_dlpack(lifted["main"](tvm.runtime.from_dlpack(x), *packed)).float()
        torch.testing.assert_close(got2, got, rtol=0, atol=0)
