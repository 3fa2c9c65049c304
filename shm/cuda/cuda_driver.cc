#include "shm/cuda/cuda_driver.h"

#include <dlfcn.h>

#include <mutex>

#include "common/str_cat.h"

namespace gcagent::shm::cuda {
namespace {

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

// Entry points by base name through cuGetProcAddress, which picks the variant (_v2, ...) of
// the API version these headers describe.
template <class F>
bool resolve(GetProcAddress get, const char* name, F& fn) {
  void* p = nullptr;
  CUdriverProcAddressQueryResult found{};
  if (get(name, &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &found) != CUDA_SUCCESS ||
      found != CU_GET_PROC_ADDRESS_SUCCESS || p == nullptr)
    return false;
  fn = reinterpret_cast<F>(p);
  return true;
}

Result<CudaDriver> open() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return Status::unavailable(strCat("no GPU: cannot load libcuda.so.1: ", dlerror()));
  auto get = reinterpret_cast<GetProcAddress>(dlsym(lib, "cuGetProcAddress_v2"));
  if (get == nullptr)
    return Status::unavailable("no GPU: libcuda.so.1 has no cuGetProcAddress_v2 (driver older than CUDA 12)");
  CudaDriver d{};
  const char* missing = nullptr;
#define GC_RESOLVE(field, name) \
  if (missing == nullptr && !resolve(get, name, d.field)) missing = name
  GC_RESOLVE(init, "cuInit");
  GC_RESOLVE(getErrorString, "cuGetErrorString");
  GC_RESOLVE(deviceGetCount, "cuDeviceGetCount");
  GC_RESOLVE(deviceGet, "cuDeviceGet");
  GC_RESOLVE(deviceGetUuid, "cuDeviceGetUuid");
  GC_RESOLVE(primaryCtxRetain, "cuDevicePrimaryCtxRetain");
  GC_RESOLVE(ctxSetCurrent, "cuCtxSetCurrent");
  GC_RESOLVE(memGetAllocationGranularity, "cuMemGetAllocationGranularity");
  GC_RESOLVE(memCreate, "cuMemCreate");
  GC_RESOLVE(memRelease, "cuMemRelease");
  GC_RESOLVE(memAddressReserve, "cuMemAddressReserve");
  GC_RESOLVE(memAddressFree, "cuMemAddressFree");
  GC_RESOLVE(memMap, "cuMemMap");
  GC_RESOLVE(memUnmap, "cuMemUnmap");
  GC_RESOLVE(memSetAccess, "cuMemSetAccess");
  GC_RESOLVE(memExportToShareableHandle, "cuMemExportToShareableHandle");
  GC_RESOLVE(memImportFromShareableHandle, "cuMemImportFromShareableHandle");
  GC_RESOLVE(memcpyDtoH, "cuMemcpyDtoH");
  GC_RESOLVE(memcpyHtoD, "cuMemcpyHtoD");
  GC_RESOLVE(ctxSynchronize, "cuCtxSynchronize");
  GC_RESOLVE(streamCreate, "cuStreamCreate");
  GC_RESOLVE(streamDestroy, "cuStreamDestroy");
  GC_RESOLVE(streamSynchronize, "cuStreamSynchronize");
  GC_RESOLVE(streamWaitEvent, "cuStreamWaitEvent");
  GC_RESOLVE(eventCreate, "cuEventCreate");
  GC_RESOLVE(eventDestroy, "cuEventDestroy");
  GC_RESOLVE(eventRecord, "cuEventRecord");
  GC_RESOLVE(ipcGetEventHandle, "cuIpcGetEventHandle");
  GC_RESOLVE(ipcOpenEventHandle, "cuIpcOpenEventHandle");
  GC_RESOLVE(memcpyHtoDAsync, "cuMemcpyHtoDAsync");
  GC_RESOLVE(memcpyDtoHAsync, "cuMemcpyDtoHAsync");
  GC_RESOLVE(deviceGetAttribute, "cuDeviceGetAttribute");
  GC_RESOLVE(memAlloc, "cuMemAlloc");
  GC_RESOLVE(memFree, "cuMemFree");
  GC_RESOLVE(ipcGetMemHandle, "cuIpcGetMemHandle");
  GC_RESOLVE(ipcOpenMemHandle, "cuIpcOpenMemHandle");
  GC_RESOLVE(ipcCloseMemHandle, "cuIpcCloseMemHandle");
  GC_RESOLVE(launchHostFunc, "cuLaunchHostFunc");
  GC_RESOLVE(memcpyDtoDAsync, "cuMemcpyDtoDAsync");
  GC_RESOLVE(memHostAlloc, "cuMemHostAlloc");
  GC_RESOLVE(memFreeHost, "cuMemFreeHost");
#undef GC_RESOLVE
  if (missing != nullptr) return Status::unavailable(strCat("no GPU: libcuda.so.1 lacks ", missing));
  if (const CUresult r = d.init(0); r != CUDA_SUCCESS)
    return Status::unavailable(strCat("no GPU: ", d.describe("cuInit", r)));
  return d;
}

}  // namespace

Result<const CudaDriver*> CudaDriver::load() {
  static const Result<CudaDriver> driver = open();  // once: dlopen and cuInit are per process
  if (!driver.ok()) return driver.status();
  return &driver.value();
}

std::string CudaDriver::describe(const char* call, CUresult r) const {
  const char* text = nullptr;
  if (getErrorString == nullptr || getErrorString(r, &text) != CUDA_SUCCESS || text == nullptr)
    text = "unknown error";
  return strCat(call, " failed: ", text, " (", static_cast<int>(r), ")");
}

}  // namespace gcagent::shm::cuda
