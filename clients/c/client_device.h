// The trainer's view of the device memory its agent exported: the mapped allocation and the
// two interprocess events that order GPU work across the processes. Built on shm/cuda (libcuda
// loaded at run time) when the library has CUDA; otherwise every call says it has none.
#pragma once

#include <cstdint>
#include <memory>

#include "outcome.h"
#include "shm/protocol.h"

namespace gcagent::client {

class DeviceMapping;

// The UUID of a device ordinal as this process sees it.
Outcome gpuUuid(int ordinal, shm::protocol::GpuUuidBytes* out);

// Maps the agent's offer on the local device with the offer's GPU UUID. `fd` is the
// descriptor that came with a kPosixFd offer (-1 otherwise); the caller keeps and closes it.
Outcome mapDevice(const shm::protocol::DeclaredDevice& offer, int fd, std::shared_ptr<DeviceMapping>* out);

// The mapped allocation's first byte (a CUdeviceptr).
uint64_t deviceBase(const DeviceMapping& mapping);

// Records the ready event on `stream` (a CUstream): the agent's reads wait for it.
Outcome recordReady(const DeviceMapping& mapping, void* stream);
// Makes `stream`'s later work wait for the agent's last record of the done event.
Outcome waitDone(const DeviceMapping& mapping, void* stream);

}  // namespace gcagent::client
