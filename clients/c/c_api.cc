// The C edge: argument checks, conversion from C types, and the one place where exceptions
// (std::bad_alloc and anything unexpected) are caught and turned into status codes. Nothing
// thrown inside the library crosses into the caller.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "client.h"
#include "client_device.h"
#include "common/str_cat.h"
#include "gcagent_client.h"

struct gcagent_client {
  std::unique_ptr<gcagent::client::Client> impl;
  std::string last_error;
};

namespace {
using gcagent::strCat;
using gcagent::client::Outcome;
using gcagent::client::failure;

thread_local std::string t_connect_error;

void remember(std::string& slot, std::string message) noexcept {
  try {
    slot = std::move(message);
  } catch (...) {
    // Out of memory while recording an error: keep the previous text rather than throw.
  }
}

// Runs `body`, records a failure's message in `error`, and returns the code.
template <class Body>
int guarded(std::string& error, Body&& body) noexcept {
  try {
    Outcome outcome = body();
    if (!outcome.ok()) remember(error, std::move(outcome.message));
    return outcome.code;
  } catch (const std::bad_alloc&) {
    remember(error, "out of memory");
    return GCAGENT_ERR_NO_MEMORY;
  } catch (const std::exception& e) {
    remember(error, std::string("internal error: ") + e.what());
    return GCAGENT_ERR_INTERNAL;
  } catch (...) {
    remember(error, "internal error: unknown exception");
    return GCAGENT_ERR_INTERNAL;
  }
}

Outcome checkKeys(const uint64_t* keys, size_t count) {
  if (keys == nullptr && count != 0) return failure(GCAGENT_ERR_INVALID_ARGUMENT, "keys is NULL");
  if (count == 0) return failure(GCAGENT_ERR_INVALID_ARGUMENT, "no keys listed");
  return {};
}

// The C tensor descriptions, checked, as protocol declarations.
Outcome convertTensors(const char* call, const gcagent_tensor* tensors, size_t count,
                       std::vector<gcagent::shm::protocol::TensorDecl>* out) {
  if (tensors == nullptr || count == 0)
    return failure(GCAGENT_ERR_INVALID_ARGUMENT, strCat(call, ": no tensors (NULL or count 0)"));
  if (count > gcagent::shm::protocol::kMaxTensors)
    return failure(GCAGENT_ERR_INVALID_ARGUMENT,
                   strCat(call, ": ", count, " tensors exceed ", gcagent::shm::protocol::kMaxTensors));
  std::vector<gcagent::shm::protocol::TensorDecl> decls(count);
  for (size_t i = 0; i < count; ++i) {
    const gcagent_tensor& t = tensors[i];
    auto& d = decls[i];
    d.key = t.key;
    d.elements = t.elements;
    d.priority = t.priority;
    if (t.codec != nullptr) d.codec = t.codec;
    if (t.param_count > gcagent::shm::protocol::kMaxParams)
      return failure(GCAGENT_ERR_INVALID_ARGUMENT, strCat("tensor ", i, " (key ", t.key, "): ", t.param_count,
                                                          " codec parameters exceed ",
                                                          gcagent::shm::protocol::kMaxParams));
    if (t.param_count != 0 && (t.param_keys == nullptr || t.param_values == nullptr))
      return failure(GCAGENT_ERR_INVALID_ARGUMENT,
                     strCat("tensor ", i, " (key ", t.key, "): param_keys or param_values is NULL"));
    for (size_t j = 0; j < t.param_count; ++j) {
      if (t.param_keys[j] == nullptr || t.param_values[j] == nullptr)
        return failure(GCAGENT_ERR_INVALID_ARGUMENT,
                       strCat("tensor ", i, " (key ", t.key, "): codec parameter ", j, " is NULL"));
      d.params.emplace_back(t.param_keys[j], t.param_values[j]);
    }
  }
  *out = std::move(decls);
  return {};
}

}  // namespace

extern "C" {

GCAGENT_API uint32_t gcagent_abi_version(void) { return GCAGENT_CLIENT_ABI_VERSION; }

GCAGENT_API const char* gcagent_status_string(int code) {
  switch (code) {
    case GCAGENT_OK: return "ok";
    case GCAGENT_ERR_INVALID_ARGUMENT: return "invalid argument";
    case GCAGENT_ERR_IO: return "i/o error: the agent is unreachable or closed the connection";
    case GCAGENT_ERR_TIMEOUT: return "timed out";
    case GCAGENT_ERR_PROTOCOL: return "protocol error: the agent sent a bad or unexpected message";
    case GCAGENT_ERR_AGENT: return "the agent reported an error";
    case GCAGENT_ERR_NOT_FOUND: return "key not declared";
    case GCAGENT_ERR_STATE: return "call not valid in the current state";
    case GCAGENT_ERR_NO_MEMORY: return "out of memory";
    case GCAGENT_ERR_INTERNAL: return "internal error in the gcagent client library";
    case GCAGENT_ERR_UNSUPPORTED: return "not supported: needs CUDA, which this library's build or this host lacks";
    default: return "unknown gcagent status code";
  }
}

GCAGENT_API int gcagent_connect(const char* socket_path, const char* job, uint32_t local_rank,
                                uint32_t local_size, int timeout_ms, gcagent_client** out) {
  return gcagent_connect_flags(socket_path, job, local_rank, local_size, timeout_ms, GCAGENT_CONNECT_WAIT_FOR_AGENT,
                               out);
}

GCAGENT_API int gcagent_connect_flags(const char* socket_path, const char* job, uint32_t local_rank,
                                      uint32_t local_size, int timeout_ms, uint32_t flags, gcagent_client** out) {
  if (out != nullptr) *out = nullptr;
  return guarded(t_connect_error, [&]() -> Outcome {
    if (out == nullptr) return failure(GCAGENT_ERR_INVALID_ARGUMENT, "gcagent_connect: out is NULL");
    if (socket_path == nullptr) return failure(GCAGENT_ERR_INVALID_ARGUMENT, "gcagent_connect: socket_path is NULL");
    if (job == nullptr) return failure(GCAGENT_ERR_INVALID_ARGUMENT, "gcagent_connect: job is NULL");
    if ((flags & ~GCAGENT_CONNECT_WAIT_FOR_AGENT) != 0)
      return failure(GCAGENT_ERR_INVALID_ARGUMENT, strCat("gcagent_connect_flags: unknown flag bits ",
                                                          flags & ~GCAGENT_CONNECT_WAIT_FOR_AGENT));
    auto handle = std::make_unique<gcagent_client>();
    gcagent::client::ConnectOptions options{socket_path, job, local_rank, local_size, timeout_ms,
                                            (flags & GCAGENT_CONNECT_WAIT_FOR_AGENT) != 0};
    Outcome r = gcagent::client::Client::connect(options, &handle->impl);
    if (!r.ok()) return r;
    *out = handle.release();
    return r;
  });
}

GCAGENT_API int gcagent_declare(gcagent_client* client, const gcagent_tensor* tensors, size_t count) {
  if (client == nullptr) return GCAGENT_ERR_INVALID_ARGUMENT;
  return guarded(client->last_error, [&]() -> Outcome {
    std::vector<gcagent::shm::protocol::TensorDecl> decls;
    GCAGENT_CLIENT_RETURN_IF_FAILED(convertTensors("gcagent_declare", tensors, count, &decls));
    return client->impl->declare(std::move(decls));
  });
}

GCAGENT_API int gcagent_declare_dtypes(gcagent_client* client, const gcagent_tensor* tensors, const uint8_t* dtypes,
                                       size_t count) {
  if (client == nullptr) return GCAGENT_ERR_INVALID_ARGUMENT;
  return guarded(client->last_error, [&]() -> Outcome {
    std::vector<gcagent::shm::protocol::TensorDecl> decls;
    GCAGENT_CLIENT_RETURN_IF_FAILED(convertTensors("gcagent_declare_dtypes", tensors, count, &decls));
    if (dtypes == nullptr) return failure(GCAGENT_ERR_INVALID_ARGUMENT, "gcagent_declare_dtypes: dtypes is NULL");
    for (size_t i = 0; i < count; ++i) {
      if (dtypes[i] < GCAGENT_DTYPE_FLOAT32 || dtypes[i] > GCAGENT_DTYPE_FLOAT16)
        return failure(GCAGENT_ERR_INVALID_ARGUMENT, strCat("tensor ", i, " (key ", tensors[i].key, "): dtype ",
                                                            static_cast<int>(dtypes[i]), " is not one of ",
                                                            "GCAGENT_DTYPE_FLOAT32, _BFLOAT16, _FLOAT16"));
      decls[i].dtype = static_cast<gcagent::shm::protocol::DType>(dtypes[i]);
    }
    return client->impl->declare(std::move(decls));
  });
}

GCAGENT_API int gcagent_declare_device(gcagent_client* client, const gcagent_tensor* tensors, size_t count,
                                       const uint8_t gpu_uuid[16]) {
  if (client == nullptr) return GCAGENT_ERR_INVALID_ARGUMENT;
  return guarded(client->last_error, [&]() -> Outcome {
    if (gpu_uuid == nullptr) return failure(GCAGENT_ERR_INVALID_ARGUMENT, "gcagent_declare_device: gpu_uuid is NULL");
    std::vector<gcagent::shm::protocol::TensorDecl> decls;
    GCAGENT_CLIENT_RETURN_IF_FAILED(convertTensors("gcagent_declare_device", tensors, count, &decls));
    gcagent::shm::protocol::GpuUuidBytes uuid;
    std::copy(gpu_uuid, gpu_uuid + uuid.size(), uuid.begin());
    return client->impl->declareDevice(std::move(decls), uuid);
  });
}

GCAGENT_API int gcagent_gpu_uuid(int device_ordinal, uint8_t uuid_out[16]) {
  return guarded(t_connect_error, [&]() -> Outcome {
    if (uuid_out == nullptr) return failure(GCAGENT_ERR_INVALID_ARGUMENT, "gcagent_gpu_uuid: uuid_out is NULL");
    gcagent::shm::protocol::GpuUuidBytes uuid;
    GCAGENT_CLIENT_RETURN_IF_FAILED(gcagent::client::gpuUuid(device_ordinal, &uuid));
    std::copy(uuid.begin(), uuid.end(), uuid_out);
    return gcagent::client::success();
  });
}

GCAGENT_API uint64_t gcagent_device_buffer(gcagent_client* client, uint64_t key) {
  if (client == nullptr) return 0;
  const uint64_t address = client->impl->deviceBuffer(key);
  if (address == 0)
    guarded(client->last_error,
            [&] { return failure(GCAGENT_ERR_NOT_FOUND, strCat("key ", key, " is not declared on the device")); });
  return address;
}

GCAGENT_API int gcagent_submit_device(gcagent_client* client, uint64_t iteration, const uint64_t* keys, size_t count,
                                      void* cuda_stream) {
  if (client == nullptr) return GCAGENT_ERR_INVALID_ARGUMENT;
  return guarded(client->last_error, [&]() -> Outcome {
    GCAGENT_CLIENT_RETURN_IF_FAILED(checkKeys(keys, count));
    return client->impl->submitDevice(iteration, std::span(keys, count), cuda_stream);
  });
}

GCAGENT_API int gcagent_wait_device(gcagent_client* client, uint64_t iteration, const uint64_t* keys, size_t count,
                                    int timeout_ms, void* cuda_stream) {
  if (client == nullptr) return GCAGENT_ERR_INVALID_ARGUMENT;
  return guarded(client->last_error, [&]() -> Outcome {
    GCAGENT_CLIENT_RETURN_IF_FAILED(checkKeys(keys, count));
    return client->impl->waitDevice(iteration, std::span(keys, count), timeout_ms, cuda_stream);
  });
}

GCAGENT_API float* gcagent_buffer(gcagent_client* client, uint64_t key) {
  if (client == nullptr) return nullptr;
  float* data = client->impl->buffer(key);
  if (data == nullptr)
    guarded(client->last_error, [&] { return failure(GCAGENT_ERR_NOT_FOUND, strCat("key ", key, " is not declared")); });
  return data;
}

GCAGENT_API uint64_t gcagent_buffer_elements(const gcagent_client* client, uint64_t key) {
  return client == nullptr ? 0 : client->impl->elements(key);
}

GCAGENT_API int gcagent_submit(gcagent_client* client, uint64_t iteration, const uint64_t* keys, size_t count) {
  if (client == nullptr) return GCAGENT_ERR_INVALID_ARGUMENT;
  return guarded(client->last_error, [&]() -> Outcome {
    GCAGENT_CLIENT_RETURN_IF_FAILED(checkKeys(keys, count));
    return client->impl->submit(iteration, std::span(keys, count));
  });
}

GCAGENT_API int gcagent_wait(gcagent_client* client, uint64_t iteration, const uint64_t* keys, size_t count,
                             int timeout_ms) {
  if (client == nullptr) return GCAGENT_ERR_INVALID_ARGUMENT;
  return guarded(client->last_error, [&]() -> Outcome {
    GCAGENT_CLIENT_RETURN_IF_FAILED(checkKeys(keys, count));
    return client->impl->wait(iteration, std::span(keys, count), timeout_ms);
  });
}

GCAGENT_API int gcagent_poll(gcagent_client* client, uint64_t iteration, const uint64_t* keys, size_t count) {
  return gcagent_wait(client, iteration, keys, count, 0);
}

GCAGENT_API int gcagent_wait_any(gcagent_client* client, const gcagent_step* steps, size_t count, int timeout_ms,
                                 int wake_fd, size_t* index) {
  if (client == nullptr) return GCAGENT_ERR_INVALID_ARGUMENT;
  return guarded(client->last_error, [&]() -> Outcome {
    if (index == nullptr) return failure(GCAGENT_ERR_INVALID_ARGUMENT, "index is NULL");
    *index = count;
    if (steps == nullptr || count == 0) return failure(GCAGENT_ERR_INVALID_ARGUMENT, "no steps listed");
    std::vector<gcagent::client::Client::Step> list(count);
    for (size_t i = 0; i < count; ++i) list[i] = {steps[i].iteration, steps[i].key};
    return client->impl->waitAny(list, timeout_ms, wake_fd, index);
  });
}

GCAGENT_API int gcagent_buffer_fd(gcagent_client* client, uint64_t key, uint64_t* offset) {
  if (client == nullptr) return -1;
  int fd = -1;
  const int rc = guarded(client->last_error, [&]() -> Outcome {
    if (offset == nullptr) return failure(GCAGENT_ERR_INVALID_ARGUMENT, "offset is NULL");
    return client->impl->bufferFd(key, &fd, offset);
  });
  return rc == GCAGENT_OK ? fd : -1;
}

GCAGENT_API int gcagent_state_get(gcagent_client* client, uint64_t key, uint8_t** data, uint64_t* bytes) {
  if (client == nullptr) return GCAGENT_ERR_INVALID_ARGUMENT;
  return guarded(client->last_error, [&]() -> Outcome {
    if (data == nullptr || bytes == nullptr) return failure(GCAGENT_ERR_INVALID_ARGUMENT, "data or bytes is NULL");
    *data = nullptr;
    *bytes = 0;
    std::vector<std::byte> blob;
    GCAGENT_CLIENT_RETURN_IF_FAILED(client->impl->getState(key, &blob));
    auto* out = static_cast<uint8_t*>(std::malloc(std::max<size_t>(blob.size(), 1)));
    if (out == nullptr) return failure(GCAGENT_ERR_NO_MEMORY, strCat("no memory for a state of ", blob.size(), " bytes"));
    if (!blob.empty()) std::memcpy(out, blob.data(), blob.size());
    *data = out;
    *bytes = blob.size();
    return {};
  });
}

GCAGENT_API void gcagent_state_free(uint8_t* data) { std::free(data); }

GCAGENT_API int gcagent_job_iteration(gcagent_client* client, uint64_t iteration, uint64_t* job_iteration) {
  if (client == nullptr) return GCAGENT_ERR_INVALID_ARGUMENT;
  return guarded(client->last_error, [&]() -> Outcome {
    if (job_iteration == nullptr) return failure(GCAGENT_ERR_INVALID_ARGUMENT, "job_iteration is NULL");
    return client->impl->jobIteration(iteration, job_iteration);
  });
}

GCAGENT_API int gcagent_state_put(gcagent_client* client, uint64_t key, const uint8_t* data, uint64_t bytes,
                                  uint32_t* dropped) {
  if (client == nullptr) return GCAGENT_ERR_INVALID_ARGUMENT;
  return guarded(client->last_error, [&]() -> Outcome {
    if (data == nullptr && bytes != 0) return failure(GCAGENT_ERR_INVALID_ARGUMENT, "data is NULL");
    uint32_t left_out = 0;
    GCAGENT_CLIENT_RETURN_IF_FAILED(
        client->impl->putState(key, {reinterpret_cast<const std::byte*>(data), static_cast<size_t>(bytes)}, &left_out));
    if (dropped != nullptr) *dropped = left_out;
    return {};
  });
}

GCAGENT_API int gcagent_set_reply_timeout(gcagent_client* client, int timeout_ms) {
  if (client == nullptr) return GCAGENT_ERR_INVALID_ARGUMENT;
  client->impl->setReplyTimeout(timeout_ms);
  return GCAGENT_OK;
}

GCAGENT_API const char* gcagent_last_error(const gcagent_client* client) {
  return client == nullptr ? t_connect_error.c_str() : client->last_error.c_str();
}

GCAGENT_API uint32_t gcagent_trainer_id(const gcagent_client* client) {
  return client == nullptr ? 0 : client->impl->welcome().trainer_id;
}

GCAGENT_API uint32_t gcagent_node_rank(const gcagent_client* client) {
  return client == nullptr ? 0 : client->impl->welcome().node_rank;
}

GCAGENT_API uint32_t gcagent_node_count(const gcagent_client* client) {
  return client == nullptr ? 0 : client->impl->welcome().node_count;
}

GCAGENT_API uint32_t gcagent_reduction_timeout_ms(const gcagent_client* client) {
  return client == nullptr ? 0 : client->impl->welcome().reduction_timeout_ms;
}

GCAGENT_API uint32_t gcagent_result_nodes(const gcagent_client* client, uint32_t* ranks, uint32_t capacity) {
  if (client == nullptr) return 0;
  const std::vector<uint32_t> nodes = client->impl->resultNodes();
  for (uint32_t i = 0; ranks != nullptr && i < capacity && i < nodes.size(); ++i) ranks[i] = nodes[i];
  return static_cast<uint32_t>(nodes.size());
}

GCAGENT_API int64_t gcagent_resync_root(const gcagent_client* client) {
  if (client == nullptr) return -1;
  const auto root = client->impl->resyncRoot();
  return root ? static_cast<int64_t>(*root) : -1;
}

GCAGENT_API void gcagent_close(gcagent_client* client) { delete client; }

}  // extern "C"
