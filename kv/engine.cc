// Engine start and close (checkpoints are the CheckpointKeeper's), and the public Engine
// methods. Reading, formatting and growing a store's superblocks is StoreOpener's
// (store_open.h); the options as the engine applies them engine_options.cc; Stats
// engine_stats.cc.
#include "kv/engine.h"

#include <xxhash.h>

#include <cstddef>
#include <cstring>
#include <mutex>
#include <new>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "kv/checkpoint.h"
#include "kv/checkpoint_keeper.h"
#include "kv/engine_impl.h"
#include "kv/engine_options.h"
#include "kv/memory_headroom.h"
#include "kv/metadata_writer.h"
#include "kv/metadata_zones.h"
#include "kv/page_runs.h"
#include "kv/read_queue.h"
#include "kv/store_open.h"
#include "kv/zone_budget.h"
#include "storage/base/check.h"
#include "storage/base/status_macros.h"
#include "storage/buffer_pool.h"

namespace nvkv::kv {

KeyHash HashKey(std::string_view key) {
  const XXH128_hash_t h = XXH3_128bits(key.data(), key.size());
  return KeyHash{h.low64, h.high64};
}

Engine::Impl::Impl(const Options& options, const EngineSeams& seams,
                   std::unique_ptr<storage::Device> device)
    : options_(options),
      seams_(seams),
      read_only_(options.read_only || device->info().read_only),
      base_device_(std::move(device)),
      device_info_(base_device_->info()),
      durable_writes_(ChooseDurableWrites(options.durable_writes)) {}

Engine::Impl::~Impl() {
  (void)Close();
}

absl::Status Engine::Impl::CheckOpen() const {
  if (closed_.load()) return absl::FailedPreconditionError("the store is closed");
  return absl::OkStatus();
}

absl::Status Engine::Impl::CheckWritable() const {
  NVKV_RETURN_IF_ERROR(CheckOpen());
  if (read_only_) {
    return absl::FailedPreconditionError(
        absl::StrCat(device_info_.path, ": the store is open read-only"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<storage::Device>> Engine::Impl::OpenQueue(
    QueueKind kind, const storage::QueueOptions& options) {
  absl::StatusOr<std::unique_ptr<storage::Device>> queue = base_device_->OpenQueue(options);
  if (!queue.ok()) return queue;
  (*queue)->ShareCountsWith(&queue_counts_[static_cast<size_t>(kind)]);
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

absl::Status Engine::Impl::OpenStore(const std::string& path) {
  StoreOpener opener(options_, read_only_, path, *base_device_,
                     [this](uint32_t chunks) {
                       return OpenQueue(QueueKind::kOpen, LargeIoQueueOptions(chunks));
                     });
  NVKV_ASSIGN_OR_RETURN(OpenedStore opened, opener.Open());
  shape_ = opened.shape;
  device_info_ = opened.device_info;
  open_queue_ = std::move(opened.queue);
  return StartEngine(opened.formatted_now, opened.superblock);
}

absl::Status Engine::Impl::StartEngine(bool formatted_now, const Superblock& superblock) {
  segment_map_ = std::make_unique<SegmentMap>(shape_.geometry, shape_.seed);
  if (shape_.geometry.zoned()) {
    segment_map_->UseZones(superblock);
    // Before any part takes its copy of the shape: every read of a log page goes through it.
    zone_places_ = std::make_unique<ZonePlaces>(shape_.geometry);
    shape_.places = zone_places_.get();
  }
  segments_ = std::make_unique<SegmentTable>(shape_.geometry,
                                             SegmentTable::UserReserveFor(options_.shard_count),
                                             segment_map_.get(), &next_sequence_);
  shards_.Make(options_.shard_count, shape_.ordered, options_.cache_bytes / options_.shard_count);
  if (formatted_now) {
    segments_->FinishRecovery();  // every segment free
  } else {
    NVKV_RETURN_IF_ERROR(Recover());
  }
  if (shape_.geometry.zoned()) NVKV_RETURN_IF_ERROR(SettleZones());
  if (shape_.geometry.zoned() && !read_only_) {
    // The device's active zones, less the segment map's: the heads' (Open checked they suffice).
    NVKV_ASSIGN_OR_RETURN(zone_budget_, ZoneBudgetFor(device_info_.zones, options_.shard_count,
                                                      device_info_.path));
    segments_->UseZoneTokens(zone_budget_ - 1);
  }
  if (!read_only_) {
    segments_->AnnounceMore();
    NVKV_RETURN_IF_ERROR(shape_.geometry.zoned()
                             ? WriteMapOnZones(superblock)
                             : WriteMapAlone(*segments_, shape_, *open_queue_,
                                             device_info_.volatile_write_cache));
  }
  open_queue_.reset();  // superblocks, format and recovery are done: give back its buffers
  // A reader's store is what recovery found: nothing writes or cleans it.
  if (!read_only_) NVKV_RETURN_IF_ERROR(StartWriter());
  StartReads();
  if (read_only_) return absl::OkStatus();
  NVKV_RETURN_IF_ERROR(StartCompactor());
  StartCheckpoints();
  StartWrites();
  NVKV_RETURN_IF_ERROR(writer_->Start());
  NVKV_RETURN_IF_ERROR(compactor_->Start());
  return checkpoints_->StartThread();
}

void Engine::Impl::StartReads() {
  reads_ = std::make_unique<ReadPath>(ReadPath::EngineParts{
      .shape = shape_,
      .shards = shards_,
      .segments = *segments_,
      .dropped_batch_records = recovery_.dropped_batch_records,
      .writer = writer_.get(),
      .read_queue_depth = options_.read_queue_depth,
      .check_open = [this] { return CheckOpen(); },
      .open_queue = [this](const storage::QueueOptions& options) {
        return OpenQueue(QueueKind::kReads, options);
      }});
}

void Engine::Impl::StartWrites() {
  writes_ = std::make_unique<WritePath>(WritePath::EngineParts{
      .shape = shape_,
      .shards = shards_,
      .segments = *segments_,
      .appender = *appender_,
      .writer = *writer_,
      .reads = *reads_,
      .compactor = *compactor_,
      .append_gate = append_gate_,
      .error = error_,
      .max_batch_bytes = max_batch_bytes(),
      .write_queue_depth = options_.write_queue_depth,
      .background_compaction = options_.background_compaction});
}

void Engine::Impl::StartCheckpoints() {
  Checkpointer::Options when;
  when.log_ratio = WritesCheckpoints() ? options_.checkpoint_log_ratio : 0;
  when.min_log_bytes = options_.checkpoint_min_log_bytes;
  when.page_bytes = shape_.geometry.page_bytes;
  const CheckpointKeeper::EngineParts parts{
      .shape = shape_,
      .segments = *segments_,
      .shards = shards_,
      .appender = *appender_,
      .writer = *writer_,
      .compactor = *compactor_,
      .append_gate = append_gate_,
      .next_sequence = next_sequence_,
      .dropped = recovery_.dropped_batch_records,
      .volatile_write_cache = device_info_.volatile_write_cache,
      .may_write = [this]() -> absl::Status {
        if (error_.failed()) return error_.status();
        if (closed_.load()) return absl::FailedPreconditionError("the store is closing");
        if (shape_.geometry.zoned()) {
          return absl::FailedPreconditionError("no checkpoints on a zoned store yet");
        }
        if (!WritesCheckpoints()) {
          return absl::FailedPreconditionError(absl::StrCat(
              "no checkpoint while ", recovery_.unread_pages.size(),
              " pages of the log Open could not read are missing (open_degraded)"));
        }
        return absl::OkStatus();
      },
      .open_queue = [this] { return OpenQueue(QueueKind::kCheckpoints, LargeIoQueueOptions()); },
  };
  checkpoints_ = std::make_unique<CheckpointKeeper>(parts, when);
  checkpoints_->StartFrom(recovery_);
}

absl::Status Engine::Impl::Recover() {
  RecoveryOptions recovery_options;
  recovery_options.read_all = seams_.recovery_reads_all;
  recovery_options.open_degraded = options_.open_degraded;
  recovery_options.table_budget_bytes = options_.recovery_memory_bytes;
  if (recovery_options.table_budget_bytes == 0) {
    // What the limits leave: recovery keeps its tables, the index and the key filters within it.
    const std::optional<uint64_t> headroom = seams_.memory_headroom_bytes != 0
                                                 ? seams_.memory_headroom_bytes
                                                 : MemoryHeadroomBytes();
    if (headroom) recovery_options.table_budget_ceiling_bytes = std::max<uint64_t>(1, *headroom);
  }
  NVKV_ASSIGN_OR_RETURN(recovery_,
                        RecoverStore(recovery_options, shape_, *open_queue_, *segments_, shards_));
  next_sequence_.store(recovery_.next_sequence);
  if (!recovery_.unread_pages.empty()) {
    // Their records may come back at a later Open: nothing this engine does may decide without
    // them. Its sequences start above theirs (recovery), and the map's floor says so from the
    // Open's map write on; their segments stay as they are; no checkpoint stands for the log.
    for (const uint64_t page : recovery_.unread_pages) {
      segments_->HoldUnread(shape_.geometry.SegmentOf(page));
    }
    if (!read_only_) (void)segments_->RaiseMapFloors();
  }
  // After a process crash (not a power cut) recovery may have read pages that still sit in the
  // device's volatile cache. Compaction treats recovered segments as durable (it copies their
  // records as lone records), so make them so. (A reader compacts nothing.)
  if (device_info_.volatile_write_cache && !read_only_) {
    return storage::FlushDevice(*open_queue_);
  }
  return absl::OkStatus();
}

absl::Status Engine::Impl::WriteMapOnZones(const Superblock& superblock) {
  const uint32_t map_zone = *segment_map_->current_zone();
  {
    const storage::BufferLease page = storage::BufferLease::Page(open_queue_->buffers());
    NVKV_CHECK(page.valid());
    NVKV_RETURN_IF_ERROR(AlignMetadataZone(*open_queue_, shape_.geometry, map_zone, *page));
    if (!HoldsFirstCopy(*open_queue_, shape_.geometry, superblock, map_zone, *page)) {
      // A first copy damaged (or lost) in the map's own zone cannot be written again in place:
      // the map moves out now, the zone filled up to the pages kept for its closing copy, rather
      // than when the map has filled it (the other zone's copy the only one until then).
      const storage::BufferLease chunk = storage::BufferLease::Chunk(open_queue_->buffers());
      NVKV_CHECK(chunk.valid());
      NVKV_ASSIGN_OR_RETURN(const bool filled,
                            FillMetadataZone(*open_queue_, shape_.geometry, map_zone, *chunk));
      if (filled) segment_map_->MoveOn();
    }
  }
  NVKV_RETURN_IF_ERROR(
      WriteMapAlone(*segments_, shape_, *open_queue_, device_info_.volatile_write_cache));
  // The map's zone (it may have moved) holds every map page now, durably: a superblock copy
  // damaged (or lost to a cut) in the other zone is written again at once, not left as the
  // store's only copy until the map next moves there.
  const storage::BufferLease page = storage::BufferLease::Page(open_queue_->buffers());
  NVKV_CHECK(page.valid());
  return RewriteIdleSuperblockCopy(*open_queue_, shape_.geometry, superblock,
                                   1 - *segment_map_->current_zone(), *page);
}

absl::Status Engine::Impl::SettleZones() {
  NVKV_ASSIGN_OR_RETURN(const std::vector<storage::ZoneDescriptor> zones,
                        storage::ReportAllZones(*open_queue_));
  const auto active = [](const storage::ZoneDescriptor& zone) {
    return zone.state == storage::ZoneState::kImplicitlyOpen ||
           zone.state == storage::ZoneState::kExplicitlyOpen ||
           zone.state == storage::ZoneState::kClosed;
  };
  std::vector<storage::IoRequest> requests;
  // The metadata zone the map is not in (a format or a move a cut left before its finish) holds
  // a superblock copy and older map pages only: full, so that only the map's zone is active.
  const uint32_t idle_metadata = 1 - segment_map_->current_zone().value_or(0);
  if (active(zones[idle_metadata]) && !read_only_) {
    storage::IoRequest finish;
    finish.op = storage::IoOp::kZoneFinish;
    finish.lba = zones[idle_metadata].start;
    requests.push_back(finish);
  }
  bool resets = false;
  for (uint64_t s = 0; s < shape_.geometry.segment_count; ++s) {
    const storage::ZoneDescriptor& zone = zones[kMetadataZones + s];
    storage::IoRequest request;
    request.lba = zone.start;
    if (storage::OutOfService(zone.state)) {
      // Read-only or offline: never written nor reset again. Free (as the map says of one
      // compaction emptied), it is retired; else its records are read (offline: they could not
      // be) until compaction moves them and retires it.
      if (segments_->state(s) == SegmentState::kFree) {
        segments_->Retire(s, /*holds_log=*/false);
        shape_.places->Clear(s);
      }
      continue;
    }
    if (read_only_) continue;  // a reader writes nothing
    if (segments_->state(s) == SegmentState::kFree && zone.state != storage::ZoneState::kEmpty) {
      // Nothing of it counts (no log, or one compaction emptied): a head starts it afresh, its
      // positions landing anew.
      request.op = storage::IoOp::kZoneReset;
      shape_.places->Clear(s);
      resets = true;
    } else if (active(zone)) {
      // A log no head goes on with (heads start in fresh zones at Open): full where it ends,
      // so that the store starts within the device's active zones.
      request.op = storage::IoOp::kZoneFinish;
    } else {
      continue;
    }
    requests.push_back(request);
  }
  NVKV_RETURN_IF_ERROR(storage::RunAll(*open_queue_, requests));
  for (const storage::IoRequest& request : requests) {
    if (!request.status.ok()) {
      return absl::Status(request.status.code(),
                          absl::StrCat(device_info_.path, ": settling zone at LBA ", request.lba,
                                       " at Open: ", request.status.message()));
    }
  }
  // A reset is durable once a flush after it completed: before a head appends there.
  if (resets && device_info_.volatile_write_cache) {
    NVKV_RETURN_IF_ERROR(storage::FlushDevice(*open_queue_));
  }
  return absl::OkStatus();
}

absl::Status Engine::Impl::StartWriter() {
  storage::QueueOptions writer_options;
  const uint32_t slots = options_.shard_count * options_.page_buffers_per_shard;
  // Every page in flight, a flush, a wake event, and the segment map's and summaries' writes;
  // on zones the finishes of zones left (one a zone token at most), and a map move's commands.
  const uint32_t zone_commands = zone_budget_ != 0 ? zone_budget_ + 2 : 0;
  writer_options.queue_depth = slots + 3 + MetadataWriter::kPageWrites + zone_commands;
  writer_options.buffers.buffer_bytes = shape_.geometry.page_bytes;
  writer_options.buffers.buffer_count = slots + MetadataWriter::kPageWrites;
  writer_options.buffers.chunk_count = 0;
  auto writer_queue = OpenQueue(QueueKind::kLogWrites, writer_options);
  if (!writer_queue.ok()) return writer_queue.status();
  LogWriter::Options writer_config;
  writer_config.max_write_delay_us = options_.max_write_delay_us;
  writer_config.volatile_cache = device_info_.volatile_write_cache;
  writer_config.durable_by_fua = durable_writes_ == DurableWrites::kFua;
  NVKV_ASSIGN_OR_RETURN(std::unique_ptr<storage::EventFd> writer_wake, storage::EventFd::Create());
  writer_ = std::make_unique<LogWriter>(writer_config, shape_, shards_, *segments_, error_,
                                        write_counters_, std::move(*writer_queue),
                                        std::move(writer_wake));
  HeadAppender::Options appender_config;
  appender_config.summaries =
      segment_map_ != nullptr && !shape_.geometry.zoned() &&  // not built on zones yet
      shape_.geometry.pages_per_segment >= seams_.summary_min_segment_pages;
  appender_ = std::make_unique<HeadAppender>(appender_config, shape_, shards_, *segments_,
                                             *writer_, next_sequence_);
  for (auto& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    for (uint32_t i = 0; i < options_.page_buffers_per_shard; ++i) {
      auto slot = std::make_unique<PageSlot>();
      slot->buffer = writer_->queue().buffers().GetPage();
      NVKV_CHECK(slot->buffer.valid());
      slot->shard = shard.get();
      slot->writer = writer_.get();
      // Room for the tags of a page of small records, so that appending allocates nothing
      // (a slot is reused for the engine's life and keeps it).
      slot->tags.reserve(shape_.geometry.page_bytes / 32);
      shard->head.free_slots.push_back(slot.get());
      shard->slots.push_back(std::move(slot));
    }
  }
  return absl::OkStatus();
}

absl::Status Engine::Impl::StartCompactor() {
  storage::QueueOptions compaction_options;
  compaction_options.buffers.buffer_bytes = shape_.geometry.page_bytes;
  // Pages for free markers and large copies, and for settling stale entries (Compactor: one
  // page, and a window of pages read ahead).
  compaction_options.buffers.buffer_count = 5 + Compactor::kSettleWindow;
  // A victim is read whole (SegmentBuffer), every chunk in flight at once; large records copied
  // and free markers are written one request at a time.
  compaction_options.buffers.chunk_count =
      static_cast<uint32_t>(shape_.geometry.segment_bytes() /
                            (storage::kMaxRegisteredBytes / shape_.geometry.page_bytes *
                             shape_.geometry.page_bytes)) +
      2;
  compaction_options.queue_depth = std::max<uint32_t>(8, compaction_options.buffers.chunk_count);
  auto compaction_queue = OpenQueue(QueueKind::kCompaction, compaction_options);
  if (!compaction_queue.ok()) return compaction_queue.status();
  Compactor::Options compactor_config;
  compactor_config.background = options_.background_compaction;
  compactor_config.compaction_policy = options_.compaction_policy;
  compactor_config.dropped_batch_records = &recovery_.dropped_batch_records;
  compactor_config.victim_picked = seams_.victim_picked;
  compactor_ = std::make_unique<Compactor>(compactor_config, shape_, shards_, *segments_,
                                           *writer_, error_, write_counters_, *appender_,
                                           next_sequence_, std::move(*compaction_queue));
  return absl::OkStatus();
}

absl::Status Engine::Impl::CompactAll() {
  NVKV_RETURN_IF_ERROR(CheckWritable());
  if (error_.failed()) return error_.status();
  return compactor_->CompactAll();
}

absl::Status Engine::Impl::Close() {
  if (closed_.exchange(true)) return absl::OkStatus();
  // Checkpoints stop first (a checkpoint under way finishes; later ones refuse, closed_), then
  // compaction: until it has, it may copy records and wait for the copies to be durable, so
  // the writer must still be there.
  if (checkpoints_ != nullptr) checkpoints_->Stop();
  if (compactor_ != nullptr) compactor_->Stop();
  absl::Status status;
  if (writer_ != nullptr && writer_->started()) {
    const bool checkpoint_at_close = seams_.checkpoint_at_close && WritesCheckpoints();
    if (!error_.failed()) {
      if (checkpoint_at_close) {
        // The checkpoint keeps the heads in their segments, and the next Open resumes them. (If
        // it cannot be written, recovery reads those segments whole, as after a crash.)
        appender_->SealOpenPages();
      } else {
        // The heads leave their segments, each with its summary: the next Open reads summaries
        // only (the writer puts them in the segment map before it exits, with the segments of
        // the checkpoint kept free again).
        appender_->SealHeads();
        checkpoints_->ReleaseKept();
      }
      status = writer_->WaitAllDurable();
    }
    writer_->Stop();
    if (status.ok() && !error_.failed() && checkpoint_at_close) {
      // Every write is durable already. A checkpoint that could not be written (no room, or a
      // device error) only makes the next Open read the log: Close still succeeds.
      checkpoints_->WriteAtClose().IgnoreError();
    }
  }
  if (status.ok() && error_.failed()) status = error_.status();
  // Threads that read keep nothing of this engine but the (closed) set.
  if (reads_ != nullptr) reads_->Close();
  compactor_.reset();
  writer_.reset();
  open_queue_.reset();
  base_device_.reset();  // releases the device lock: the store may be opened again
  return status;
}

absl::Status Engine::Impl::Checkpoint() {
  NVKV_RETURN_IF_ERROR(CheckWritable());
  // Every earlier write durable first, whatever becomes of the checkpoint (no room for it, a
  // queue that cannot be opened, a store that writes none): the contract of DB::Checkpoint.
  NVKV_RETURN_IF_ERROR(Flush());
  return checkpoints_->Checkpoint().status();  // (it refuses once Close began meanwhile)
}

// --- Engine ---

namespace {

// Abseil's mutex deadlock detection records every lock taken in a process-wide graph (Debian's
// Abseil has it on): a cost on every lock of every Get and Put. Off unless the build asks to
// keep it (NVKV_MUTEX_DEADLOCK_DETECTION, on in the sanitizer builds). Once per process: an
// application that sets the mode after its first Open keeps what it set.
void StopMutexDeadlockDetection() {
#ifndef NVKV_MUTEX_DEADLOCK_DETECTION
  static std::once_flag once;
  std::call_once(once, [] { absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore); });
#endif
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Open(const std::string& path,
                                                     const Options& options,
                                                     const EngineSeams& seams) {
  absl::Status valid = ValidateOptions(options);
  if (!valid.ok()) return valid;
  StopMutexDeadlockDetection();
  absl::StatusOr<std::unique_ptr<storage::Device>> device =
      storage::OpenDevice(path, DeviceOptionsOf(options));
  if (!device.ok()) return device.status();
  return OpenOnDevice(std::move(*device), options, seams);
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::OpenOnDevice(
    std::unique_ptr<storage::Device> device, const Options& options, const EngineSeams& seams) {
  absl::Status valid = ValidateOptions(options);
  if (!valid.ok()) return valid;
  StopMutexDeadlockDetection();
  const std::string path = device->info().path;
  if (device->info().zoned) {
    if (!device->info().zones.zoned()) {
      // A zoned block node opened for reports (ZonedAccess::kAnyNode): no zone commands there.
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": zoned device without Zone Append (a block node): open the namespace's NVMe "
                "generic node"));
    }
    // A namespace too small in open or active zones for the store is refused with the numbers.
    absl::StatusOr<uint32_t> budget =
        ZoneBudgetFor(device->info().zones, options.shard_count, path);
    if (!budget.ok()) return budget.status();
  }
  const storage::DeviceInfo info = device->info();
  auto impl = std::make_unique<Impl>(options, seams, std::move(device));
  absl::Status opened;
  try {
    opened = impl->OpenStore(path);
  } catch (const std::bad_alloc&) {
    // The allocations that grow with the store report their failure (recovery's tables, the
    // index, the key filters, the buffers); any other one that fails under a tight memory limit
    // ends the Open here, with the same cleanup as an error. Recovery writes nothing, and Close
    // writes nothing before the writer has started (after recovery). (Seen from std::vector;
    // an Abseil table whose growth failed is unsound after it, so a table that grows with the
    // store should report the failure itself, as the hash index does, not throw.)
    opened = absl::ResourceExhaustedError(absl::StrCat(
        path, ": out of memory while opening the store (under a memory limit: ulimit -v or -d, "
              "or a memory cgroup)"));
  }
  if (!opened.ok()) {
    (void)impl->Close();
    impl.reset();  // every queue closed
    // A file this Open created holds no store (a format that failed, e.g. too small): gone.
    storage::RemoveCreatedFile(info);
    return opened;
  }
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

absl::Status Engine::Write(std::span<const WriteOp> ops, bool durable) {
  NVKV_RETURN_IF_ERROR(impl_->CheckWritable());
  return impl_->writes().Write(ops, durable);
}
absl::Status Engine::WriteAsync(std::span<const WriteOp> ops, bool durable, WriteCallback done) {
  NVKV_RETURN_IF_ERROR(impl_->CheckWritable());
  return impl_->writes().WriteAsync(ops, durable, std::move(done));
}
absl::StatusOr<std::string> Engine::Get(std::string_view key) {
  absl::Status open = impl_->CheckOpen();
  if (!open.ok()) return open;
  return impl_->reads().Get(key);
}
void Engine::MultiGet(std::span<const std::string_view> keys,
                      std::vector<absl::StatusOr<std::string>>* values) {
  absl::Status open = impl_->CheckOpen();
  if (!open.ok()) {
    values->assign(keys.size(), open);
    return;
  }
  impl_->reads().MultiGet(keys, values);
}
absl::Status Engine::GetAsync(std::string_view key, GetCallback callback) {
  return impl_->reads().GetAsync(key, std::move(callback));
}
absl::StatusOr<uint32_t> Engine::Poll(uint32_t min_complete) {
  absl::Status open = impl_->CheckOpen();
  if (!open.ok()) return open;
  return impl_->reads().Poll(min_complete);
}
uint32_t Engine::pending_reads() {
  return impl_->CheckOpen().ok() ? impl_->reads().pending_reads() : 0;
}
uint32_t Engine::pending_writes() {
  return impl_->CheckOpen().ok() ? impl_->reads().pending_writes() : 0;
}
absl::Status Engine::Flush() {
  absl::Status open = impl_->CheckOpen();
  if (!open.ok()) return open;
  return impl_->Flush();
}
absl::Status Engine::CompactAll() { return impl_->CompactAll(); }
absl::Status Engine::Checkpoint() { return impl_->Checkpoint(); }
absl::Status Engine::Scan(std::string_view start, std::string_view end, size_t limit,
                          std::vector<std::pair<std::string, std::string>>* out) {
  return impl_->reads().Scan(start, end, limit, out);
}
EngineStats Engine::Stats() { return impl_->Stats(); }
absl::Status Engine::Close() { return impl_->Close(); }
absl::StatusOr<CheckReport> Engine::Check(const ProgressCallback& progress) {
  return impl_->Check(progress);
}
absl::Status Engine::ForEachLive(
    const std::function<absl::Status(std::string_view key, std::string_view value)>& visit,
    const ProgressCallback& progress) {
  return impl_->ForEachLive(visit, progress);
}
uint32_t Engine::max_value_bytes() const { return impl_->shape().geometry.max_value_bytes(); }
uint64_t Engine::max_batch_bytes() const { return impl_->max_batch_bytes(); }
IndexMode Engine::index_mode() const { return impl_->index_mode(); }

}  // namespace nvkv::kv
