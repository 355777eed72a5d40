"""FlashAttention forward (tilex/kernels/attention/forward.py): nvcc compiles for sm_90a (BHSD/BSHD, causal or not,
head dims 64/128/256, fp16/bf16, GQA 4, a ragged length), the warp-specialized structure of the D=128 kernel in the
generated CUDA, `check_shapes` errors; on a GPU, O against torch's scaled_dot_product_attention and the LSE against
torch.logsumexp of the scaled (masked) scores."""
import math
import re
import shutil

import pytest

import tilex
from tilex.kernels.attention.forward import attention_forward, check_shapes, mha_forward

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
SM90 = "sm_90a"


def _compile(batch, heads, heads_kv, seq, dim, causal, layout, dtype):
    prog = mha_forward(batch, heads, seq, dim, causal, heads_kv=heads_kv, layout=layout, dtype=dtype)
    return tilex.compile(prog, out_idx=[3, 4], target=SM90)


@needs_nvcc
@pytest.mark.parametrize("batch,heads,heads_kv,seq,dim,causal,layout,dtype", [
    (1, 2, 2, 512, 128, True, "bhsd", "float16"),
    (1, 2, 2, 512, 128, False, "bshd", "bfloat16"),
    (1, 2, 2, 512, 64, True, "bshd", "float16"),
    (1, 2, 2, 512, 64, False, "bhsd", "bfloat16"),
    (1, 2, 2, 512, 256, False, "bhsd", "float16"),
    (1, 2, 2, 512, 256, True, "bshd", "bfloat16"),
    (1, 8, 2, 512, 128, False, "bhsd", "float16"),      # GQA 4
    (2, 4, 4, 1000, 128, True, "bshd", "float16"),      # ragged length
    (2, 8, 2, 1000, 64, False, "bhsd", "bfloat16"),     # ragged, GQA 4
])
def test_forward_compiles(batch, heads, heads_kv, seq, dim, causal, layout, dtype):
    k = _compile(batch, heads, heads_kv, seq, dim, causal, layout, dtype)
    src = k.get_kernel_source()
    assert ("Output_ptr" in src or "Output_tmap" in src) and "LSE_ptr" in src  # (O by TMA store or by threads)
    assert "wgmma" in src
    assert k.resources is None or not k.resources.spilled


@needs_nvcc
def test_forward_d128_is_warp_specialized():
    """D=128, not causal: one TMA producer warpgroup + two wgmma consumer warpgroups (128 query rows each 64)."""
    kernel = _compile(2, 4, 4, 1024, 128, False, "bhsd", "float16")
    src = kernel.get_kernel_source()
    # P V of the previous key block overlaps the softmax: S waits alone (wait<1>) with P V issued behind it, and
    # ptxas keeps the wgmma asynchronous (it reports serialization otherwise)
    assert "tilex::wgmma_wait<1>();" in src
    assert kernel.resources is not None and not any(f.wgmma_serialized for f in kernel.resources)
    # the two load groups (K, V) have their own barrier pairs; no block-wide barrier inside the consumer loop
    assert src.count("tilex::mbar_init(") == 4
    # block size: 256 consumer threads + 128 producer threads
    assert re.search(r"__launch_bounds__\(384\b", src), re.findall(r"__launch_bounds__\([^)]*\)", src)
    assert re.search(r"if \(256 <= \(\(int\)threadIdx\.x\)\)", src)  # the producer warpgroup is the last one
    # the register split between the roles
    assert re.search(r"tilex::reg_dealloc<\d+>", src) and re.search(r"tilex::reg_alloc<\d+>", src)
    # K and V tiles come in through TMA on a rank-4 tensor map; the consumers wait on the stage's barrier
    assert "tilex::tma_load_4d" in src and "tilex::mbar_wait" in src
    # Q·Kᵀ with both operands in shared memory, P·V with P in registers (the rs form)
    assert re.search(r"tilex::wgmma_m64n128k16_f16<", src)
    assert "tilex::wgmma_m64n128k16_rs_f16" in src


@pytest.mark.parametrize("args,match", [
    ((1, 8, 8, 128, 128, 96, False, "bhsd", "float16"), "head dim 96"),
    ((1, 8, 3, 128, 128, 128, False, "bhsd", "float16"), "8 query heads are not a multiple of 3"),
    ((1, 8, 8, 128, 256, 128, True, "bhsd", "float16"), "causal attention needs equal query and key lengths"),
    ((1, 8, 8, 128, 128, 128, False, "bhsd", "float32"), "dtype must be float16 or bfloat16"),
    ((1, 8, 8, 128, 128, 128, False, "sbhd", "float16"), "layout"),
])
def test_check_shapes_errors(args, match):
    with pytest.raises(ValueError, match=match):
        check_shapes(*args)
    batch, heads, heads_kv, seq_q, seq_kv, dim, causal, layout, dtype = args
    with pytest.raises(ValueError, match=match):  # the program builder checks before building anything
        mha_forward(batch, heads, seq_q, dim, causal, seq_kv=seq_kv, heads_kv=heads_kv, layout=layout, dtype=dtype)


def _reference(q, k, v, causal, layout):
    """(O, LSE) in fp32 from BHSD copies, kv heads repeated for GQA; O returned in q's layout."""
    import torch
    if layout == "bshd":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    qf, kf, vf = (t.float() for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    kf, vf = kf.repeat_interleave(group, dim=1), vf.repeat_interleave(group, dim=1)
    scale = 1.0 / math.sqrt(q.shape[-1])
    o = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=causal, scale=scale)
    s = qf @ kf.transpose(-1, -2) * scale
    if causal:
        n = q.shape[2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    lse = torch.logsumexp(s, -1)
    return (o.transpose(1, 2) if layout == "bshd" else o), lse


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("batch,heads,heads_kv,seq,dim,causal,dtype", [
    (1, 4, 4, 1024, 128, False, "float16"),
    (2, 4, 4, 1024, 128, True, "float16"),
    (2, 4, 4, 1000, 128, True, "bfloat16"),
    (1, 4, 4, 77, 128, False, "bfloat16"),
    (2, 4, 4, 1000, 64, False, "float16"),
    (1, 4, 4, 77, 64, True, "bfloat16"),
    (2, 2, 2, 1000, 256, False, "bfloat16"),
    (1, 2, 2, 77, 256, True, "float16"),
    (2, 8, 2, 1000, 128, True, "float16"),       # GQA 4
    (1, 16, 2, 1024, 128, False, "bfloat16"),    # GQA 8
    (2, 16, 2, 77, 64, True, "float16"),         # GQA 8, short
])
def test_forward_matches_torch(layout, batch, heads, heads_kv, seq, dim, causal, dtype):
    import torch
    torch.manual_seed(0)
    dt = getattr(torch, dtype)

    def make(h):
        shape = (batch, h, seq, dim) if layout == "bhsd" else (batch, seq, h, dim)
        return torch.randn(shape, device="cuda", dtype=dt)

    q, k, v = make(heads), make(heads_kv), make(heads_kv)
    out, lse = attention_forward(q, k, v, causal=causal, layout=layout)
    ref_o, ref_lse = _reference(q, k, v, causal, layout)
    assert out.shape == q.shape and out.dtype == q.dtype and lse.shape == (batch, heads, seq)
    tol = 1e-2 if dtype == "float16" else 2e-2
    torch.testing.assert_close(out.float(), ref_o, atol=tol, rtol=tol)
    torch.testing.assert_close(lse, ref_lse, atol=1e-3, rtol=1e-3)
