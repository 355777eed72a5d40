"""A Llama-style decoder block (RMSNorm, fused QKV projection, RoPE, attention, SwiGLU MLP) built with
tvm.relax.frontend.nn, compiled for CUDA twice: with tilex offload (`tilex.relax.offload`: the projections, norms
and attention become tilex kernels, the rest goes through TVM's pipeline) and with TVM's default CUDA pipeline
alone; both checked against the same block in PyTorch eager and timed beside it. With offload, the RoPE of q and k
reads them in place from the QKV projection's output and v is copied out of it, so only the KV-cache append (decode)
and, at one row, the residual adds and the SiLU-multiply stay with TVM.

    python examples/llama_block_relax.py [--mode decode|prefill|both] [--small]

decode: one new token attending to a KV cache of `context` tokens; prefill: `seq` tokens, causal. Without a GPU it
builds the offloaded module for sm_90a and prints the Relax function instead.
"""
import argparse
import math
import sys

import tvm
from tvm import relax
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op

import tilex
import tilex.relax as tr

LLAMA_7B = dict(hidden=4096, heads=32, ffn=11008)
SMALL = dict(hidden=512, heads=4, ffn=1024)


class Block(nn.Module):
    def __init__(self, hidden, heads, ffn, eps=1e-6):
        self.hidden, self.heads, self.dim = hidden, heads, hidden // heads
        self.attn_norm = nn.RMSNorm(hidden, -1, eps, bias=False, dtype="float16")
        self.mlp_norm = nn.RMSNorm(hidden, -1, eps, bias=False, dtype="float16")
        self.qkv = nn.Linear(hidden, 3 * hidden, bias=False, dtype="float16")
        self.o = nn.Linear(hidden, hidden, bias=False, dtype="float16")
        self.gate = nn.Linear(hidden, ffn, bias=False, dtype="float16")
        self.up = nn.Linear(hidden, ffn, bias=False, dtype="float16")
        self.down = nn.Linear(ffn, hidden, bias=False, dtype="float16")

    def _rope(self, u, cos, sin):
        u1, u2 = op.split(u, 2, axis=-1)
        return u * cos + op.concat([op.negative(u2), u1], dim=-1) * sin

    def _attend(self, x, cos, sin, k_cache=None, v_cache=None):
        b, s = x.shape[0], x.shape[1]
        qkv = op.reshape(self.qkv(self.attn_norm(x)), [b, s, 3, self.heads, self.dim])
        q, k, v = op.split(qkv, 3, axis=2)
        q = op.reshape(q, [b, s, self.heads, self.dim])
        k = op.reshape(k, [b, s, self.heads, self.dim])
        v = op.reshape(v, [b, s, self.heads, self.dim])
        q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
        if k_cache is not None:
            k = op.concat([k_cache, k], dim=1)
            v = op.concat([v_cache, v], dim=1)
        a = op.scaled_dot_product_attention(q, k, v, is_causal=k_cache is None)
        x = x + self.o(op.reshape(a, [b, s, self.hidden]))
        h = self.mlp_norm(x)
        return x + self.down(op.silu(self.gate(h)) * self.up(h))

    def prefill(self, x, cos, sin):
        return self._attend(x, cos, sin)

    def decode(self, x, cos, sin, k_cache, v_cache):
        return self._attend(x, cos, sin, k_cache, v_cache)


def export(cfg, mode, batch, seq, context):
    """(IRModule, parameter names) of the block's `mode` function for these sizes."""
    d = cfg["hidden"] // cfg["heads"]
    s = 1 if mode == "decode" else seq
    spec = {"x": nn.spec.Tensor([batch, s, cfg["hidden"]], "float16"),
            "cos": nn.spec.Tensor([s, 1, d], "float16"), "sin": nn.spec.Tensor([s, 1, d], "float16")}
    if mode == "decode":
        kv = nn.spec.Tensor([batch, context, cfg["heads"], d], "float16")
        spec.update(k_cache=kv, v_cache=kv)
    mod, params = Block(**cfg).export_tvm(spec={mode: spec})
    return mod, [name for name, _ in params]


def torch_block(w, x, cos, sin, k_cache=None, v_cache=None, heads=32, eps=1e-6):
    """The same block in PyTorch eager (weights `w` by the Relax parameter names)."""
    import torch
    import torch.nn.functional as F

    b, s, hidden = x.shape
    d = hidden // heads

    def rope(u):
        u1, u2 = u.chunk(2, -1)
        return u * cos + torch.cat([-u2, u1], -1) * sin

    h = F.rms_norm(x, (hidden,), w["attn_norm.weight"], eps)
    q, k, v = F.linear(h, w["qkv.weight"]).view(b, s, 3, heads, d).unbind(2)
    q, k = rope(q), rope(k)
    if k_cache is not None:
        k, v = torch.cat([k_cache, k], 1), torch.cat([v_cache, v], 1)
    a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                       is_causal=k_cache is None)
    x = x + F.linear(a.transpose(1, 2).reshape(b, s, hidden), w["o.weight"])
    h = F.rms_norm(x, (hidden,), w["mlp_norm.weight"], eps)
    return x + F.linear(F.silu(F.linear(h, w["gate.weight"])) * F.linear(h, w["up.weight"]), w["down.weight"])


def export_torch(cfg, mode, w, inputs):
    """(IRModule, parameter names) of the same block written in PyTorch (`torch_block` over parameters `w`),
    through ``torch.export`` and tilex.relax.from_exported_program (TVM's importer without PyTorch's
    decompositions, linear layers kept in fp16)."""
    import torch

    from tilex.relax.frontend import from_exported_program

    names = list(w)

    class TorchBlock(torch.nn.Module):
        def __init__(self):
            super().__init__()
            for n in names:
                self.register_parameter(n.replace(".", "_"), torch.nn.Parameter(w[n], requires_grad=False))

        def forward(self, *args):
            ws = {n: getattr(self, n.replace(".", "_")) for n in names}
            return torch_block(ws, *args, heads=cfg["heads"])

    ep = torch.export.export(TorchBlock(), tuple(inputs.values()))
    mod = from_exported_program(ep, unwrap_unit_return_tuple=True)
    return tvm.IRModule({tvm.ir.GlobalVar(mode): mod["main"].with_attr("global_symbol", mode)}), names


def make_inputs(cfg, mode, batch, seq, context, names, seed=0):
    """Random weights (scaled like a trained model's) and inputs, as torch CUDA tensors."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    hidden, heads = cfg["hidden"], cfg["heads"]
    d = hidden // heads
    s = 1 if mode == "decode" else seq
    shapes = {"attn_norm.weight": (hidden,), "mlp_norm.weight": (hidden,), "qkv.weight": (3 * hidden, hidden),
              "o.weight": (hidden, hidden), "gate.weight": (cfg["ffn"], hidden), "up.weight": (cfg["ffn"], hidden),
              "down.weight": (hidden, cfg["ffn"])}
    w = {}
    for n in names:
        shp = shapes[n]
        if len(shp) == 1:
            w[n] = (1 + 0.1 * torch.randn(shp, generator=g, device="cuda")).half()
        else:
            w[n] = (torch.randn(shp, generator=g, device="cuda") / math.sqrt(shp[1])).half()
    x = torch.randn(batch, s, hidden, generator=g, device="cuda").half()
    pos = torch.arange(context, context + s, device="cuda").float() if mode == "decode" else \
        torch.arange(s, device="cuda").float()
    freq = 1.0 / 10000 ** (torch.arange(0, d, 2, device="cuda").float() / d)
    ang = torch.cat([pos[:, None] * freq[None]] * 2, -1)[:, None, :]
    inputs = {"x": x, "cos": ang.cos().half(), "sin": ang.sin().half()}
    if mode == "decode":
        inputs["k_cache"] = torch.randn(batch, context, heads, d, generator=g, device="cuda").half()
        inputs["v_cache"] = torch.randn(batch, context, heads, d, generator=g, device="cuda").half()
    return w, inputs


def build(mod, offloaded, target):
    if offloaded:
        mod = tr.offload(mod, target=target)
    return tvm.compile(mod, target=target)


def run(cfg, mode, batch=1, seq=2048, context=2048, bench=True, rounds=5, frontend="nn"):
    """Build, check and (`bench`) time the block; `frontend` "nn" (relax.frontend.nn) or "torch" (torch.export)."""
    import torch

    from tilex.autotuner import do_bench

    target = tilex.env.resolve_target("auto")
    mod, names = export(cfg, mode, batch, seq, context)
    w, inputs = make_inputs(cfg, mode, batch, seq, context, names)
    if frontend == "torch":
        mod, names = export_torch(cfg, mode, w, inputs)
    args = [tvm.runtime.from_dlpack(t) for t in list(inputs.values()) + [w[n] for n in names]]
    want = torch_block(w, **inputs, heads=cfg["heads"])
    out = {}
    for label, offloaded in (("tilex offload", True), ("TVM default", False)):
        vm = relax.VirtualMachine(build(mod, offloaded, target), tvm.cuda(0))
        fn = vm[mode]
        got = torch.from_dlpack(fn(*args))
        diff = (got.float() - want.float()).abs()
        out[label] = (fn, diff.max().item(), (diff > 3e-2 + 3e-2 * want.float().abs()).float().mean().item())
    # tilex's result is checked; TVM's own build is only reported (its fp16 kernels are not ours to fix)
    torch.testing.assert_close(torch.from_dlpack(out["tilex offload"][0](*args)), want, rtol=3e-2, atol=3e-2)
    line = f"{mode} ({frontend} frontend, batch {batch}, " \
           f"{'context ' + str(context) if mode == 'decode' else 'seq ' + str(seq)}, " \
           f"hidden {cfg['hidden']}): tilex correct; max |err| vs PyTorch: tilex {out['tilex offload'][1]:.3g}, " \
           f"TVM {out['TVM default'][1]:.3g} ({out['TVM default'][2]:.2%} of elements past the tolerance)"
    if not bench:
        print(line)
        return None
    # the contenders in alternation, best of `rounds`: clock and power drift over the run favour none of them
    calls = {"PyTorch eager": lambda: torch_block(w, **inputs, heads=cfg["heads"])}
    calls.update((label, lambda fn=fn: fn(*args)) for label, (fn, _, _) in out.items())
    times = {label: float("inf") for label in calls}
    for _ in range(rounds):
        for label, call in calls.items():
            times[label] = min(times[label], do_bench(call))
    t = times["tilex offload"]
    print(f"{line}; ms: " + ", ".join(f"{k} {v:.3f}" for k, v in times.items()) +
          f"; TVM default / tilex {times['TVM default'] / t:.2f}, PyTorch / tilex {times['PyTorch eager'] / t:.2f}")
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["decode", "prefill", "both"], default="both")
    ap.add_argument("--small", action="store_true", help="a 512-wide block instead of Llama-7B's 4096")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--context", type=int, default=2048)
    ap.add_argument("--frontend", choices=["nn", "torch"], default="nn",
                    help="build the block with relax.frontend.nn or write it in PyTorch and import it (torch.export)")
    a = ap.parse_args()
    cfg = SMALL if a.small else LLAMA_7B
    modes = ["decode", "prefill"] if a.mode == "both" else [a.mode]
    try:
        import torch

        gpu = torch.cuda.is_available()
    except ImportError:
        gpu = False
    if not gpu:
        mod, _ = export(cfg, modes[0], 1, a.seq, a.context)
        mod = tr.offload(mod, target="sm_90a")
        print(mod[modes[0]].script())
        tvm.compile(mod, target=tilex.env.resolve_target("sm_90a"))
        print("# no CUDA GPU here: built the offloaded module for sm_90a and printed it", file=sys.stderr)
        return
    for m in modes:
        run(cfg, m, seq=a.seq, context=a.context, frontend=a.frontend)


if __name__ == "__main__":
    main()
