// StoreOpener: the first step of an Open, before the engine has any part: what the start of the
// device holds (two superblock copies, a damaged or stale one repaired from the other), a device
// holding no store formatted when the options allow it, a store grown when asked
// (kv/FORMAT.md "Growing a store"), and the store's shape taken from the superblock. On a zoned
// namespace the copies are the metadata zones' first pages, and a format empties every zone
// (kv/FORMAT.md "Zoned namespaces"). The engine starts over what it finds
// (Engine::Impl::StartEngine).
#ifndef NVKV_KV_STORE_OPEN_H_
#define NVKV_KV_STORE_OPEN_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kv/engine.h"
#include "kv/metadata_zones.h"
#include "kv/page_format.h"
#include "kv/store_shape.h"
#include "storage/device.h"

namespace nvkv::kv {

// The options of the queue that Open reads through (chunk buffers for large reads), which
// Close's checkpoint writes through too: `chunk_count` chunks (recovery reads a segment whole,
// so Open asks for at least a segment's: StoreOpener).
inline constexpr uint32_t kLargeIoChunks = 8;
storage::QueueOptions LargeIoQueueOptions(uint32_t chunk_count = kLargeIoChunks);

// What StoreOpener::Open found.
struct OpenedStore {
  StoreShape shape;
  // The device held no store and was formatted: nothing to recover.
  bool formatted_now = false;
  // The device's facts as they are now (a grow may have extended a store file).
  storage::DeviceInfo device_info;
  // The queue Open read and wrote through, for recovery's reads next.
  std::unique_ptr<storage::Device> queue;
  // The store's superblock (copy 0 of it): on zones, what a metadata zone starts with.
  Superblock superblock{};
};

class StoreOpener {
 public:
  // Opens a queue of LargeIoQueueOptions(chunk_count) on the device (counted as Open's in
  // Stats).
  using QueueOpener =
      std::function<absl::StatusOr<std::unique_ptr<storage::Device>>(uint32_t chunk_count)>;

  // `device` is the device as opened (it grows a store file); `open_queue` opens the queue the
  // opener reads and writes through (again after a grow: older queues keep the old size).
  // `path` names the store in errors. All must outlive the opener.
  StoreOpener(const Options& options, bool read_only, const std::string& path,
              storage::Device& device, QueueOpener open_queue);

  // The superblocks read (repaired unless read-only), or the device formatted, then grown when
  // the options ask. Refusals name the path: a store of a format this nvkv does not read, both
  // copies damaged, data that is no store (without force_format), no store where none may be
  // made, a device too small, a page size the device's blocks do not divide.
  absl::StatusOr<OpenedStore> Open();

 private:
  // What the start of the device holds: each superblock copy decoded (kNotFound when absent),
  // the refusal of a format this nvkv does not read, and whether it was never written.
  struct SuperblockProbe {
    absl::StatusOr<Superblock> copies[2] = {absl::NotFoundError(""), absl::NotFoundError("")};
    absl::Status unreadable_format;
    bool empty = false;
  };
  absl::StatusOr<SuperblockProbe> ProbeSuperblocks();
  // What a zoned namespace holds: the store its metadata zones' superblock copies name (either
  // one: nothing is repaired in place on zones), or a store formatted when the options allow it
  // (*formatted_now).
  absl::StatusOr<Superblock> ReadOrFormatZoned(bool* formatted_now);
  // Formats a zoned namespace whose metadata zones hold no store (kv/FORMAT.md "Zoned
  // namespaces"): the store takes every zone, each empty; segments are zones.
  absl::StatusOr<Superblock> FormatZonedStore(const ZoneSuperblocks& found);
  // Whether the options allow a format of a device that holds no store: refused over damaged
  // superblocks (`damage` says how) or data (not `empty`) without force_format, on a read-only
  // open, or without create_if_missing.
  absl::Status MayFormat(bool damaged, bool empty, const absl::Status& damage);
  // Whether `segment_count` segments leave room for the shards asked for.
  absl::Status CheckRoomForShards(uint64_t segment_count, uint64_t segment_bytes);
  // A new store's id, format time and index mode.
  absl::Status FillStoreIdentity(Superblock* superblock);
  // The store of `superblock` as Open hands it on: its shape (AdoptGeometry), the queue.
  absl::StatusOr<OpenedStore> Opened(const Superblock& superblock, OpenedStore opened);
  // Writes copy `which` of `good` (a repair from the good copy, or a grow's), with FUA.
  absl::Status RepairSuperblock(const Superblock& good, uint32_t which);
  // Formats a device holding no store, if the options and what it holds allow.
  absl::StatusOr<Superblock> FormatStore(const SuperblockProbe& probe);
  // Takes the store's geometry into shape_, when it fits this device.
  absl::Status AdoptGeometry(const Superblock& superblock);
  // Options::grow_store: extends a store file to capacity_bytes, then gives the store (adopted
  // as `*superblock`) every segment the device holds beyond its own: the segment map moves to
  // its new place after them, then both superblocks say so. Updates *superblock and the
  // geometry when it grew.
  absl::Status GrowStore(Superblock* superblock);

  const Options& options_;
  const bool read_only_;
  const std::string& path_;
  storage::Device& device_;
  const QueueOpener open_queue_;
  storage::DeviceInfo device_info_;          // updated by a grow
  std::unique_ptr<storage::Device> queue_;  // handed on in OpenedStore
  StoreShape shape_;
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_STORE_OPEN_H_
