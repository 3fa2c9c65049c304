// The CUDA driver API, loaded from libcuda.so.1 at run time: nothing links libcuda, so the
// same binary starts on hosts without a driver, where load() says why there is no GPU.
#pragma once

#include <cuda.h>

#include <string>

#include "common/status.h"

namespace gcagent::shm::cuda {

struct CudaDriver {
  decltype(&cuInit) init;
  decltype(&cuGetErrorString) getErrorString;
  decltype(&cuDeviceGetCount) deviceGetCount;
  decltype(&cuDeviceGet) deviceGet;
  decltype(&cuDeviceGetUuid) deviceGetUuid;
  decltype(&cuDevicePrimaryCtxRetain) primaryCtxRetain;
  decltype(&cuCtxSetCurrent) ctxSetCurrent;
  decltype(&cuMemGetAllocationGranularity) memGetAllocationGranularity;
  decltype(&cuMemCreate) memCreate;
  decltype(&cuMemRelease) memRelease;
  decltype(&cuMemAddressReserve) memAddressReserve;
  decltype(&cuMemAddressFree) memAddressFree;
  decltype(&cuMemMap) memMap;
  decltype(&cuMemUnmap) memUnmap;
  decltype(&cuMemSetAccess) memSetAccess;
  decltype(&cuMemExportToShareableHandle) memExportToShareableHandle;
  decltype(&cuMemImportFromShareableHandle) memImportFromShareableHandle;
  decltype(&cuMemcpyDtoH) memcpyDtoH;
  decltype(&cuMemcpyHtoD) memcpyHtoD;
  decltype(&cuCtxSynchronize) ctxSynchronize;
  decltype(&cuStreamCreate) streamCreate;
  decltype(&cuStreamDestroy) streamDestroy;
  decltype(&cuStreamSynchronize) streamSynchronize;
  decltype(&cuStreamWaitEvent) streamWaitEvent;
  decltype(&cuEventCreate) eventCreate;
  decltype(&cuEventDestroy) eventDestroy;
  decltype(&cuEventRecord) eventRecord;
  decltype(&cuIpcGetEventHandle) ipcGetEventHandle;
  decltype(&cuIpcOpenEventHandle) ipcOpenEventHandle;
  decltype(&cuMemcpyHtoDAsync) memcpyHtoDAsync;
  decltype(&cuMemcpyDtoHAsync) memcpyDtoHAsync;
  // The legacy IPC path, for devices or drivers that cannot export cuMem memory as an fd.
  decltype(&cuDeviceGetAttribute) deviceGetAttribute;
  decltype(&cuMemAlloc) memAlloc;
  decltype(&cuMemFree) memFree;
  decltype(&cuIpcGetMemHandle) ipcGetMemHandle;
  decltype(&cuIpcOpenMemHandle) ipcOpenMemHandle;
  decltype(&cuIpcCloseMemHandle) ipcCloseMemHandle;
  // The agent's device data path: host callbacks on its stream, device-to-device copies.
  decltype(&cuLaunchHostFunc) launchHostFunc;
  decltype(&cuMemcpyDtoDAsync) memcpyDtoDAsync;
  decltype(&cuMemHostAlloc) memHostAlloc;  // pinned: asynchronous copies stay asynchronous
  decltype(&cuMemFreeHost) memFreeHost;

  // The driver, loaded and initialised once per process; unavailable("no GPU: ...") when
  // libcuda.so.1 is missing, lacks an entry point, or cuInit fails.
  static Result<const CudaDriver*> load();

  // "cuMemCreate failed: out of memory (2)"
  std::string describe(const char* call, CUresult r) const;
};

}  // namespace gcagent::shm::cuda
