// Recovery over a damaged store image: Engine::OpenOnDevice on a MemDevice whose bytes are a
// small valid store with the fuzz input applied as byte mutations.
//
// The store (written once per process by StoreImage: 8 segments of 16 pages of 4 KiB, one shard)
// holds small values, overwrites, deletes, an atomic batch and two large values; every value
// ever written to each key is known. Input: byte 0 is a set of flags (kForge, kOrdered, kWrite,
// kCheck), then 4-byte mutations: a 24-bit little-endian byte offset (modulo the image size)
// and a byte XORed in there.
//
// Properties. Open returns OK or an error with a message; never a crash. Without kForge the
// checksums of the mutated pages stay wrong, so the store cannot tell damage from data it must
// not return: every value Get and ForEachLive hand out is one that was written to that key, no
// key that was never written appears, ForEachLive visits a key at most once, and when the walk
// succeeds it agrees with Get on every key. With kForge the checksums of the mutated pages (and
// superblocks) are recomputed, so recovery meets pages that verify but hold anything (as a
// writer bug would leave): then only "no crash, errors with messages, values within the limits"
// is asked. The image ends with a clean Close, so it holds a checkpoint, which the mutations
// reach as they reach the log. kWrite: a durable write after Open must read back, and after a clean Close and a
// second Open still be there. kCheck: Check() must run (damage shows as problems in its report,
// not as an error).
#include <xxhash.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "kv/engine.h"
#include "kv/page_format.h"
#include "storage/mem_device.h"

namespace nvkv::kv {
namespace {

constexpr uint32_t kLbaBytes = 4096;
constexpr uint32_t kPageBytes = 4096;
constexpr uint32_t kPagesPerSegment = 16;
constexpr uint64_t kSegments = 8;  // the fewest one shard needs
constexpr uint64_t kLbaCount =
    kSuperblockPages + kSegments * kPagesPerSegment + MapPagesFor(kSegments, kPageBytes);
constexpr size_t kImageBytes = size_t{kLbaBytes} * kLbaCount;

constexpr uint8_t kForge = 1 << 0;
constexpr uint8_t kOrdered = 1 << 1;
constexpr uint8_t kWrite = 1 << 2;
constexpr uint8_t kCheck = 1 << 3;

storage::MemDeviceOptions DeviceOptions() {
  storage::MemDeviceOptions mem;
  mem.lba_bytes = kLbaBytes;
  mem.lba_count = kLbaCount;
  mem.volatile_write_cache = false;
  mem.queue_depth = 16;
  return mem;
}

Options StoreOptions(bool ordered, bool create) {
  Options options;
  options.create_if_missing = create;
  options.page_bytes = kPageBytes;
  options.segment_bytes = kPageBytes * kPagesPerSegment;
  options.shard_count = 1;
  options.index_mode = ordered ? IndexMode::kOrdered : IndexMode::kHash;
  options.background_compaction = false;
  options.page_buffers_per_shard = 8;
  options.read_queue_depth = 8;
  options.max_write_delay_us = 100;
  return options;
}

struct Store {
  std::vector<uint8_t> image;
  std::map<std::string, std::set<std::string>> written;  // every value each key was given
};

std::string ValueOf(const std::string& tag, size_t bytes) {
  std::string value;
  while (value.size() < bytes) value += tag + ":" + std::to_string(value.size()) + ";";
  value.resize(bytes);
  return value;
}

// A small store, formatted and written through the engine, then its bytes.
const Store& StoreImage() {
  static const Store* store = [] {
    auto* s = new Store;
    auto device = storage::MemDevice::Create(DeviceOptions());
    FUZZ_REQUIRE(device.ok(), "%s", device.status().ToString().c_str());
    std::shared_ptr<storage::MemStorage> bytes = (*device)->storage();
    auto engine = Engine::OpenOnDevice(std::move(*device), StoreOptions(false, true));
    FUZZ_REQUIRE(engine.ok(), "%s", engine.status().ToString().c_str());
    auto put = [&](const std::string& key, const std::string& value) {
      const WriteOp op{false, key, value};
      absl::Status status = (*engine)->Write({&op, 1}, /*durable=*/false);
      FUZZ_REQUIRE(status.ok(), "%s", status.ToString().c_str());
      s->written[key].insert(value);
    };
    for (int i = 0; i < 40; ++i) {
      put("key" + std::to_string(i), ValueOf("a" + std::to_string(i), 1 + (i * 37) % 300));
    }
    for (int i = 0; i < 40; i += 3) put("key" + std::to_string(i), ValueOf("b", i * 11));
    put("large1", ValueOf("L1", 9000));
    put("large2", ValueOf("L2", 12000));
    // An atomic batch: three puts and a delete.
    const std::string b1 = ValueOf("batch1", 100), b2 = ValueOf("batch2", 700),
                      b3 = ValueOf("batch3", 50);
    const WriteOp batch[] = {{false, "batch1", b1}, {false, "batch2", b2}, {true, "key5", ""},
                             {false, "batch3", b3}};
    absl::Status status = (*engine)->Write(batch, /*durable=*/true);
    FUZZ_REQUIRE(status.ok(), "%s", status.ToString().c_str());
    s->written["batch1"].insert(b1);
    s->written["batch2"].insert(b2);
    s->written["batch3"].insert(b3);
    for (int i = 1; i < 40; i += 7) {
      const std::string key = "key" + std::to_string(i);
      const WriteOp del{true, key, ""};
      status = (*engine)->Write({&del, 1}, /*durable=*/false);
      FUZZ_REQUIRE(status.ok(), "%s", status.ToString().c_str());
    }
    put("large1", ValueOf("L1b", 5000));
    put("key2", ValueOf("c", 3000));
    status = (*engine)->Close();
    FUZZ_REQUIRE(status.ok(), "%s", status.ToString().c_str());
    engine->reset();
    // The clean Close left a checkpoint (kv/checkpoint.h), which the mutations reach as well:
    // an Open reads it alone.
    auto reopen = storage::MemDevice::Open(bytes, DeviceOptions());
    FUZZ_REQUIRE(reopen.ok(), "%s", reopen.status().ToString().c_str());
    auto reopened = Engine::OpenOnDevice(std::move(*reopen), StoreOptions(false, false));
    FUZZ_REQUIRE(reopened.ok(), "%s", reopened.status().ToString().c_str());
    FUZZ_REQUIRE((*reopened)->Stats().recovery_start == RecoveryStart::kCleanClose,
                 "no checkpoint");
    status = (*reopened)->Close();
    FUZZ_REQUIRE(status.ok(), "%s", status.ToString().c_str());
    s->image = bytes->CopyOut(0, kLbaCount);
    return s;
  }();
  return *store;
}

void RequireMessage(const absl::Status& status, const char* what) {
  FUZZ_REQUIRE(!status.ok());
  FUZZ_REQUIRE(!status.message().empty(), "%s failed without a message: %s", what,
               status.ToString().c_str());
}

// Recomputes the checksums of the pages in `touched` (superblock pages: the superblock's).
void Forge(std::vector<uint8_t>& image, const std::set<uint64_t>& touched) {
  uint64_t seed = 0;
  bool have_seed = false;
  for (uint64_t sb = 0; sb < kSuperblockPages && !have_seed; ++sb) {
    absl::StatusOr<Superblock> decoded = DecodeSuperblock(image.data() + sb * kPageBytes,
                                                          kPageBytes);
    if (decoded.ok()) {
      seed = StoreSeed(decoded->store_id);
      have_seed = true;
    }
  }
  if (!have_seed) {
    Superblock raw;
    std::memcpy(&raw, image.data(), sizeof(raw));
    seed = StoreSeed(raw.store_id);
  }
  for (uint64_t page : touched) {
    uint8_t* bytes = image.data() + page * kPageBytes;
    uint64_t checksum;
    if (page < kSuperblockPages) {
      checksum = XXH3_64bits_withSeed(bytes + 8, kSuperblockChecksumEnd - 8, 0);
    } else {
      checksum = XXH3_64bits_withSeed(bytes + 8, kPageBytes - 8, PageSeed(seed, page));
    }
    std::memcpy(bytes, &checksum, 8);
  }
}

absl::StatusOr<std::unique_ptr<Engine>> OpenOn(const std::shared_ptr<storage::MemStorage>& bytes,
                                               bool ordered) {
  auto device = storage::MemDevice::Open(bytes, DeviceOptions());
  FUZZ_REQUIRE(device.ok(), "%s", device.status().ToString().c_str());
  return Engine::OpenOnDevice(std::move(*device), StoreOptions(ordered, false));
}

void Run(const uint8_t* data, size_t size) {
  const Store& store = StoreImage();
  if (size < 1) return;
  const uint8_t flags = data[0];
  const bool forged = (flags & kForge) != 0;
  const bool ordered = (flags & kOrdered) != 0;
  std::vector<uint8_t> image = store.image;
  std::set<uint64_t> touched;
  for (size_t i = 1; i + 4 <= size; i += 4) {
    const uint32_t offset = (data[i] | (uint32_t{data[i + 1]} << 8) |
                             (uint32_t{data[i + 2]} << 16)) % kImageBytes;
    image[offset] ^= data[i + 3];
    touched.insert(offset / kPageBytes);
  }
  if (forged) Forge(image, touched);

  auto bytes = storage::MemStorage::Create(kLbaBytes, kLbaCount);
  FUZZ_REQUIRE(bytes.ok());
  (*bytes)->Write(0, kLbaCount, image.data());
  absl::StatusOr<std::unique_ptr<Engine>> engine = OpenOn(*bytes, ordered);
  if (!engine.ok()) {
    RequireMessage(engine.status(), "Open");
    return;
  }
  Engine& db = **engine;
  const uint32_t max_value = db.max_value_bytes();

  // Every Get: a value written to that key, or an error.
  std::map<std::string, std::string> got;
  for (const auto& [key, values] : store.written) {
    absl::StatusOr<std::string> value = db.Get(key);
    if (!value.ok()) {
      RequireMessage(value.status(), "Get");
      continue;
    }
    FUZZ_REQUIRE(value->size() <= max_value);
    if (!forged) {
      FUZZ_REQUIRE(values.count(*value) == 1, "Get(%s) returned %zu bytes never written to it",
                   key.c_str(), value->size());
    }
    got[key] = *value;
  }
  for (const char* stranger : {"key", "key40", "never written"}) {
    absl::StatusOr<std::string> value = db.Get(stranger);
    if (!forged) {
      FUZZ_REQUIRE(!value.ok(), "Get(%s) found a key never written", stranger);
    }
    if (!value.ok()) RequireMessage(value.status(), "Get");
  }

  // ForEachLive: written keys with written values, each once; when it succeeds it agrees with
  // Get (nothing changed the store in between).
  std::map<std::string, std::string> visited;
  absl::Status walked = db.ForEachLive([&](std::string_view key, std::string_view value) {
    FUZZ_REQUIRE(key.size() <= kMaxKeyBytes && value.size() <= max_value);
    const std::string k(key);
    if (!forged) {
      auto it = store.written.find(k);
      FUZZ_REQUIRE(it != store.written.end(), "ForEachLive visited a key never written");
      FUZZ_REQUIRE(it->second.count(std::string(value)) == 1,
                   "ForEachLive gave %s a value never written to it", k.c_str());
      FUZZ_REQUIRE(visited.count(k) == 0, "ForEachLive visited %s twice", k.c_str());
    }
    visited[k] = std::string(value);
    return absl::OkStatus();
  });
  if (!walked.ok()) {
    RequireMessage(walked, "ForEachLive");
  } else if (!forged) {
    for (const auto& [key, value] : visited) {
      auto it = got.find(key);
      FUZZ_REQUIRE(it != got.end() && it->second == value,
                   "ForEachLive visited %s, Get does not return that value", key.c_str());
    }
    for (const auto& [key, value] : got) {
      FUZZ_REQUIRE(visited.count(key) == 1, "Get finds %s, ForEachLive does not visit it",
                   key.c_str());
    }
  }

  if ((flags & kCheck) != 0) {
    absl::StatusOr<CheckReport> report = db.Check();
    if (!report.ok()) RequireMessage(report.status(), "Check");
    if (!forged) FUZZ_REQUIRE(report.ok(), "%s", report.status().ToString().c_str());
  }

  if ((flags & kWrite) == 0) {
    absl::Status closed = db.Close();
    if (!closed.ok()) RequireMessage(closed, "Close");
    return;
  }
  // A durable write after recovery reads back, and survives a clean close and reopen.
  const std::string key = "after recovery", value = ValueOf("new", 321);
  const WriteOp op{false, key, value};
  absl::Status status = db.Write({&op, 1}, /*durable=*/true);
  if (!status.ok()) {
    RequireMessage(status, "Write");
    return;
  }
  absl::StatusOr<std::string> read = db.Get(key);
  FUZZ_REQUIRE(read.ok() && *read == value, "a write after recovery does not read back: %s",
               read.status().ToString().c_str());
  status = db.Close();
  if (!status.ok()) {
    RequireMessage(status, "Close");
    return;
  }
  engine->reset();
  absl::StatusOr<std::unique_ptr<Engine>> again = OpenOn(*bytes, ordered);
  if (!again.ok()) {
    RequireMessage(again.status(), "Open");
    FUZZ_REQUIRE(forged, "the store opened, was written and closed cleanly, then: %s",
                 again.status().ToString().c_str());
    return;
  }
  read = (*again)->Get(key);
  if (!forged) {
    FUZZ_REQUIRE(read.ok() && *read == value, "a durable write after recovery is lost: %s",
                 read.status().ToString().c_str());
  }
}

}  // namespace
}  // namespace nvkv::kv

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 1 + 4 * 64) return 0;  // up to 64 mutations
  nvkv::kv::Run(data, size);
  return 0;
}
