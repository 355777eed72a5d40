"""tilex.quant.quantize / dequantize: shapes, the stored scale and zero rules, and per-element error bounds."""
import math

import pytest
import torch

from tilex import dtypes, quant

INT_TYPES = ["int2", "int4", "int8", "uint3", "uint4", "uint8"]
FLOAT_TYPES = ["float4_e2m1", "float6_e3m2", "float6_e2m3", "float8_e4m3", "float8_e5m2"]
GROUPS = [None, 32, 64, 128]
FP16_EPS = 2.0 ** -10  # float16 spacing relative to a value (upper bound)


def weight(n=16, k=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g)
    w[1] *= 100.0  # rows of very different magnitudes
    w[2] *= 1e-3
    w[3] = w[3].abs() + 5.0  # all-positive row, far from 0
    w[4, :] = 0.0  # all-zero row
    w[5, : k // 2] = 0.0  # all-zero groups
    return w


def expand(per_group, g):
    return per_group.float().repeat_interleave(g, dim=1)


def float_half_spacing(t, a):
    """Half the spacing of the float type's grid around magnitudes `a` (written from E and M alone)."""
    bias = 2 ** (t.exponent - 1) - 1
    binade = torch.floor(torch.log2(a.clamp(min=1e-30))).clamp(min=1 - bias)
    return torch.pow(2.0, binade - t.mantissa) / 2


def check_scales(scales, ideal, floor=None):
    """Stored scales are the ideal ones raised to `floor` and to float16's smallest normal, then rounded up to
    float16; 1 for all-zero groups."""
    nonzero = ideal > 0
    wanted = ideal.clamp(min=torch.finfo(torch.float16).tiny)
    if floor is not None:
        wanted = torch.maximum(wanted, floor)
    assert (scales[nonzero] >= wanted[nonzero]).all()
    assert (scales[nonzero] <= wanted[nonzero] * (1 + FP16_EPS)).all()
    assert (scales[~nonzero] == 1).all() and (~nonzero).any()
    assert (wanted != ideal).any()  # the weight has a row that small


def check_layout(qw, w, t, g, zero_point):
    n, k = w.shape
    assert qw.dtype is t and qw.group_size == g and qw.shape == (n, k)
    assert qw.codes.dtype == torch.uint8 and qw.codes.shape == (n, k) and int(qw.codes.max()) < t.num_codes
    assert qw.scales.dtype == torch.float16 and qw.scales.shape == (n, k // g)
    assert (qw.scales > 0).all() and torch.isfinite(qw.scales).all()
    if zero_point or t.kind == "uint":
        assert qw.zeros.dtype == torch.float16 and qw.zeros.shape == (n, k // g)
    else:
        assert qw.zeros is None
    # dequantize is (decode(code) - zero) * scale, group by group
    manual = quant.decode(qw.codes, t)
    if qw.zeros is not None:
        manual = manual - expand(qw.zeros, g)
    assert torch.equal(quant.dequantize(qw, torch.float32), manual * expand(qw.scales, g))


def quantized(name, group_size, zero_point):
    """(type, weight, its QuantizedWeight with the layout checked, group size, weight split into groups)."""
    t = dtypes.lookup(name)
    w = weight()
    qw = quant.quantize(w, t, group_size, zero_point=zero_point)
    g = w.shape[1] if group_size is None else group_size
    check_layout(qw, w, t, g, zero_point)
    return t, w, qw, g, w.reshape(w.shape[0], -1, g)


@pytest.mark.parametrize("zero_point", [False, True])
@pytest.mark.parametrize("group_size", GROUPS)
@pytest.mark.parametrize("name", INT_TYPES)
def test_int_types(name, group_size, zero_point):
    t, w, qw, g, groups = quantized(name, group_size, zero_point)
    scales = qw.scales.float()
    if zero_point:
        lo, hi = groups.amin(-1).clamp(max=0), groups.amax(-1).clamp(min=0)
        ideal = (hi - lo) / (t.max_value - t.min_value)
        zeros = qw.zeros.float()
        assert torch.equal(zeros, zeros.round()) and (zeros >= t.min_value).all() and (zeros <= t.max_value).all()
    else:
        top = 2 ** (t.bits - 1) - 1 if t.kind == "uint" else t.max_value
        ideal = groups.abs().amax(-1) / top
        if t.kind == "uint":
            assert (qw.zeros == 2 ** (t.bits - 1)).all()
    check_scales(scales, ideal)
    error = (quant.dequantize(qw, torch.float32) - w).abs()
    assert (error <= expand(scales, g) * 0.5 * (1 + 1e-4)).all()
    assert (quant.dequantize(qw, torch.float32)[4] == 0).all()


@pytest.mark.parametrize("zero_point", [False, True])
@pytest.mark.parametrize("group_size", GROUPS)
@pytest.mark.parametrize("name", FLOAT_TYPES)
def test_float_types(name, group_size, zero_point):
    t, w, qw, g, groups = quantized(name, group_size, zero_point)
    if zero_point:
        lo, hi = groups.amin(-1), groups.amax(-1)
        ideal, mid = (hi - lo) / 2 / t.max_value, (hi + lo) / 2
        # zero = -midpoint / scale, up to its float16 rounding
        zeros = qw.zeros.float()
        assert torch.allclose(zeros, -mid / qw.scales.float(), rtol=FP16_EPS, atol=0)
        # the scale is raised where |zero| would pass half of float16's range
        floor = torch.where(ideal > 0, mid.abs() * 2 / torch.finfo(torch.float16).max, 0.0)
    else:
        ideal, floor = groups.abs().amax(-1) / t.max_value, None
    scales = qw.scales.float()
    check_scales(scales, ideal, floor)
    # in decoded units the element sits at d = w / scale + zero; it is rounded to the float grid, and may
    # saturate only by the float16 rounding of the zero
    s = expand(scales, g)
    zero = expand(qw.zeros, g) if zero_point else torch.zeros_like(w)
    d = w / s + zero
    slack = zero.abs() * FP16_EPS + d.abs() * 1e-6
    assert (d.abs() <= t.max_value + slack).all()
    bound = s * (float_half_spacing(t, d.abs().clamp(max=t.max_value)) + slack)
    error = (quant.dequantize(qw, torch.float32) - w).abs()
    assert (error <= bound).all()
    if not zero_point:  # where the scale is the ideal one, the group's largest element lands on max_value
        big = groups.abs().argmax(-1, keepdim=True)
        top = quant.decode(qw.codes.reshape(groups.shape).gather(-1, big), t).abs().squeeze(-1)
        unclamped = ideal >= torch.finfo(torch.float16).tiny
        assert (top[unclamped] == t.max_value).all() and unclamped.any()


def test_error_is_small_in_practice():
    w = torch.randn(64, 512, generator=torch.Generator().manual_seed(3))
    rel = {}
    for name, zp in [("int8", False), ("uint4", True), ("int4", False), ("float8_e4m3", False),
                     ("float4_e2m1", False)]:
        w_hat = quant.dequantize(quant.quantize(w, name, 128, zero_point=zp))
        assert w_hat.dtype == torch.float16 and w_hat.shape == w.shape
        rel[name] = float((w_hat.float() - w).norm() / w.norm())
    assert rel["int8"] < 0.01 and rel["float8_e4m3"] < 0.04 and rel["uint4"] < 0.12 and rel["int4"] < 0.15
    assert rel["float4_e2m1"] < 0.2


def test_degenerate_groups():
    w = torch.zeros(4, 64)
    w[1] = 1e-8  # tiny: the scale is float16's smallest normal (1 for a float zero point: a constant group)
    w[2] = 3.25  # constant, away from 0
    w[3] = -1000.0
    for name in ["int4", "uint4", "float4_e2m1", "float8_e4m3", "int1"]:
        for zp in ([True] if name == "int1" else [False, True]):
            qw = quant.quantize(w, name, 32, zero_point=zp)
            w_hat = quant.dequantize(qw, torch.float32)
            assert (w_hat[0] == 0).all(), (name, zp)
            if name != "int1":
                constant_float = zp and qw.dtype.is_float
                assert (qw.scales[1] == (1.0 if constant_float else torch.finfo(torch.float16).tiny)).all()
                assert (w_hat[1] == 0).all()  # 1e-8 is below half of every such scale (and of float16)
            assert torch.allclose(w_hat[2:], w[2:], rtol=2 * FP16_EPS, atol=0), (name, zp, w_hat[2:, 0])


def test_scale_dtypes():
    w = weight()
    for scale_dtype in [torch.bfloat16, torch.float32]:
        for zp in [False, True]:
            qw = quant.quantize(w, "int4", 64, zero_point=zp, scale_dtype=scale_dtype)
            assert qw.scales.dtype == scale_dtype and (qw.zeros is None or qw.zeros.dtype == scale_dtype)
            error = (quant.dequantize(qw, torch.float32) - w).abs()
            assert (error <= expand(qw.scales, 64) * 0.5 * (1 + 1e-4)).all()
    qw = quant.quantize(w.half(), "uint4", -1, zero_point=True)  # float16 weight, -1: per channel
    assert qw.group_size == 256 and qw.scales.shape == (16, 1)


def test_int1_needs_zero_points():
    with pytest.raises(ValueError, match="int1 has no positive value.*zero_point=True"):
        quant.quantize(torch.randn(4, 64), "int1", 32)
    with pytest.raises(ValueError, match="uint1 has no positive value"):
        quant.quantize(torch.randn(4, 64), "uint1", 32)
    w = torch.randn(4, 64)
    qw = quant.quantize(w, "uint1", 32, zero_point=True)
    assert ((quant.dequantize(qw, torch.float32) - w).abs() <= expand(qw.scales, 32) * 0.5 * (1 + 1e-4)).all()


def test_bad_inputs():
    w = torch.randn(8, 100)
    with pytest.raises(ValueError, match="positive divisor of K = 100"):
        quant.quantize(w, "int4", 32)
    with pytest.raises(ValueError, match="positive divisor"):
        quant.quantize(w, "int4", 0)
    with pytest.raises(ValueError, match="2-d"):
        quant.quantize(torch.randn(64), "int4", 32)
    with pytest.raises(ValueError, match="2-d"):
        quant.quantize(torch.randn(2, 4, 64), "int4", 32)
    with pytest.raises(ValueError, match="floating-point"):
        quant.quantize(torch.ones(4, 64, dtype=torch.int32), "int4", 32)
    with pytest.raises(ValueError, match="unknown low-bit type"):
        quant.quantize(torch.randn(4, 64), "int16", 32)
    with pytest.raises(ValueError, match="low-bit type name"):
        quant.quantize(torch.randn(4, 64), torch.int8, 32)
    bad = torch.randn(4, 64)
    bad[0, 0] = math.nan
    with pytest.raises(ValueError, match="inf or NaN"):
        quant.quantize(bad, "int4", 32)
    with pytest.raises(ValueError, match="beyond the range of torch.float16"):
        quant.quantize(torch.full((1, 32), 1e6), "float4_e2m1", 32)
