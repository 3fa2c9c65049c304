#include "transport/ucx/ucx_transport.h"

#include <ucp/api/ucp.h>

#include "common/str_cat.h"
#include "transport/ucx/ucx_backend.h"

namespace gcagent::transport {

Result<std::unique_ptr<Transport>> makeUcxTransport(const UcxOptions& options) {
  if (options.rank >= options.size)  // before UCX starts a worker for nothing
    return Status::invalidArgument(strCat("ucx: rank ", options.rank, " is not below the size ", options.size));
  const UcxBackendOptions ucx{options.rank, options.net_devices, options.data_ports, options.eager_bytes};
  GC_ASSIGN_OR_RETURN(auto backend, makeUcxBackend(ucx));
  return superviseLinks(options, std::move(backend), "ucx");
}

std::string ucxVersion() { return ucp_get_version_string(); }

}  // namespace gcagent::transport
