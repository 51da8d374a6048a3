// Where an engine test keeps its store: conventional blocks (a file, the embedded default, or a
// memory device), or a zoned namespace. The behaviour tests run on both, so that what holds on
// one is seen to hold on the other.
#ifndef NVKV_TESTS_KV_TEST_STORE_H_
#define NVKV_TESTS_KV_TEST_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "kv/engine.h"
#include "storage/mem_device.h"

namespace nvkv::kv {

enum class Layout { kConventional, kZoned };

inline const char* LayoutName(Layout layout) {
  return layout == Layout::kConventional ? "Conventional" : "Zoned";
}

// The zoned namespace of the tests: 4 KiB blocks, zones of 128 blocks of which 96 are writable
// (zone capacity below zone size, as on real drives), as many as hold `capacity_bytes` beside the
// two metadata zones, appends of 8 blocks at most, and each batch of requests carried out and
// completed in an order drawn from `completion_seed`.
inline storage::MemDeviceOptions TestZonedNamespace(uint64_t capacity_bytes,
                                                    uint64_t completion_seed) {
  constexpr uint64_t kZoneBlocks = 128, kCapacityBlocks = 96;
  storage::MemDeviceOptions options;
  options.lba_bytes = 4096;
  const uint64_t zone_bytes = kCapacityBlocks * options.lba_bytes;
  const uint64_t zones = 2 + (capacity_bytes + zone_bytes - 1) / zone_bytes;
  options.lba_count = zones * kZoneBlocks;
  options.zones = {.zone_count = zones,
                   .zone_blocks = kZoneBlocks,
                   .capacity_blocks = kCapacityBlocks,
                   .max_append_blocks = 8};
  options.completion_seed = completion_seed;
  return options;
}

// One store, opened as often as a test likes: the file at `path` (kConventional), or a zoned
// namespace made at the first Open, to hold that Open's capacity_bytes, and kept across the later
// ones (a new seed for the completion order each time).
class TestStore {
 public:
  TestStore(Layout layout, std::string path) : layout_(layout), path_(std::move(path)) {}

  absl::StatusOr<std::unique_ptr<Engine>> Open(Options options) {
    if (layout_ == Layout::kConventional) return Engine::Open(path_, options);
    options.segment_bytes = 0;  // a segment is a zone's writable part
    absl::StatusOr<std::unique_ptr<storage::MemDevice>> device;
    if (zones_ == nullptr) {
      namespace_ = TestZonedNamespace(options.capacity_bytes, ++opens_);
      device = storage::MemDevice::Create(namespace_);
    } else {
      namespace_.completion_seed = ++opens_;
      device = storage::MemDevice::Open(zones_, namespace_);
    }
    if (!device.ok()) return device.status();
    zones_ = (*device)->storage();
    return Engine::OpenOnDevice(std::move(*device), options);
  }

 private:
  const Layout layout_;
  const std::string path_;
  storage::MemDeviceOptions namespace_;         // the zoned namespace's, once made
  std::shared_ptr<storage::MemStorage> zones_;  // its storage
  uint64_t opens_ = 0;
};

}  // namespace nvkv::kv

#endif  // NVKV_TESTS_KV_TEST_STORE_H_
