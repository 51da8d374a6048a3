// Engine open, format, close and stats, and the public Engine methods.
#include "kv/engine.h"

#include <sys/random.h>
#include <xxhash.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <ctime>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "kv/engine_impl.h"
#include "kv/read_queue.h"
#include "kv/segment_read.h"
#include "storage/base/align.h"
#include "storage/base/check.h"

namespace nvkv::kv {

KeyHash HashKey(std::string_view key) {
  const XXH128_hash_t h = XXH3_128bits(key.data(), key.size());
  return KeyHash{h.low64, h.high64};
}

namespace {

absl::Status ValidateOptions(const EngineOptions& o) {
  if (!IsPowerOfTwo(o.page_bytes) || o.page_bytes < kMinPageBytes || o.page_bytes > kMaxPageBytes) {
    return absl::InvalidArgumentError(absl::StrCat("page_bytes ", o.page_bytes,
                                                   " must be a power of two from 4096 to 65536"));
  }
  if (o.segment_bytes != EngineOptions::kAutoSegmentBytes &&
      (o.segment_bytes % o.page_bytes != 0 || o.segment_bytes / o.page_bytes < 16 ||
       o.segment_bytes > kMaxSegmentBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "segment_bytes ", o.segment_bytes,
        " must be 0 (sized to the store) or a multiple of page_bytes, at least 16 pages and at "
        "most 8 MiB"));
  }
  if (o.shard_count == 0 || o.shard_count > 64) {
    return absl::InvalidArgumentError("shard_count must be between 1 and 64");
  }
  if (o.page_buffers_per_shard < 8 || o.page_buffers_per_shard > 1024) {
    return absl::InvalidArgumentError("page_buffers_per_shard must be between 8 and 1024");
  }
  if (o.read_queue_depth == 0 || o.read_queue_depth > 1024) {
    return absl::InvalidArgumentError("read_queue_depth must be between 1 and 1024");
  }
  return absl::OkStatus();
}

// True when DecodeSuperblock refused `page` because it is an nvkv superblock of a newer format:
// its other kFailedPrecondition is a wrong magic, and a bad checksum is kDataLoss.
bool IsNewerFormat(const absl::StatusOr<Superblock>& decoded, const uint8_t* page) {
  if (!absl::IsFailedPrecondition(decoded.status())) return false;
  uint64_t magic = 0;
  std::memcpy(&magic, page + offsetof(Superblock, magic), sizeof(magic));
  return magic == kSuperblockMagic;
}

// The segment size a format picks for segment_bytes 0: 1 MiB, halved while the store would hold
// fewer than kAutoMinSegments, down to 16 pages. The segments kept free for compaction (one per
// shard and two, SegmentTable::UserReserveFor) are then a small part of a small store too.
constexpr uint64_t kAutoMinSegments = 64;
constexpr uint32_t kAutoMaxSegmentBytes = 1u << 20;
uint32_t AutoSegmentBytes(uint64_t capacity_bytes, uint32_t page_bytes) {
  uint32_t segment_bytes = kAutoMaxSegmentBytes;
  while (segment_bytes / 2 >= 16 * page_bytes &&
         capacity_bytes / segment_bytes < kAutoMinSegments) {
    segment_bytes /= 2;
  }
  return std::max(segment_bytes, 16 * page_bytes);
}

bool AllZero(const uint8_t* data, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) {
    if (data[i] != 0) return false;
  }
  return true;
}

}  // namespace

Engine::Impl::Impl(const EngineOptions& options, std::unique_ptr<storage::Device> device)
    : options_(options),
      ordered_(options.index_mode == IndexMode::kOrdered),
      base_device_(std::move(device)),
      device_info_(base_device_->info()),
      read_queues_(std::make_shared<ReadQueueSet>()) {}

Engine::Impl::~Impl() {
  (void)Close();
}

absl::Status Engine::Impl::CheckOpen() const {
  if (closed_.load()) return absl::FailedPreconditionError("the store is closed");
  return absl::OkStatus();
}

// Reads the superblocks; formats when there is no store and that is allowed.
absl::StatusOr<std::unique_ptr<storage::Device>> Engine::Impl::OpenQueue(
    const storage::QueueOptions& options) {
  absl::StatusOr<std::unique_ptr<storage::Device>> queue = base_device_->OpenQueue(options);
  if (!queue.ok()) return queue;
  absl::MutexLock lock(&queue_notes_mu_);
  for (const std::string& note : (*queue)->info().notes) {
    if (std::find(queue_notes_.begin(), queue_notes_.end(), note) == queue_notes_.end() &&
        std::find(device_info_.notes.begin(), device_info_.notes.end(), note) ==
            device_info_.notes.end()) {
      queue_notes_.push_back(note);
    }
  }
  return queue;
}

// Opens the store: reads the superblocks (formatting an empty device when allowed), adopts the
// geometry, recovers, and starts the writer and compaction threads.
absl::Status Engine::Impl::OpenStore(const std::string& path) {
  storage::QueueOptions open_options;
  open_options.queue_depth = 64;
  open_options.buffers.buffer_bytes = kMaxPageBytes;
  open_options.buffers.buffer_count = 2;
  open_options.buffers.chunk_count = 32;  // recovery keeps up to 16 MiB of reads in flight
  absl::StatusOr<std::unique_ptr<storage::Device>> opening = OpenQueue(open_options);
  if (!opening.ok()) return opening.status();
  device_ = std::move(*opening);
  if (options_.page_bytes % device_info_.lba_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat("page_bytes ", options_.page_bytes,
                                                   " is not a multiple of the device's ",
                                                   device_info_.lba_bytes, "-byte blocks"));
  }
  absl::StatusOr<SuperblockProbe> probe = ProbeSuperblocks();
  if (!probe.ok()) return probe.status();
  if (!probe->newer_format.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": ", probe->newer_format.message()));
  }
  Superblock superblock{};
  const bool formatted_now = !probe->copies[0].ok() && !probe->copies[1].ok();
  if (!formatted_now) {
    if (options_.error_if_exists) {
      return absl::AlreadyExistsError(absl::StrCat(path, ": a store already exists"));
    }
    const uint32_t good = probe->copies[0].ok() ? 0 : 1;
    superblock = *probe->copies[good];
    if (!probe->copies[1 - good].ok()) {
      absl::Status repaired = RepairSuperblock(superblock, 1 - good);
      if (!repaired.ok()) return repaired;
    }
  } else {
    absl::StatusOr<Superblock> formatted = FormatStore(path, *probe);
    if (!formatted.ok()) return formatted.status();
    superblock = *formatted;
  }
  absl::Status adopted = AdoptGeometry(path, superblock);
  if (!adopted.ok()) return adopted;
  return StartEngine(formatted_now);
}

absl::StatusOr<Engine::Impl::SuperblockProbe> Engine::Impl::ProbeSuperblocks() {
  storage::Device& device = *device_;
  const uint32_t lba_bytes = device_info_.lba_bytes;
  storage::Buffer chunk = device.buffers().GetChunk();
  NVKV_CHECK(chunk.valid());
  // Superblocks are written in the page size they were formatted with; read the first 128 KiB,
  // which holds both copies for any page size up to 64 KiB.
  const uint64_t probe_bytes = std::min<uint64_t>(128 * 1024, device_info_.capacity_bytes());
  absl::Status read = storage::ReadBlocks(device, 0, probe_bytes / lba_bytes, chunk);
  if (!read.ok()) {
    // Which 4 KiB can the device not read (segment_read.h)? Those hold 0xff: a superblock copy
    // there is damaged (the other one serves), and the start never looks empty (formattable).
    const uint32_t unit_blocks = std::max<uint32_t>(1, kMinPageBytes / lba_bytes);
    const uint32_t unit_bytes = unit_blocks * lba_bytes;
    const uint32_t units = static_cast<uint32_t>(probe_bytes / unit_bytes);
    std::vector<bool> unreadable(units, false);
    const uint32_t failed = RereadPageByPage(device, 0, units, unit_blocks, unit_bytes, chunk, 0,
                                             &unreadable);
    if (failed == units) {
      device.buffers().PutChunk(chunk);
      return read;
    }
    for (uint32_t u = 0; u < units; ++u) {
      if (unreadable[u]) std::memset(chunk.data + size_t{u} * unit_bytes, 0xff, unit_bytes);
    }
  }
  SuperblockProbe probe;
  // A store of a newer format is refused as such, whatever the options: never formatted over
  // (force_format is for data that is not an nvkv store), never called foreign.
  probe.copies[0] = DecodeSuperblock(chunk.data, kMaxPageBytes);
  if (IsNewerFormat(probe.copies[0], chunk.data)) probe.newer_format = probe.copies[0].status();
  if (probe.copies[0].ok() && probe.copies[0]->page_bytes * 2 <= probe_bytes) {
    probe.copies[1] = DecodeSuperblock(chunk.data + probe.copies[0]->page_bytes, kMaxPageBytes);
  } else {
    // Copy 0 is damaged: look for copy 1 at every possible page size.
    for (uint32_t page = kMinPageBytes; page <= kMaxPageBytes && page * 2 <= probe_bytes;
         page *= 2) {
      auto candidate = DecodeSuperblock(chunk.data + page, kMaxPageBytes);
      if (probe.newer_format.ok() && IsNewerFormat(candidate, chunk.data + page)) {
        probe.newer_format = candidate.status();
      }
      if (candidate.ok() && candidate->page_bytes == page) {
        probe.copies[1] = candidate;
        break;
      }
    }
  }
  probe.empty = AllZero(chunk.data, probe_bytes);
  device.buffers().PutChunk(chunk);
  return probe;
}

absl::Status Engine::Impl::RepairSuperblock(const Superblock& good, uint32_t which) {
  storage::Device& device = *device_;
  const uint32_t lba_bytes = device_info_.lba_bytes;
  storage::Buffer page = device.buffers().GetPage();
  if (!page.valid()) return absl::OkStatus();  // left for the next Open
  if (page.bytes < good.page_bytes) {
    device.buffers().PutPage(page);
    return absl::OkStatus();
  }
  Superblock copy = good;
  copy.copy = which;
  EncodeSuperblock(copy, page.data, good.page_bytes);
  absl::Status repaired =
      storage::WriteBlocks(device, uint64_t{which} * good.page_bytes / lba_bytes,
                           good.page_bytes / lba_bytes, page, /*fua=*/true);
  device.buffers().PutPage(page);
  return repaired;
}

absl::StatusOr<Superblock> Engine::Impl::FormatStore(const std::string& path,
                                                     const SuperblockProbe& probe) {
  const bool damaged = absl::IsDataLoss(probe.copies[0].status()) ||
                       absl::IsDataLoss(probe.copies[1].status());
  if (damaged && !options_.force_format) {
    absl::Status refused = absl::DataLossError(absl::StrCat(
        path, ": both nvkv superblocks are damaged (", probe.copies[0].status().message(),
        "); refusing to open or format it"));
    refused.SetPayload(kFormatRefusedPayload, absl::Cord());
    return refused;
  }
  if (!probe.empty && !options_.force_format) {
    absl::Status refused = absl::FailedPreconditionError(absl::StrCat(
        path, ": holds data that is not an nvkv store; refusing to format it without "
              "force_format"));
    refused.SetPayload(kFormatRefusedPayload, absl::Cord());
    return refused;
  }
  if (!options_.create_if_missing) {
    return absl::NotFoundError(absl::StrCat(path, ": no nvkv store (create_if_missing is off)"));
  }
  const uint32_t lba_bytes = device_info_.lba_bytes;
  const uint64_t pages = device_info_.capacity_bytes() / options_.page_bytes;
  const uint32_t segment_bytes =
      options_.segment_bytes != EngineOptions::kAutoSegmentBytes
          ? options_.segment_bytes
          : AutoSegmentBytes(device_info_.capacity_bytes(), options_.page_bytes);
  const uint32_t pages_per_segment = segment_bytes / options_.page_bytes;
  const uint64_t segment_count =
      pages > kSuperblockPages ? (pages - kSuperblockPages) / pages_per_segment : 0;
  // The reserve, an open segment per shard, and four segments of data.
  const uint64_t need =
      uint64_t{SegmentTable::UserReserveFor(options_.shard_count)} + options_.shard_count + 4;
  if (segment_count < need) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": too small: ", device_info_.capacity_bytes(), " bytes hold ", segment_count,
        " segments of ", segment_bytes, " bytes; need at least ", need,
        " (fewer shards or smaller segments need less)"));
  }
  Superblock superblock{};
  superblock.format_version = kFormatVersion;
  superblock.page_bytes = options_.page_bytes;
  superblock.pages_per_segment = pages_per_segment;
  superblock.lba_bytes = lba_bytes;
  superblock.segment_count = segment_count;
  superblock.format_time_unix_s = static_cast<uint64_t>(std::time(nullptr));
  if (getrandom(superblock.store_id, sizeof(superblock.store_id), 0) !=
      static_cast<ssize_t>(sizeof(superblock.store_id))) {
    return absl::InternalError("getrandom failed for the store id");
  }
  storage::Device& device = *device_;
  storage::Buffer page = device.buffers().GetChunk();
  NVKV_CHECK(page.valid() && page.bytes >= 2 * superblock.page_bytes);
  for (uint32_t copy = 0; copy < 2; ++copy) {
    superblock.copy = copy;
    EncodeSuperblock(superblock, page.data + size_t{copy} * superblock.page_bytes,
                     superblock.page_bytes);
  }
  // The first page of every segment must not look like data of this store: a fresh store id
  // makes leftovers from an earlier store fail their checksums, so nothing else is written.
  absl::Status written = storage::WriteBlocks(device, 0, 2 * superblock.page_bytes / lba_bytes,
                                              page, /*fua=*/true);
  device.buffers().PutChunk(page);
  if (!written.ok()) return written;
  return superblock;
}

absl::Status Engine::Impl::AdoptGeometry(const std::string& path, const Superblock& superblock) {
  const uint32_t lba_bytes = device_info_.lba_bytes;
  geometry_ = GeometryOf(superblock);
  if (geometry_.page_bytes % lba_bytes != 0 ||
      geometry_.total_pages() * geometry_.page_bytes > device_info_.capacity_bytes()) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": the store (", geometry_.total_pages() * geometry_.page_bytes, " bytes in ",
        geometry_.page_bytes, "-byte pages) does not fit this device (",
        device_info_.capacity_bytes(), " bytes, ", lba_bytes, "-byte blocks)"));
  }
  if (geometry_.total_pages() >= (uint64_t{1} << 31)) {
    return absl::UnimplementedError("stores of more than 2^31 pages are not supported yet");
  }
  blocks_per_page_ = geometry_.page_bytes / lba_bytes;
  store_seed_ = StoreSeed(superblock.store_id);
  return absl::OkStatus();
}

absl::Status Engine::Impl::StartEngine(bool formatted_now) {
  segments_ = std::make_unique<SegmentTable>(
      geometry_, SegmentTable::UserReserveFor(options_.shard_count));
  for (uint32_t i = 0; i < options_.shard_count; ++i) {
    auto shard = std::make_unique<Shard>();
    shard->id = i;
    absl::MutexLock lock(&shard->mu);
    shard->index = ordered_ ? NewOrderedIndex() : NewHashIndex();
    shards_.push_back(std::move(shard));
  }
  if (formatted_now) {
    segments_->FinishRecovery();  // every segment free
  } else {
    RecoveryOptions recovery_options;
    recovery_options.store_seed = store_seed_;
    recovery_options.blocks_per_page = blocks_per_page_;
    recovery_options.ordered = ordered_;
    absl::StatusOr<RecoveryReport> recovered =
        RecoverStore(recovery_options, geometry_, *device_, *segments_, shards_);
    if (!recovered.ok()) return recovered.status();
    recovery_ = std::move(*recovered);
    next_sequence_.store(recovery_.next_sequence);
    // After a process crash (not a power cut) recovery may have read pages that still sit in
    // the device's volatile cache. Compaction treats recovered segments as durable (it copies
    // their records as lone records), so make them so.
    if (device_info_.volatile_write_cache) {
      absl::Status flushed = storage::FlushDevice(*device_);
      if (!flushed.ok()) return flushed;
    }
  }

  storage::QueueOptions writer_options;
  const uint32_t slots = options_.shard_count * options_.page_buffers_per_shard;
  writer_options.queue_depth = slots + 2;  // every page in flight, plus a flush
  writer_options.buffers.buffer_bytes = geometry_.page_bytes;
  writer_options.buffers.buffer_count = slots;
  writer_options.buffers.chunk_count = 0;
  auto writer_queue = OpenQueue(writer_options);
  if (!writer_queue.ok()) return writer_queue.status();
  LogWriter::Options writer_config;
  writer_config.store_seed = store_seed_;
  writer_config.blocks_per_page = blocks_per_page_;
  writer_config.page_bytes = geometry_.page_bytes;
  writer_config.max_write_delay_us = options_.max_write_delay_us;
  writer_config.volatile_cache = device_info_.volatile_write_cache;
  writer_ = std::make_unique<LogWriter>(writer_config, shards_, *segments_, error_,
                                        write_counters_, std::move(*writer_queue));
  for (auto& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    for (uint32_t i = 0; i < options_.page_buffers_per_shard; ++i) {
      auto slot = std::make_unique<PageSlot>();
      slot->buffer = writer_->queue().buffers().GetPage();
      NVKV_CHECK(slot->buffer.valid());
      slot->shard = shard.get();
      slot->writer = writer_.get();
      shard->head.free_slots.push_back(slot.get());
      shard->slots.push_back(std::move(slot));
    }
  }
  storage::QueueOptions compaction_options;
  compaction_options.queue_depth = 8;
  compaction_options.buffers.buffer_bytes = geometry_.page_bytes;
  compaction_options.buffers.buffer_count = 4;
  compaction_options.buffers.chunk_count =
      static_cast<uint32_t>(geometry_.segment_bytes() / (storage::kMaxRegisteredBytes /
                                                         geometry_.page_bytes *
                                                         geometry_.page_bytes)) + 2;
  auto compaction_queue = OpenQueue(compaction_options);
  if (!compaction_queue.ok()) return compaction_queue.status();
  Compactor::Options compactor_config;
  compactor_config.background = options_.background_compaction;
  compactor_config.victim_policy = options_.victim_policy;
  compactor_config.store_seed = store_seed_;
  compactor_config.blocks_per_page = blocks_per_page_;
  compactor_ = std::make_unique<Compactor>(compactor_config, geometry_, shards_, *segments_,
                                           *writer_, error_, write_counters_, *this,
                                           next_sequence_, std::move(*compaction_queue));

  writer_->Start();
  compactor_->Start();
  return absl::OkStatus();
}

absl::Status Engine::Impl::Close() {
  if (closed_.exchange(true)) return absl::OkStatus();
  // Compaction stops first: until it has, it may copy records and wait for the copies to be
  // durable, so the writer must still be there.
  if (compactor_ != nullptr) compactor_->Stop();
  absl::Status status;
  if (writer_ != nullptr && writer_->started()) {
    if (!error_.failed()) status = writer_->WaitAllDurable();
    writer_->Stop();
  }
  if (status.ok() && error_.failed()) status = error_.status();
  // Threads that read keep nothing of this engine but the (closed) set.
  read_queues_->Close();
  compactor_.reset();
  writer_.reset();
  device_.reset();
  base_device_.reset();  // releases the device lock: the store may be opened again
  return status;
}

EngineStats Engine::Impl::Stats() {
  EngineStats s;
  for (auto& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    const IndexStats index = shard->index->stats();
    s.live_keys += index.entries;
    s.index_bytes += index.memory_bytes;
  }
  s.index_bytes_per_key = s.live_keys ? static_cast<double>(s.index_bytes) / s.live_keys : 0;
  s.puts = puts_.load();
  s.deletes = deletes_.load();
  s.gets = gets_.load();
  s.batches = batches_.load();
  s.user_bytes_written = user_bytes_.load();
  s.device_bytes_written = write_counters_.device_bytes.load();
  s.compaction_bytes_written = compactor_ != nullptr ? compactor_->copied_bytes() : 0;
  s.write_amplification = s.user_bytes_written
                              ? static_cast<double>(s.device_bytes_written) / s.user_bytes_written
                              : 0;
  s.pages_written = write_counters_.pages_written.load();
  s.page_reads = page_reads_.load();
  s.flushes = write_counters_.flushes.load();
  s.fua_writes = write_counters_.fua_writes.load();
  s.verify_reads = verify_reads_.load();
  s.segments_total = segments_->count();
  s.segments_free = segments_->free_count();
  s.segments_cleaned = compactor_ != nullptr ? compactor_->segments_cleaned() : 0;
  s.capacity_bytes = geometry_.segment_count * geometry_.segment_bytes();
  s.live_bytes = segments_->live_bytes_total();
  s.usable_bytes = segments_->usable_bytes();
  s.recovery_pages_scanned = recovery_.pages;
  s.recovery_records = recovery_.records;
  s.recovery_batches_discarded = recovery_.batches_discarded;
  s.recovery_damaged_pages = recovery_.damaged_pages;
  s.recovery_table_bytes = recovery_.table_bytes_peak;
  s.segments_retained = segments_->retained().size();
  s.compaction_damaged_pages = compactor_ != nullptr ? compactor_->damaged_pages() : 0;
  s.unreadable_pages = recovery_.unreadable_pages +
                       (compactor_ != nullptr ? compactor_->unreadable_pages() : 0);
  s.recovery_seconds = recovery_.seconds;
  s.read_queues = read_queues_->size();
  s.device = device_info_;
  {
    absl::MutexLock lock(&queue_notes_mu_);
    s.device.notes.insert(s.device.notes.end(), queue_notes_.begin(), queue_notes_.end());
  }
  // The first queue only holds the device; the writer's queue shows the ring features in use.
  if (writer_ != nullptr) s.device.ring = writer_->queue().info().ring;
  s.page_bytes = geometry_.page_bytes;
  s.pages_per_segment = geometry_.pages_per_segment;
  s.shard_count = static_cast<uint32_t>(shards_.size());
  s.index_mode = options_.index_mode;
  return s;
}

// --- Engine ---

absl::StatusOr<std::unique_ptr<Engine>> Engine::Open(const std::string& path,
                                                     const EngineOptions& options) {
  absl::Status valid = ValidateOptions(options);
  if (!valid.ok()) return valid;
  storage::DeviceOptions device_options = options.device;
  device_options.create_bytes = options.create_if_missing ? options.capacity_bytes : 0;
  // This first queue only holds the device (and its lock); every role opens its own queue.
  device_options.buffers.buffer_bytes = 4096;
  device_options.buffers.buffer_count = 1;
  device_options.buffers.chunk_count = 0;
  device_options.ring.queue_depth = 4;
  absl::StatusOr<std::unique_ptr<storage::Device>> device =
      storage::OpenDevice(path, device_options);
  if (!device.ok()) return device.status();
  return OpenOnDevice(std::move(*device), options);
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::OpenOnDevice(
    std::unique_ptr<storage::Device> device, const EngineOptions& options) {
  absl::Status valid = ValidateOptions(options);
  if (!valid.ok()) return valid;
  const std::string path = device->info().path;
  if (device->info().zoned) {
    return absl::UnimplementedError(absl::StrCat(path, ": zoned namespaces are not supported yet"));
  }
  auto impl = std::make_unique<Impl>(options, std::move(device));
  absl::Status opened = impl->OpenStore(path);
  if (!opened.ok()) {
    (void)impl->Close();
    return opened;
  }
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

absl::Status Engine::Write(std::span<const WriteOp> ops, bool durable) {
  return impl_->Write(ops, durable);
}
absl::StatusOr<std::string> Engine::Get(std::string_view key) {
  absl::Status open = impl_->CheckOpen();
  if (!open.ok()) return open;
  return impl_->Get(key);
}
void Engine::MultiGet(std::span<const std::string_view> keys,
                      std::vector<absl::StatusOr<std::string>>* values) {
  absl::Status open = impl_->CheckOpen();
  if (!open.ok()) {
    values->assign(keys.size(), open);
    return;
  }
  impl_->MultiGet(keys, values);
}
absl::Status Engine::GetAsync(std::string_view key, GetCallback callback) {
  return impl_->GetAsync(key, std::move(callback));
}
absl::StatusOr<uint32_t> Engine::Poll(uint32_t min_complete) {
  absl::Status open = impl_->CheckOpen();
  if (!open.ok()) return open;
  return impl_->Poll(min_complete);
}
uint32_t Engine::pending_reads() { return impl_->CheckOpen().ok() ? impl_->pending_reads() : 0; }
absl::Status Engine::Flush() {
  absl::Status open = impl_->CheckOpen();
  if (!open.ok()) return open;
  return impl_->Flush();
}
absl::Status Engine::CompactAll() {
  absl::Status open = impl_->CheckOpen();
  if (!open.ok()) return open;
  if (impl_->error_.failed()) return impl_->error_.status();
  return impl_->compactor_->CompactAll();
}
absl::Status Engine::Scan(std::string_view start, std::string_view end, size_t limit,
                          std::vector<std::pair<std::string, std::string>>* out) {
  return impl_->Scan(start, end, limit, out);
}
EngineStats Engine::Stats() { return impl_->Stats(); }
absl::Status Engine::Close() { return impl_->Close(); }
uint32_t Engine::max_value_bytes() const { return impl_->geometry_.max_value_bytes(); }
uint64_t Engine::max_batch_bytes() const { return impl_->max_batch_bytes(); }

}  // namespace nvkv::kv
