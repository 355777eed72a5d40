// tilex's kernel call with outputs: allocate a kernel's output tensor where the caller's tensors come from (the
// DLPack allocator tvm-ffi installs for the call: torch's caching allocator when called with torch tensors),
// call the compiled function with it inserted among the arguments, and return it. Doing this in one C++ call
// saves the Python-level torch.empty that dominated a small kernel's host time.
//
// Arguments: fn, out_pos, ndim, dim_0 .. dim_{ndim-1}, dtype_code, dtype_bits, dtype_lanes, kernel args...
// `fn` receives the kernel args with the new tensor at position `out_pos`; the device is the first tensor
// argument's.
#include <tvm/ffi/any.h>
#include <tvm/ffi/c_api.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

#include <vector>

namespace {

using tvm::ffi::Any;
using tvm::ffi::AnyView;
using tvm::ffi::Function;
using tvm::ffi::Tensor;

void CallWithOutput(const AnyView* args, int32_t num_args, Any* result) {
  if (num_args < 3) TVM_FFI_THROW(TypeError) << "call_with_output: too few arguments";
  Function fn = args[0].cast<Function>();
  int64_t out_pos = args[1].cast<int64_t>();
  int64_t ndim = args[2].cast<int64_t>();
  int64_t head = 3 + ndim + 3;
  if (ndim < 0 || num_args < head) TVM_FFI_THROW(TypeError) << "call_with_output: malformed header";
  std::vector<int64_t> shape(ndim);
  for (int64_t i = 0; i < ndim; ++i) shape[i] = args[3 + i].cast<int64_t>();
  DLDataType dtype;
  dtype.code = static_cast<uint8_t>(args[3 + ndim].cast<int64_t>());
  dtype.bits = static_cast<uint8_t>(args[4 + ndim].cast<int64_t>());
  dtype.lanes = static_cast<uint16_t>(args[5 + ndim].cast<int64_t>());
  int64_t n_in = num_args - head;
  if (out_pos < 0 || out_pos > n_in) TVM_FFI_THROW(IndexError) << "call_with_output: bad output position";
  DLDevice device{kDLCPU, 0};
  bool found = false;
  for (int64_t i = head; i < num_args && !found; ++i) {
    if (auto t = args[i].try_cast<DLTensor*>()) {
      device = (*t)->device;
      found = true;
    }
  }
  if (!found) TVM_FFI_THROW(TypeError) << "call_with_output: no tensor argument to take the device from";
  Tensor out = Tensor::FromEnvAlloc(TVMFFIEnvTensorAlloc, tvm::ffi::ShapeView(shape.data(), shape.size()),
                                    dtype, device);
  std::vector<AnyView> call_args;
  call_args.reserve(n_in + 1);
  for (int64_t i = 0; i < n_in; ++i) {
    if (i == out_pos) call_args.emplace_back(out);
    call_args.emplace_back(args[head + i]);
  }
  if (out_pos == n_in) call_args.emplace_back(out);
  Any ignored;
  fn.CallPacked(call_args.data(), static_cast<int32_t>(call_args.size()), &ignored);
  *result = out;
}

}  // namespace

extern "C" TVM_FFI_DLL_EXPORT int __tvm_ffi_call_with_output(void* self, const TVMFFIAny* args,
                                                             int32_t num_args, TVMFFIAny* result) {
  TVM_FFI_SAFE_CALL_BEGIN();
  CallWithOutput(reinterpret_cast<const AnyView*>(args), num_args, reinterpret_cast<Any*>(result));
  TVM_FFI_SAFE_CALL_END();
}
