// NvmeDevice: NVMe I/O through io_uring passthrough (IORING_OP_URING_CMD) on a generic char
// device /dev/ngXnY. (Placeholder until the passthrough backend lands.)
#ifndef NVKV_STORAGE_NVME_DEVICE_H_
#define NVKV_STORAGE_NVME_DEVICE_H_

#include <memory>
#include <string>

#include "storage/device.h"

namespace nvkv::storage {

// True when `path` is an NVMe generic character device (the kernel's nvme-generic class).
bool IsNvmeGenericDevice(const std::string& path);

absl::StatusOr<std::unique_ptr<Device>> OpenNvmeDevice(const std::string& path,
                                                       const DeviceOptions& options);

}  // namespace nvkv::storage

#endif  // NVKV_STORAGE_NVME_DEVICE_H_
