"""Tensors of more than 2^31 - 1 elements (TileLang's dsa_hisa logits, 65536 x 65536 fp32): their constant extents
are int64, so the flattened offsets are computed in int64 (TVM's FlattenBuffer multiplied int32 extents into an
int32 literal of 2^32 and failed). Smaller tensors keep int32 extents.

CPU tests: the parsed parameters and the CUDA tilex generates for sm_90a."""
import tilex
import tilex.language as T


def mask_rows(rows=65536, cols=65536, threads=512, block=4096):
    @T.prim_func
    def main(L: T.Tensor((rows, cols), "float32"), lo: T.Tensor((rows,), "int32")):
        with T.Kernel(rows, threads=threads) as bx:
            tx = T.get_thread_binding()
            for n in T.serial(T.ceildiv(cols, block)):
                for k in T.serial(block // threads):
                    idx = n * block + k * threads + tx
                    if idx < lo[bx]:
                        L[bx, idx] = -T.infinity("float32")

    return main


def _param_dtypes(func, name):
    buf = next(p for p in func.params if p.name == name)
    return [str(d.dtype) for d in buf.shape]


def test_large_tensor_has_int64_extents():
    assert _param_dtypes(mask_rows(), "L") == ["int64", "int64"]
    assert _param_dtypes(mask_rows(), "lo") == ["int32"]
    assert _param_dtypes(mask_rows(rows=1024, cols=1024), "L") == ["int32", "int32"]


def test_large_tensor_offsets_are_int64():
    src = tilex.compile(mask_rows(), target="sm_90a").get_kernel_source()
    assert "(int64_t)65536" in src


def test_large_strided_tensor_has_int64_strides():
    @T.prim_func
    def main(A: T.StridedTensor((65536, 32768), (65536, 1), "float16")):
        with T.Kernel(1, threads=32) as bx:
            A[0, 0] = T.float16(0)

    buf = main.params[0]
    assert [str(d.dtype) for d in buf.shape] == ["int64", "int64"]
    assert [str(d.dtype) for d in buf.strides] == ["int64", "int64"]
