"""T.im2col: tiles of a 2-d convolution's im2col matrix gathered from an NHWC image, into shared tiles, fragments
and global regions (CPU: generated CUDA and errors; GPU: values against torch's unfold and conv2d)."""
import pytest

import tilex
import tilex.language as T
from tilex.op.base import TileOpError


def out_size(H, K, S, D, P):
    return (H + 2 * P - D * (K - 1) - 1) // S + 1


def im2col_kernel(N, H, W, C, K, S=1, D=1, P=0, bm=64, bk=32, dest="shared", dtype="float16", threads=128):
    """img (N, H, W, C) -> Out: the whole im2col matrix, padded to whole (bm, bk) tiles (the padding must be 0)."""
    OH, OW = out_size(H, K, S, D, P), out_size(W, K, S, D, P)
    gm, gk = -(-(N * OH * OW) // bm), -(-(K * K * C) // bk)

    @T.prim_func
    def main(img: T.Tensor((N, H, W, C), dtype), Out: T.Tensor((gm * bm, gk * bk), dtype)):
        with T.Kernel(gk, gm, threads=threads) as (bx, by):
            if dest == "global":
                T.im2col(img, Out[by * bm:(by + 1) * bm, bx * bk:(bx + 1) * bk], by, bx, K, S, D, P)
            else:
                if dest == "shared":
                    tile = T.alloc_shared((bm, bk), dtype)
                else:
                    tile = T.alloc_fragment((bm, bk), dtype)
                T.im2col(img, tile, by, bx, K, S, D, P)
                T.copy(tile, Out[by * bm, bx * bk])

    return main


def conv_kernel(N, H, W, C, F, K, S=1, D=1, P=1, bm=64, bn=128, bk=32, stages=3, threads=256, dtype="float16"):
    """TileLang's implicit-GEMM convolution: NHWC image, (K, K, C, F) filter, NHWC output (seen as matrices)."""
    OH, OW = out_size(H, K, S, D, P), out_size(W, K, S, D, P)

    @T.prim_func
    def main(data: T.Tensor((N, H, W, C), dtype), kernel: T.Tensor((K, K, C, F), dtype),
             out: T.Tensor((N, OH, OW, F), dtype)):
        with T.Kernel(T.ceildiv(F, bn), T.ceildiv(N * OH * OW, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared((bk, bn), dtype)
            C_l = T.alloc_fragment((bm, bn), "float32")
            kernel_flat = T.Tensor((K * K * C, F), dtype, kernel.data)
            out_flat = T.Tensor((N * OH * OW, F), dtype, out.data)
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K * K * C, bk), num_stages=stages):
                T.im2col(data, A_s, by, k, K, S, D, P)
                T.copy(kernel_flat[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, out_flat[by * bm, bx * bn])

    return main


def cuda(func, **kw):
    src = tilex.compile(func, target="sm_90a", **kw).get_kernel_source()
    return src[src.index('extern "C"'):]


# ---- CPU: the generated code --------------------------------------------------------------------------------------
def test_channels_move_in_16_byte_vectors_and_padding_is_zero():
    src = cuda(im2col_kernel(2, 16, 16, 64, 3, P=1))
    assert "*(uint4*)(img_ptr" in src  # 8 halves of one window position at once
    assert "make_uint4(" in src  # the zero vector of the padding
    assert "} else {" in src


def test_channels_that_do_not_fill_a_vector_are_gathered_one_by_one():
    src = cuda(im2col_kernel(1, 9, 9, 3, 3, S=2, P=1, bm=32, bk=16))
    assert "uint4" not in src and "img_ptr[" in src


@pytest.mark.parametrize("dest", ["shared", "fragment", "global"])
def test_every_destination_compiles(dest):
    src = cuda(im2col_kernel(1, 8, 8, 16, 3, P=1, dest=dest))
    assert "img_ptr" in src


def test_old_name_is_the_same_operator():
    @T.prim_func
    def main(img: T.Tensor((1, 8, 8, 16), "float16"), Out: T.Tensor((64, 144), "float16")):
        with T.Kernel(1, threads=128) as bx:
            tile = T.alloc_shared((64, 32), "float16")
            T.c2d_im2col(img, tile, 0, 1, 3, 1, 1, 1, eviction_policy="evict_normal")
            T.copy(tile, Out[0, 32])

    @T.prim_func
    def same(img: T.Tensor((1, 8, 8, 16), "float16"), Out: T.Tensor((64, 144), "float16")):
        with T.Kernel(1, threads=128) as bx:
            tile = T.alloc_shared((64, 32), "float16")
            T.im2col(img, tile, 0, 1, 3, 1, 1, 1)
            T.copy(tile, Out[0, 32])

    assert cuda(main) == cuda(same).replace("same_kernel", "main_kernel")


def test_tile_of_a_larger_shared_buffer():
    @T.prim_func
    def main(img: T.Tensor((1, 8, 8, 16), "float16"), Out: T.Tensor((64, 32), "float16")):
        with T.Kernel(1, threads=128) as bx:
            tiles = T.alloc_shared((2, 64, 32), "float16")
            T.im2col(img, tiles[1, :, :], 0, 0, 3, 1, 1, 1)
            T.copy(tiles[1, :, :], Out)

    assert "img_ptr" in cuda(main)


@pytest.mark.parametrize("stages", [1, 3])
def test_implicit_gemm_convolution_compiles(stages):
    src = cuda(conv_kernel(2, 16, 16, 64, 128, 3, stages=stages))
    assert "*(uint4*)(data_ptr" in src and "wgmma" in src


def test_convolution_without_warp_specialization():
    src = cuda(conv_kernel(2, 16, 16, 64, 128, 3), pass_configs={"tilex.disable_warp_specialized": True})
    assert "*(uint4*)(data_ptr" in src


# ---- CPU: errors --------------------------------------------------------------------------------------------------
def _program(body, img_shape=(1, 8, 8, 16), img_dtype="float16"):
    @T.prim_func
    def main(img: T.Tensor(img_shape, img_dtype), Out: T.Tensor((64, 32), "float16")):
        with T.Kernel(1, threads=128) as bx:
            tile = T.alloc_shared((64, 32), "float16")
            frag = T.alloc_fragment((64, 32), "float16")
            loc = T.alloc_local((64, 32), "float16")
            body(img, tile, frag, loc)
            T.copy(tile, Out)

    return main


@pytest.mark.parametrize("body, error, match", [
    (lambda img, t, f, l: T.im2col(img, t, 0, 0, 0, 1, 1, 1), ValueError, "kernel must be >= 1"),
    (lambda img, t, f, l: T.im2col(img, t, 0, 0, 3, 0, 1, 1), ValueError, "stride must be >= 1"),
    (lambda img, t, f, l: T.im2col(img, t, 0, 0, 3, 1, 1, -1), ValueError, "pad must be >= 0"),
    (lambda img, t, f, l: T.im2col(img, t, 0, 0, 3, 1.5, 1, 1), TypeError, "stride must be an int"),
    (lambda img, t, f, l: T.im2col(img, t, 0.5, 0, 3, 1, 1, 1), TypeError, "nhw_step must be an integer"),
    (lambda img, t, f, l: T.im2col(img, t, 0, 0, 3, 1, 1, 1, eviction_policy="evict_first"), NotImplementedError,
     "eviction_policy='evict_first'"),
    (lambda img, t, f, l: T.im2col(img, t, 0, 0, 3, 1, 1, 1, eviction_policy="evict_soon"), ValueError,
     "eviction_policy must be one of"),
    (lambda img, t, f, l: T.im2col(img, t, 0, 0, 3, 1, 1, 1, annotations={"x": 1}), NotImplementedError,
     "annotation 'x'"),
    (lambda img, t, f, l: T.im2col(img, l, 0, 0, 3, 1, 1, 1), TileOpError, "not the per-thread buffer"),
    (lambda img, t, f, l: T.im2col(img, f[0:32, :], 0, 0, 3, 1, 1, 1), TileOpError, "written whole"),
    (lambda img, t, f, l: T.im2col(img[0:1, 0:4, :, :], t, 0, 0, 3, 1, 1, 1), TileOpError,
     "whole 4-d .N, H, W, C. buffer"),
])
def test_bad_arguments(body, error, match):
    with pytest.raises(error, match=match):
        _program(body)


def test_image_must_be_4d_and_of_the_tile_dtype():
    with pytest.raises(TileOpError, match="whole 4-d"):
        _program(lambda img, t, f, l: T.im2col(img, t, 0, 0, 3, 1, 1, 1), img_shape=(8, 8, 16))
    with pytest.raises(TileOpError, match="the dtypes must be equal"):
        _program(lambda img, t, f, l: T.im2col(img, t, 0, 0, 3, 1, 1, 1), img_dtype="float32")


# ---- GPU: values ----------------------------------------------------------------------------------------------------
def ref_im2col(x, K, S, D, P, rows, cols):
    """The im2col matrix of NHWC `x` ((n, oh, ow) rows, (kh, kw, c) columns), zero-padded to rows x cols."""
    import torch

    n, h, w, c = x.shape
    unf = torch.nn.functional.unfold(x.permute(0, 3, 1, 2).float(), K, dilation=D, padding=P, stride=S)
    L = unf.shape[-1]
    mat = unf.view(n, c, K, K, L).permute(0, 4, 2, 3, 1).reshape(n * L, K * K * c)
    out = torch.zeros(rows, cols, dtype=torch.float32, device=x.device)
    out[:n * L, :K * K * c] = mat
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("N, H, W, C, K, S, D, P, bm, bk, dest", [
    (2, 16, 16, 64, 3, 1, 1, 1, 64, 32, "shared"),
    (2, 16, 16, 64, 3, 1, 1, 1, 64, 32, "fragment"),
    (2, 16, 16, 64, 3, 1, 1, 1, 64, 32, "global"),
    (1, 9, 11, 3, 3, 2, 1, 1, 32, 16, "shared"),     # ragged rows and columns, scalar gathers
    (3, 14, 10, 24, 5, 1, 2, 2, 64, 64, "shared"),   # dilation, a channel count of three 8-vectors
    (1, 7, 7, 16, 1, 1, 1, 0, 32, 16, "fragment"),   # a 1 x 1 window
    (2, 12, 12, 32, 3, 3, 1, 0, 32, 32, "global"),   # stride 3, no padding
])
def test_im2col_matches_unfold_gpu(N, H, W, C, K, S, D, P, bm, bk, dest):
    import torch

    kern = tilex.compile(im2col_kernel(N, H, W, C, K, S, D, P, bm=bm, bk=bk, dest=dest), out_idx=[1])
    x = torch.randn(N, H, W, C, device="cuda", dtype=torch.float16)
    got = kern(x)
    want = ref_im2col(x, K, S, D, P, *got.shape)
    torch.testing.assert_close(got.float(), want, rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("N, H, W, C, F, K, S, D, P, stages, configs", [
    (2, 16, 16, 64, 128, 3, 1, 1, 1, 3, None),
    (2, 16, 16, 64, 128, 3, 1, 1, 1, 1, None),
    (2, 16, 16, 64, 128, 3, 1, 1, 1, 3, {"tilex.disable_warp_specialized": True}),
    (1, 15, 13, 32, 64, 3, 2, 2, 2, 2, None),       # ragged output rows, stride and dilation
])
def test_convolution_matches_conv2d_gpu(N, H, W, C, F, K, S, D, P, stages, configs):
    import torch

    kern = tilex.compile(conv_kernel(N, H, W, C, F, K, S, D, P, stages=stages), out_idx=[2], pass_configs=configs)
    x = torch.randn(N, H, W, C, device="cuda", dtype=torch.float16)
    w = torch.randn(K, K, C, F, device="cuda", dtype=torch.float16)
    got = kern(x, w)
    want = torch.conv2d(x.permute(0, 3, 1, 2).float(), w.permute(3, 2, 0, 1).float(), stride=S, padding=P,
                        dilation=D).permute(0, 2, 3, 1)
    torch.testing.assert_close(got.float(), want, rtol=1e-2, atol=5e-2)
