// The public Options (nvkv/options.h) as the engine applies them: which it accepts, the device
// they ask for, and the durable-write method they choose.
#ifndef NVKV_KV_ENGINE_OPTIONS_H_
#define NVKV_KV_ENGINE_OPTIONS_H_

#include "absl/status/status.h"
#include "kv/engine.h"
#include "storage/device.h"

namespace nvkv::kv {

// kInvalidArgument naming the first option out of its range (enums cast from bad integers too).
absl::Status ValidateOptions(const Options& options);

// The device as the options ask for it, for the first queue, which only holds the device (and
// its lock): every role opens its own queue.
storage::DeviceOptions DeviceOptionsOf(const Options& options);

// Options::durable_writes as this engine applies it (never kAuto).
DurableWrites ChooseDurableWrites(DurableWrites asked);

}  // namespace nvkv::kv

#endif  // NVKV_KV_ENGINE_OPTIONS_H_
