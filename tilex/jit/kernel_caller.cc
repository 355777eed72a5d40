// The host side of a tilex kernel call, in one crossing from Python into C++.
//
// make_caller(fn, n_inputs, out_pos, ndim, recipe_0 .. recipe_{ndim-1}, dtype_code, dtype_bits, dtype_lanes)
// returns a function of the kernel's inputs that checks their data pointers' alignment (TVM's host code checks
// everything else), allocates the output through the DLPack allocator tvm-ffi installs for the call (torch's
// caching allocator when called with torch tensors) on the first tensor's device, calls `fn` with it inserted
// at `out_pos`, and returns it. out_pos = -1: no output (the function returns None). Each recipe entry is a
// static extent (>= 0) or, as -(1 + 16 * input + axis), the extent of an input's axis (axis 15: the input is a
// scalar and the extent its value). Allocating here saves the Python-level torch.empty that dominated a small
// kernel's host time; a refused call throws, and the Python side then names the problem.
//
// make_dispatcher(pos, axis, fallback, beyond, choices, caller_0 .. caller_{n-1}) returns a function that reads a
// size from its arguments (input `pos`'s extent along `axis`, or its value for axis 15) and forwards the call to
// caller_{choices[size]}; `beyond(size)` picks the caller of a size past the table, and `fallback` serves a call
// whose size cannot be read (the chosen kernel's own checks then refuse it). This is runtime selection's
// per-call decision (tilex.autotuner.dispatch.DynamicKernel) without a Python frame.
//
// streamk_workspace(nbytes) is tilex.streamk_workspace (tilex/jit/workspace.py) without a Python frame: the pointer
// a stream-K kernel's host code asks for before each launch, one zeroed buffer per (current device, launch stream),
// kept for good. tilex's Python function tilex.streamk_workspace_alloc allocates it when registered (zeroed on the
// launch stream, which CUDA graph capture records); in a process without tilex (a TVM RPC server started with
// --load-library of this library) TVM's runtime allocates and zeroes it. Loading this library registers
// tilex.streamk_workspace when nothing has yet, so that exported stream-K kernels run in such a process.
#include <tvm/ffi/any.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/shape.h>
#include <tvm/ffi/c_api.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

#include <dlfcn.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace {

using tvm::ffi::Any;
using tvm::ffi::AnyView;
using tvm::ffi::Function;
using tvm::ffi::PackedArgs;
using tvm::ffi::Tensor;

constexpr uintptr_t kAlignment = 16;  // tilex.jit.args.DATA_ALIGNMENT
constexpr int64_t kScalarAxis = 15;

struct Caller {
  Function fn;
  int64_t n_inputs;
  int64_t out_pos;
  std::vector<int64_t> recipe;
  DLDataType dtype;

  void operator()(PackedArgs args, Any* result) const {
    if (args.size() != n_inputs) TVM_FFI_THROW(TypeError) << "wrong number of arguments";
    DLDevice device{kDLCPU, 0};
    bool found = false;
    for (int i = 0; i < args.size(); ++i) {
      if (auto t = args[i].try_cast<DLTensor*>()) {
        uintptr_t addr = reinterpret_cast<uintptr_t>((*t)->data) + (*t)->byte_offset;
        if (addr % kAlignment) TVM_FFI_THROW(ValueError) << "misaligned data pointer";
        if (!found) device = (*t)->device;
        found = true;
      }
    }
    if (out_pos < 0) {
      fn.CallPacked(args, result);
      *result = nullptr;
      return;
    }
    if (!found) TVM_FFI_THROW(TypeError) << "no tensor argument to take the device from";
    std::vector<int64_t> shape(recipe.size());
    for (size_t k = 0; k < recipe.size(); ++k) {
      int64_t r = recipe[k];
      if (r >= 0) {
        shape[k] = r;
        continue;
      }
      int64_t src = -(r + 1);
      int64_t input = src / 16, axis = src % 16;
      if (axis == kScalarAxis) {
        shape[k] = args[input].cast<int64_t>();
      } else {
        DLTensor* t = args[input].cast<DLTensor*>();
        if (axis >= t->ndim) TVM_FFI_THROW(ValueError) << "input has too few dimensions";
        shape[k] = t->shape[axis];
      }
      if (shape[k] < 0) TVM_FFI_THROW(ValueError) << "negative size";
    }
    Tensor out =
        Tensor::FromEnvAlloc(TVMFFIEnvTensorAlloc, tvm::ffi::ShapeView(shape.data(), shape.size()), dtype, device);
    std::vector<AnyView> call_args;
    call_args.reserve(args.size() + 1);
    for (int i = 0; i < args.size(); ++i) {
      if (i == out_pos) call_args.emplace_back(out);
      call_args.emplace_back(args[i]);
    }
    if (out_pos == args.size()) call_args.emplace_back(out);
    Any ignored;
    fn.CallPacked(call_args.data(), static_cast<int32_t>(call_args.size()), &ignored);
    *result = out;
  }
};

struct Dispatcher {
  std::vector<Function> callers;
  std::vector<int32_t> choices;  // size -> caller index, dense over 0 .. choices.size() - 1
  int64_t pos;
  int64_t axis;
  int64_t fallback;
  Function beyond;

  void operator()(PackedArgs args, Any* result) const {
    int64_t size = -1;
    if (pos < args.size()) {
      if (axis == kScalarAxis) {
        if (auto v = args[pos].try_cast<int64_t>()) size = *v;
      } else if (auto t = args[pos].try_cast<DLTensor*>()) {
        if (axis < (*t)->ndim) size = (*t)->shape[axis];
      }
    }
    int64_t k = fallback;
    if (size >= 0 && size < static_cast<int64_t>(choices.size())) {
      k = choices[size];
    } else if (size >= 0) {
      k = beyond(size).cast<int64_t>();
      if (k < 0 || k >= static_cast<int64_t>(callers.size())) TVM_FFI_THROW(IndexError) << "no such configuration";
    }
    callers[k].CallPacked(args, result);
  }
};

void MakeDispatcher(const AnyView* args, int32_t num_args, Any* result) {
  if (num_args < 6) TVM_FFI_THROW(TypeError) << "make_dispatcher: too few arguments";
  Dispatcher d;
  d.pos = args[0].cast<int64_t>();
  d.axis = args[1].cast<int64_t>();
  d.fallback = args[2].cast<int64_t>();
  d.beyond = args[3].cast<Function>();
  auto choices = args[4].cast<tvm::ffi::Array<int64_t>>();
  for (int i = 5; i < num_args; ++i) d.callers.push_back(args[i].cast<Function>());
  int64_t n = static_cast<int64_t>(d.callers.size());
  if (d.fallback < 0 || d.fallback >= n) TVM_FFI_THROW(IndexError) << "make_dispatcher: bad fallback";
  d.choices.reserve(choices.size());
  for (int64_t c : choices) {
    if (c < 0 || c >= n) TVM_FFI_THROW(IndexError) << "make_dispatcher: choice out of range";
    d.choices.push_back(static_cast<int32_t>(c));
  }
  *result = Function::FromPacked(d);
}

void MakeCaller(const AnyView* args, int32_t num_args, Any* result) {
  if (num_args < 7) TVM_FFI_THROW(TypeError) << "make_caller: too few arguments";
  Caller c;
  c.fn = args[0].cast<Function>();
  c.n_inputs = args[1].cast<int64_t>();
  c.out_pos = args[2].cast<int64_t>();
  int64_t ndim = args[3].cast<int64_t>();
  if (ndim < 0 || num_args != 4 + ndim + 3) TVM_FFI_THROW(TypeError) << "make_caller: malformed arguments";
  for (int64_t i = 0; i < ndim; ++i) c.recipe.push_back(args[4 + i].cast<int64_t>());
  c.dtype.code = static_cast<uint8_t>(args[4 + ndim].cast<int64_t>());
  c.dtype.bits = static_cast<uint8_t>(args[5 + ndim].cast<int64_t>());
  c.dtype.lanes = static_cast<uint16_t>(args[6 + ndim].cast<int64_t>());
  *result = Function::FromPacked(c);
}

// The current CUDA device: the primary context's, which the runtime API's cudaSetDevice (TVM's __tvm_set_device,
// run by every host function before its launches) makes current. Read through the driver library the process has
// loaded already, so this file needs no CUDA headers.
int CurrentCudaDevice() {
  using GetDevice = int (*)(int*);
  static GetDevice get = [] {
    void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    return lib ? reinterpret_cast<GetDevice>(dlsym(lib, "cuCtxGetDevice")) : nullptr;
  }();
  int device = 0;
  if (get == nullptr || get(&device) != 0) TVM_FFI_THROW(RuntimeError) << "stream-K workspace: no current CUDA device";
  return device;
}

// A zeroed buffer of nbytes on device, ordered before later work on stream: tilex's allocator, else TVM's runtime
// (allocated and zeroed before this returns).
int64_t AllocateZeroed(int device, void* stream, int64_t nbytes) {
  static std::vector<Tensor> kept;  // TVM's buffers, alive for good
  if (auto alloc = Function::GetGlobal("tilex.streamk_workspace_alloc")) {
    return (*alloc)(device, reinterpret_cast<int64_t>(stream), nbytes).cast<int64_t>();
  }
  static Function empty = Function::GetGlobalRequired("runtime.TVMTensorAllocWithScope");
  static Function copy_from = Function::GetGlobalRequired("runtime.TVMTensorCopyFromBytes");
  Tensor t = empty(tvm::ffi::Shape({nbytes}), DLDataType{kDLUInt, 8, 1}, DLDevice{kDLCUDA, device}, nullptr)
                 .cast<Tensor>();
  std::vector<uint8_t> zeros(static_cast<size_t>(nbytes));
  copy_from(t, static_cast<void*>(zeros.data()), nbytes);
  kept.push_back(t);
  return reinterpret_cast<int64_t>(t.data_ptr());
}

void StreamKWorkspace(const AnyView* args, int32_t num_args, Any* result) {
  static std::mutex mutex;
  static std::map<std::pair<int, void*>, std::pair<int64_t, int64_t>> held;  // -> (bytes, pointer)
  if (num_args != 1) TVM_FFI_THROW(TypeError) << "streamk_workspace: takes the byte count";
  int64_t nbytes = args[0].cast<int64_t>();
  int device = CurrentCudaDevice();
  void* stream = TVMFFIEnvGetStream(kDLCUDA, device);
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = held[{device, stream}];
  if (slot.first < nbytes) slot = {nbytes, AllocateZeroed(device, stream, nbytes)};
  *result = reinterpret_cast<void*>(slot.second);
}

// Registers tilex.streamk_workspace when this library is loaded into a process that has none.
const bool registered_workspace = [] {
  if (!Function::GetGlobal("tilex.streamk_workspace")) {
    Function::SetGlobal("tilex.streamk_workspace", Function::FromPacked(StreamKWorkspace), false);
  }
  return true;
}();

}  // namespace

extern "C" TVM_FFI_DLL_EXPORT int __tvm_ffi_streamk_workspace(void* self, const TVMFFIAny* args, int32_t num_args,
                                                              TVMFFIAny* result) {
  TVM_FFI_SAFE_CALL_BEGIN();
  StreamKWorkspace(reinterpret_cast<const AnyView*>(args), num_args, reinterpret_cast<Any*>(result));
  TVM_FFI_SAFE_CALL_END();
}

extern "C" TVM_FFI_DLL_EXPORT int __tvm_ffi_make_caller(void* self, const TVMFFIAny* args, int32_t num_args,
                                                        TVMFFIAny* result) {
  TVM_FFI_SAFE_CALL_BEGIN();
  MakeCaller(reinterpret_cast<const AnyView*>(args), num_args, reinterpret_cast<Any*>(result));
  TVM_FFI_SAFE_CALL_END();
}

extern "C" TVM_FFI_DLL_EXPORT int __tvm_ffi_make_dispatcher(void* self, const TVMFFIAny* args, int32_t num_args,
                                                            TVMFFIAny* result) {
  TVM_FFI_SAFE_CALL_BEGIN();
  MakeDispatcher(reinterpret_cast<const AnyView*>(args), num_args, reinterpret_cast<Any*>(result));
  TVM_FFI_SAFE_CALL_END();
}
