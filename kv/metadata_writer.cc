// MetadataWriter (metadata_writer.h): the segment map's pages and sealed segments' summaries,
// written by the log writer's thread; and the map written without it (WriteMapAlone).
#include "kv/metadata_writer.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kv/log_writer.h"
#include "kv/metadata_zones.h"
#include "kv/page_runs.h"
#include "kv/segment_summary.h"
#include "storage/base/check.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {

namespace {

// A map page's append landed on a page boundary of its zone (else no read would find it there).
absl::Status MapAppendLanded(const storage::IoRequest& append, const StoreShape& shape) {
  if (append.appended_lba % shape.blocks_per_page == 0) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat("a segment map page's append landed at LBA ",
                                          append.appended_lba, ", off a page boundary"));
}

}  // namespace

MetadataWriter::MetadataWriter(LogWriter& writer, const StoreShape& shape, const ShardSet& shards,
                               SegmentTable& segments, StickyError& error,
                               WriteCounters& counters, storage::Device& queue,
                               bool volatile_cache)
    : writer_(writer),
      shape_(shape),
      shards_(shards),
      segments_(segments),
      error_(error),
      counters_(counters),
      queue_(queue),
      volatile_cache_(volatile_cache),
      map_writes_(segments.map() != nullptr ? kMapWrites : 0),
      summary_writes_(segments.map() != nullptr ? kSummaryWrites : 0) {
  for (MapWrite& write : map_writes_) {
    write.owner = this;
    write.buffer = queue_.buffers().GetPage();
    NVKV_CHECK(write.buffer.valid());
  }
  for (SummaryPageWrite& write : summary_writes_) {
    write.owner = this;
    write.buffer = queue_.buffers().GetPage();
    NVKV_CHECK(write.buffer.valid());
  }
}

MetadataWriter::~MetadataWriter() {
  for (MapWrite& write : map_writes_) {
    if (!write.in_flight) queue_.buffers().PutPage(write.buffer);
  }
  for (SummaryPageWrite& write : summary_writes_) {
    if (!write.in_flight) queue_.buffers().PutPage(write.buffer);
  }
}

void MetadataWriter::Queue(SummaryWrite write) {
  absl::MutexLock lock(&queued_mu_);
  queued_summaries_.push_back(std::move(write));
  queued_summary_count_.fetch_add(1, std::memory_order_release);
}

void MetadataWriter::QueueLeftZone(LeftZone zone) {
  absl::MutexLock lock(&queued_mu_);
  queued_left_zones_.push_back(zone);
  queued_left_zone_count_.fetch_add(1, std::memory_order_release);
}

bool MetadataWriter::Over(const LeftZoneJob& job) const {
  // Failed: nothing more is written, and the zone is finished at the next Open.
  return job.done || (!job.submitted && error_.failed());
}

bool MetadataWriter::done() const {
  const bool map_done = segments_.map() == nullptr || error_.failed() ||
                        !segments_.map()->dirty();
  return map_done && summary_jobs_.empty() &&
         std::all_of(left_zone_jobs_.begin(), left_zone_jobs_.end(),
                     [this](const std::unique_ptr<LeftZoneJob>& job) { return Over(*job); }) &&
         queued_left_zone_count_.load(std::memory_order_acquire) == 0;
}

bool MetadataWriter::SubmitLeftZones() {
  if (queued_left_zone_count_.load(std::memory_order_acquire) > 0) {
    absl::MutexLock lock(&queued_mu_);
    for (const LeftZone& zone : queued_left_zones_) {
      left_zone_jobs_.push_back(std::make_unique<LeftZoneJob>());
      left_zone_jobs_.back()->owner = this;
      left_zone_jobs_.back()->zone = zone;
    }
    queued_left_zones_.clear();
    queued_left_zone_count_.store(0, std::memory_order_relaxed);
  }
  std::erase_if(left_zone_jobs_,
                [this](const std::unique_ptr<LeftZoneJob>& job) { return Over(*job); });
  bool submitted = false;
  for (const std::unique_ptr<LeftZoneJob>& job : left_zone_jobs_) {
    if (job->submitted) continue;
    // Every append to the zone has landed: none may meet a full zone.
    if (LogWriter::DurableThroughUnlocked(*job->zone.shard) < job->zone.last_counter) continue;
    job->submitted = true;
    if (!job->zone.finish) {
      job->done = true;
      GiveBack(job->zone);
      continue;
    }
    job->request = storage::IoRequest{};
    job->request.op = storage::IoOp::kZoneFinish;
    job->request.lba = shape_.LbaOf(shape_.geometry.FirstPageOf(job->zone.segment));
    job->request.on_done = OnZoneFinished;
    job->request.context = job.get();
    if (absl::Status status = queue_.Enqueue(&job->request); !status.ok()) {
      if (absl::IsUnavailable(status)) {
        job->submitted = false;  // the queue is full for now: the next pass tries again
        break;
      }
      job->request.status = status;
      OnZoneFinished(&job->request);
      continue;
    }
    submitted = true;
  }
  return submitted;
}

void MetadataWriter::OnZoneFinished(storage::IoRequest* request) {
  auto* job = static_cast<LeftZoneJob*>(request->context);
  job->done = true;
  if (!request->status.ok()) {
    // The device keeps the zone active: its token stays taken, and the store fails.
    job->owner->error_.Set(absl::Status(
        request->status.code(), absl::StrCat("finishing the zone of segment ", job->zone.segment,
                                             ": ", request->status.message())));
    return;
  }
  job->owner->GiveBack(job->zone);
}

void MetadataWriter::GiveBack(const LeftZone& zone) {
  segments_.AddPending(zone.segment, -1);  // a compaction victim now
  segments_.ZoneDone();
  WakeHeads();
}

void MetadataWriter::WakeHeads() {
  for (const auto& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    shard->changed.SignalAll();
  }
}

bool MetadataWriter::SubmitMapWrites(bool stopping) {
  SegmentMap* map = segments_.map();
  if (map == nullptr || error_.failed()) return false;
  // Closing: segments announced but not taken go back to free, so that the next Open does not
  // read them.
  if (stopping) {
    segments_.WithdrawAnnouncements();
  } else {
    segments_.AnnounceMore();
  }
  if (map->dirty() && shape_.geometry.zoned()) {
    // The current metadata zone full: the map moves to the other one first (rare, and short:
    // a reset and one page), on this thread, while no map write is in flight.
    if (absl::Status moved = MoveMapWhenFull(*map, shape_.geometry, queue_, map_writes_[0].buffer);
        !moved.ok()) {
      error_.Set(moved);
      return false;
    }
  }
  bool submitted = false;
  for (MapWrite& write : map_writes_) {
    if (!map->dirty()) break;  // the common pass: nothing changed, no lock taken
    if (write.in_flight) continue;
    std::optional<SegmentMap::PageWrite> page = segments_.TakeMapWrite(write.buffer.data);
    if (!page.has_value()) break;
    write.page = *page;
    write.in_flight = true;
    // An announcement must be on the device before a head takes the segment.
    if (!writer_.EnqueuePageWrite(write.request, page->page_number, 1, write.buffer,
                                  /*fua=*/volatile_cache_, page->append,
                                  shape_.placement.metadata, OnMapWritten, &write)) {
      break;
    }
    submitted = true;
  }
  return submitted;
}

void MetadataWriter::OnMapWritten(storage::IoRequest* request) {
  auto* write = static_cast<MapWrite*>(request->context);
  MetadataWriter& writer = *write->owner;
  write->in_flight = false;
  if (request->status.ok() && write->page.append) {
    request->status = MapAppendLanded(*request, writer.shape_);
  }
  if (absl::Status written = writer.segments_.MapPageWritten(write->page, request->status);
      !written.ok()) {
    // Without map writes no segment can be announced: the heads could never move on.
    writer.error_.Set(written);
    return;
  }
  writer.counters_.device_bytes.fetch_add(writer.shape_.geometry.page_bytes,
                                          std::memory_order_relaxed);
  // Heads waiting for a segment (HeadAppender::WaitForWriter) may find one now, and a checkpoint
  // waiting for a map change (LogWriter::WaitMapDurable) may find it on the device.
  writer.WakeHeads();
}

bool MetadataWriter::SubmitSummaries() {
  if (queued_summary_count_.load(std::memory_order_acquire) > 0) {
    absl::MutexLock lock(&queued_mu_);
    for (SummaryWrite& write : queued_summaries_) {
      summary_jobs_.push_back(std::make_unique<SummaryJob>());
      summary_jobs_.back()->write = std::move(write);
    }
    queued_summaries_.clear();
    queued_summary_count_.store(0, std::memory_order_relaxed);
  }
  if (summary_jobs_.empty()) return false;
  if (error_.failed()) {
    // Nothing more becomes durable: no summary reaches the map (recovery reads the segments).
    std::erase_if(summary_jobs_, [](const auto& job) { return job->submitted == job->completed; });
    return false;
  }
  // The durable ones: the map may say where they are now.
  std::erase_if(summary_jobs_, [this](const std::unique_ptr<SummaryJob>& job) {
    const SummaryWrite& w = job->write;
    if (job->completed < w.pages) return false;
    if (job->failed) return true;  // the store failed (PagesWritten): no summary
    const uint64_t last = w.first_counter + w.pages - 1;
    if (LogWriter::DurableThroughUnlocked(*w.shard) < last) return false;
    segments_.MarkSummarized(w.segment, w.generation, SummaryPlace{w.first_in_segment, w.pages});
    return true;
  });
  bool submitted = false;
  for (const std::unique_ptr<SummaryJob>& job : summary_jobs_) {
    const SummaryWrite& w = job->write;
    // Only after the log's pages: every page of the head before the summary is durable.
    if (LogWriter::DurableThroughUnlocked(*w.shard) + 1 < w.first_counter) continue;
    for (SummaryPageWrite& page : summary_writes_) {
      if (job->submitted == w.pages) break;
      if (page.in_flight) continue;
      const uint32_t index = job->submitted++;
      EncodeSummaryPage(page.buffer.data, shape_.geometry, shape_.seed, w.bytes, index,
                        w.generation, w.first_in_segment, w.first_counter,
                        w.first_page + index);
      page.job = job.get();
      page.index = index;
      page.in_flight = true;
      // Durable on completion: the map may then name it at once, and a durable write in the
      // next segment waits for no flush of it.
      submitted = writer_.EnqueuePageWrite(page.request, w.first_page + index, 1, page.buffer,
                                           /*fua=*/volatile_cache_, /*append=*/false,
                                           shape_.placement.log, OnSummaryPageWritten, &page) ||
                  submitted;
    }
  }
  return submitted;
}

void MetadataWriter::OnSummaryPageWritten(storage::IoRequest* request) {
  auto* page = static_cast<SummaryPageWrite*>(request->context);
  MetadataWriter& writer = *page->owner;
  SummaryJob& job = *page->job;
  page->in_flight = false;
  Shard& shard = *job.write.shard;
  absl::MutexLock lock(&shard.mu);
  writer.writer_.PagesWritten(shard, job.write.first_counter + page->index, job.write.segment,
                              1, request->status, request->fua);
  ++job.completed;
  job.failed = job.failed || !request->status.ok();
}

absl::Status MoveMapWhenFull(SegmentMap& map, const Geometry& geometry, storage::Device& device,
                             const storage::Buffer& page) {
  const std::optional<MapZoneLog::Move> move = map.MoveTarget();
  if (!move.has_value()) return absl::OkStatus();
  const uint32_t left = 1 - move->zone;
  // The zone left ends with its closing superblock copy, and the other zone, which the move
  // resets, may hold the only other one: the reset waits until the zone left holds a copy that
  // decodes, read back now (a first copy the media damaged since would otherwise leave none).
  absl::Status started = absl::OkStatus();
  if (move->closing_copy_room) {
    started = CloseMetadataZone(device, geometry, move->superblock, left, page);
  }
  if (started.ok()) {
    started = ExpectSuperblockCopy(device, geometry, move->superblock, left, page);
  }
  // The zone left is full on the device (its closing copy or its capacity written), or made so:
  // only the current zone counts among the active ones.
  if (started.ok()) started = storage::FinishZone(device, left);
  if (started.ok()) {
    started = StartMetadataZone(device, geometry, move->superblock, move->zone, page);
  }
  if (!started.ok()) {
    return absl::Status(started.code(), absl::StrCat("moving the segment map to metadata zone ",
                                                     move->zone, ": ", started.message()));
  }
  map.Moved();
  return absl::OkStatus();
}

namespace {

// WriteMapAlone on a zoned store: each changed page appended to the current metadata zone with
// FUA, one at a time, the map moved when the zone is full.
absl::Status AppendMapAlone(SegmentTable& segments, const StoreShape& shape,
                                   storage::Device& device, bool volatile_cache) {
  SegmentMap& map = *segments.map();
  const storage::BufferLease page = storage::BufferLease::Page(device.buffers());
  NVKV_CHECK(page.valid());
  while (map.dirty()) {
    NVKV_RETURN_IF_ERROR(MoveMapWhenFull(map, shape.geometry, device, *page));
    std::optional<SegmentMap::PageWrite> write = segments.TakeMapWrite(page->data);
    if (!write.has_value()) break;
    storage::IoRequest append;
    append.op = storage::IoOp::kZoneAppend;
    append.fua = volatile_cache;
    append.lba = shape.LbaOf(write->page_number);
    append.lba_count = shape.blocks_per_page;
    append.buffer = *page;
    absl::Status status = storage::RunOne(device, append);
    if (status.ok()) status = MapAppendLanded(append, shape);
    NVKV_RETURN_IF_ERROR(segments.MapPageWritten(*write, status));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteMapAlone(SegmentTable& segments, const StoreShape& shape,
                           storage::Device& device, bool volatile_cache) {
  if (segments.map() != nullptr && segments.map()->dirty() && volatile_cache) {
    // What recovery read may sit in the device's volatile cache (the store was not closed, and
    // the device kept its power), and at Close the checkpoint's pages: durable first, so that
    // no map page written below names a summary, a free segment or a checkpoint that a power cut
    // could still take back.
    absl::Status flushed = storage::FlushDevice(device);
    if (!flushed.ok()) return flushed;
  }
  if (segments.map() != nullptr && shape.geometry.zoned()) {
    return AppendMapAlone(segments, shape, device, volatile_cache);
  }
  const storage::BufferLease chunk = storage::BufferLease::Chunk(device.buffers());
  NVKV_CHECK(chunk.valid());
  std::vector<SegmentMap::PageWrite> taken;  // in flight until the flush below
  PageRunWriter out(device, shape, *chunk, /*fua=*/false, shape.placement.metadata);
  // The map encodes a page before it says which page it is.
  std::vector<uint8_t> next(shape.geometry.page_bytes);
  while (out.ok()) {
    std::optional<SegmentMap::PageWrite> write = segments.TakeMapWrite(next.data());
    if (!write.has_value()) break;
    std::memcpy(out.Room(write->page_number), next.data(), next.size());
    taken.push_back(*write);
  }
  absl::Status status = out.Finish();
  if (status.ok() && volatile_cache) status = storage::FlushDevice(device);
  // Only now, flushed, are the pages on the device.
  absl::Status result;  // the first failure, as the map's write protocol words it
  for (const SegmentMap::PageWrite& write : taken) {
    result.Update(segments.MapPageWritten(write, status));
  }
  return taken.empty() ? status : result;
}

}  // namespace nvkv::kv
