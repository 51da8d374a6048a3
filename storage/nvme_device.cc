#include "storage/nvme_device.h"

namespace nvkv::storage {

bool IsNvmeGenericDevice(const std::string&) { return false; }

absl::StatusOr<std::unique_ptr<Device>> OpenNvmeDevice(const std::string& path,
                                                       const DeviceOptions&) {
  return absl::UnimplementedError(path + ": NVMe passthrough not built yet");
}

}  // namespace nvkv::storage
