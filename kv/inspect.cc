// Reading the whole store back: Engine::Impl::Check (every page, record and index entry) and
// Engine::Impl::ForEachLive (every live key and value, for dumps).
//
// Both read one segment at a time, whole, on a device queue opened for the call (the calling
// thread is its only issuer), and decode it with ScanSegment, as recovery and compaction do.
// Both hold a Compactor::Pause throughout: compaction moves live records from one segment to
// another, and a walk that let it run could meet a record twice (moved ahead of the walk) or not
// at all (moved behind it).
//
// Liveness is compaction's rule (compactor.h, head_append.cc Relocate): a put is live when
// recovery would apply it (segment_scan.h CollectNewestRecords: not in a batch cut short), it is
// the newest record of its key on its page, and the index still has the key at that page
// (ordered mode: at that page with that record size, Location::Indexed) as its current entry
// (hash mode: no entry before it is the key's, key_entries.h).
#include <algorithm>
#include <array>
#include <cinttypes>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kv/engine_impl.h"
#include "kv/key_entries.h"
#include "kv/metadata_zones.h"
#include "kv/segment_read.h"
#include "kv/segment_scan.h"
#include "kv/segment_summary.h"
#include "storage/base/check.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {
namespace {

// Keys per MultiGet when Check reads live keys back.
constexpr size_t kCheckGetBatch = 256;
// Key bytes shown in a problem line; longer keys are cut.
constexpr size_t kShownKeyBytes = 64;

// ----- Reading whole segments -----

// One segment's pages in chunk buffers of a queue of its own. Not thread-safe: the thread that
// calls Open is the queue's only issuer.
class SegmentReader {
 public:
  static absl::StatusOr<std::unique_ptr<SegmentReader>> Open(Engine::Impl& engine) {
    const Geometry& g = engine.shape().geometry;
    // Chunks are kMaxRegisteredBytes rounded down to whole pages (buffer_pool.cc).
    const uint32_t pages_per_chunk = storage::kMaxRegisteredBytes / g.page_bytes;
    const uint32_t chunk_count = (g.pages_per_segment + pages_per_chunk - 1) / pages_per_chunk;
    storage::QueueOptions options;
    options.queue_depth = chunk_count + 2;
    options.buffers.buffer_bytes = g.page_bytes;
    options.buffers.buffer_count = 2;  // single pages: superblocks, pages the index points at
    options.buffers.chunk_count = chunk_count;
    NVKV_ASSIGN_OR_RETURN(std::unique_ptr<storage::Device> queue,
                          engine.OpenQueue(QueueKind::kCheck, options));
    auto reader = std::unique_ptr<SegmentReader>(new SegmentReader(engine, std::move(queue)));
    NVKV_ASSIGN_OR_RETURN(reader->segment_,
                          SegmentBuffer::Make(*reader->queue_, engine.shape()));
    reader->page_buffer_ = reader->queue_->buffers().GetPage();
    NVKV_CHECK(reader->page_buffer_.valid());
    return reader;
  }

  ~SegmentReader() {
    segment_.reset();
    queue_->buffers().PutPage(page_buffer_);
  }

  // Reads every page of `segment`, all chunks in flight together. Fails only when no page of
  // it can be read (the device fails, not a block) or the queue broke.
  absl::Status Read(uint64_t segment) {
    NVKV_ASSIGN_OR_RETURN(const uint32_t failed, segment_->Read(segment));
    return failed == engine_.shape().geometry.pages_per_segment ? segment_->status()
                                                                 : absl::OkStatus();
  }

  // Page i of the segment last read, or null when the device could not read it.
  const uint8_t* page(uint32_t i) const { return segment_->page(i); }

  storage::Device& queue() { return *queue_; }
  // The buffer ReadPage reads into (one page), for other reads of single pages.
  const storage::Buffer& page_buffer() const { return page_buffer_; }

  // Reads one page of the store; the bytes stay valid until the next ReadPage.
  absl::StatusOr<const uint8_t*> ReadPage(uint64_t page_number) {
    absl::Status status = storage::ReadBlocks(*queue_, engine_.shape().ReadLbaOf(page_number),
                                              engine_.shape().blocks_per_page, page_buffer_);
    if (!status.ok()) return status;
    return page_buffer_.data;
  }

 private:
  SegmentReader(Engine::Impl& engine, std::unique_ptr<storage::Device> queue)
      : engine_(engine), queue_(std::move(queue)) {}

  Engine::Impl& engine_;
  std::unique_ptr<storage::Device> queue_;
  std::unique_ptr<SegmentBuffer> segment_;  // its chunks are queue_'s
  storage::Buffer page_buffer_;
};

// ----- Live records -----

void CollectRecords(const Engine::Impl& engine, const SegmentReader& reader, uint64_t segment,
                    SegmentRecords* out) {
  CollectNewestRecords(engine.shape().geometry, engine.shape().seed, segment,
                       [&reader](uint32_t i) { return reader.page(i); }, out);
}

// The index entry that points at `record` when it is its key's current one.
Location LocationOf(const Engine::Impl& engine, const ScannedRecord& record) {
  return engine.shape().IndexedAt(record.page_number,
                          RecordBytes(record.key.size(), record.header.value_bytes));
}

// Whether `record` is a put its key's index entry points at, and, in hash mode, whether that
// entry is the key's current one (key_entries.h), reading the pages of the entries before it
// through `reader` where nothing in memory answers. An entry after a damaged candidate counts
// as current: nothing proves it stale.
EntryStanding StandingOf(Engine::Impl& engine, SegmentReader& reader,
                         const ScannedRecord& record) {
  if (record.header.type != static_cast<uint8_t>(RecordType::kPut)) {
    return EntryStanding::kNotIndexed;
  }
  const KeyHash hash = HashKey(record.key);
  Shard& shard = engine.shards().For(hash);
  if (engine.shape().ordered) {
    absl::MutexLock lock(&shard.mu);
    return shard.IndexPointsAt(hash, record.key, LocationOf(engine, record))
               ? EntryStanding::kCurrent
               : EntryStanding::kNotIndexed;
  }
  const PageSource source = [&](uint64_t page_number) -> const uint8_t* {
    absl::StatusOr<const uint8_t*> page = reader.ReadPage(page_number);
    if (!page.ok()) return nullptr;
    absl::StatusOr<PageHeader> header =
        VerifyPage(*page, engine.shape().geometry, engine.shape().seed, page_number);
    if (!header.ok() || header->type != static_cast<uint8_t>(PageType::kData)) return nullptr;
    return *page;
  };
  absl::StatusOr<EntryStanding> standing =
      kv::StandingOf(shard, hash, record.key, record.page_number, source);
  return standing.ok() ? *standing : EntryStanding::kUnknown;
}

bool IsLive(EntryStanding standing) {
  return standing == EntryStanding::kCurrent || standing == EntryStanding::kUnknown;
}

// ----- Describing places and keys -----

std::string Where(const Engine::Impl& engine, uint64_t page_number) {
  const Geometry& g = engine.shape().geometry;
  if (page_number < kSuperblockPages) {
    return absl::StrFormat("superblock copy %d (page %d, LBA 0x%x)", page_number, page_number,
                           engine.shape().ReadLbaOf(page_number));
  }
  if (page_number >= g.map_first_page()) {
    return absl::StrFormat("segment map page %d (page %d, LBA 0x%x)",
                           page_number - g.map_first_page(), page_number,
                           engine.shape().ReadLbaOf(page_number));
  }
  return absl::StrFormat("segment %d page %d (page %d, LBA 0x%x)", g.SegmentOf(page_number),
                         g.PageInSegment(page_number), page_number,
                         engine.shape().ReadLbaOf(page_number));
}

// Printable ASCII as is, anything else as \xHH; cut after kShownKeyBytes.
std::string ShowKey(std::string_view key) {
  std::string out = "\"";
  for (size_t i = 0; i < key.size() && i < kShownKeyBytes; ++i) {
    const unsigned char c = static_cast<unsigned char>(key[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    }
  }
  out += '"';
  if (key.size() > kShownKeyBytes) absl::StrAppend(&out, "... (", key.size(), " bytes)");
  return out;
}

// ----- Check -----

uint64_t IndexEntries(Engine::Impl& engine) {
  uint64_t entries = 0;
  for (auto& shard : engine.shards()) {
    absl::MutexLock lock(&shard->mu);
    entries += shard->index->stats().entries;
  }
  return entries;
}

class Checker {
 public:
  Checker(Engine::Impl& engine, SegmentReader& reader, CheckReport* report)
      : engine_(engine), g_(engine.shape().geometry), reader_(reader), report_(*report) {}

  void Problem(std::string line) {
    ++problem_count_;
    if (report_.problems.size() < CheckReport::kMaxProblems) {
      report_.problems.push_back(std::move(line));
    }
  }

  void Finish() {
    if (problem_count_ > report_.problems.size()) {
      report_.problems.push_back(absl::StrCat(problem_count_ - report_.problems.size(),
                                              " more problems not listed"));
    }
  }

  void CheckSuperblocks();
  void CheckSegment(uint64_t segment);
  // After every segment: the segment map's pages, and its rule (FORMAT.md "Segment map"): no
  // segment holding a log is free in the map on the device.
  void CheckSegmentMap();
  // Zoned, after every segment: the zones' states against the logs found (a note of how many
  // are in each state and active; a free segment's zone that holds data is a note, as Open
  // resets it).
  void CheckZones();
  void CheckIndexCoverage(uint64_t entries);

 private:
  // CheckSuperblocks and CheckSegmentMap on zones: the metadata zones' first pages and logs.
  void CheckZoneSuperblocks();
  void CheckMapZones();
  // The map rule for the entries of one map page, `index`.
  void CheckMapEntries(uint64_t index, const SegmentMapEntry* entries);
  void ClassifyPages(uint64_t segment, const SegmentScanResult& scan);
  void CheckLiveRecords(uint64_t segment, const SegmentRecords& segment_records);
  // A whole log that ends with a summary: the summary must name exactly the log's records, in
  // order, as recovery takes them from it instead of the segment.
  void CheckSummary(uint64_t segment, const SegmentScanResult& scan);
  // Page `page_number` of `segment` (just read) when it is a verified data page, else null.
  const uint8_t* SegmentPage(uint64_t segment, uint64_t page_number) const;

  Engine::Impl& engine_;
  const Geometry& g_;
  SegmentReader& reader_;
  CheckReport& report_;
  uint64_t problem_count_ = 0;
  uint64_t live_found_ = 0;
  // Hash mode: index entries that point at a page holding their key, current or stale
  // (key_entries.h).
  uint64_t matched_entries_ = 0;
  // Ordered mode: the keys whose index entry a live record matched, for CheckIndexCoverage.
  absl::flat_hash_set<KeyHash> matched_keys_;
  // The generation of the log each segment holds (0: none), for CheckSegmentMap.
  std::vector<uint64_t> log_generation_ = std::vector<uint64_t>(g_.segment_count, 0);
  // Zoned: the metadata zones as CheckZoneSuperblocks found them.
  std::array<storage::ZoneDescriptor, kMetadataZones> metadata_zones_{};
  bool metadata_zones_read_ = false;
};

void Checker::CheckSuperblocks() {
  if (g_.zoned()) {
    CheckZoneSuperblocks();
    return;
  }
  report_.pages_scanned += kSuperblockPages;
  for (uint64_t copy = 0; copy < kSuperblockPages; ++copy) {
    std::string fault;
    absl::StatusOr<const uint8_t*> page = reader_.ReadPage(copy);
    if (!page.ok()) {
      fault = absl::StrCat("read failed: ", page.status().message());
    } else if (absl::StatusOr<Superblock> superblock = DecodeSuperblock(*page, g_.page_bytes);
               !superblock.ok()) {
      fault = std::string(superblock.status().message());
    } else {
      const Geometry geometry = GeometryOf(*superblock);
      if (geometry.page_bytes != g_.page_bytes ||
          geometry.pages_per_segment != g_.pages_per_segment ||
          geometry.segment_count != g_.segment_count ||
          StoreSeed(superblock->store_id) != engine_.shape().seed || superblock->copy != copy) {
        fault = "describes another store, or another copy, than this one";
      }
    }
    if (fault.empty()) {
      ++report_.pages_valid;
    } else {
      ++report_.pages_unreadable;
      Problem(absl::StrCat(Where(engine_, copy), ": ", fault));
    }
  }
}

// Sorts every page of the segment into one CheckReport bucket and reports each hole in its log
// (segment_scan.h): a damaged page with more of the log after it.
void Checker::ClassifyPages(uint64_t segment, const SegmentScanResult& scan) {
  const uint32_t pages = g_.pages_per_segment;
  const uint64_t first_page = g_.FirstPageOf(segment);
  std::vector<bool> in_hole(pages, false);
  for (const SegmentHole& hole : scan.holes) {
    for (uint32_t i = 0; i < hole.page_count; ++i) in_hole[hole.first_page + i] = true;
    Problem(absl::StrCat(
        Where(engine_, first_page + hole.first_page), ": ", hole.reason,
        hole.page_count > 1 ? absl::StrCat(" (and the ", hole.page_count - 1, " pages after it)")
                            : std::string(),
        "; a hole in the log of generation ", scan.generation,
        ": its records are lost, recovery reads the rest of the segment"));
  }
  if (scan.in_use) {
    log_generation_[segment] = scan.generation;
    ++report_.segments_in_use;
    report_.records += scan.records;
    if (scan.torn_tail) ++report_.torn_tails;  // the log's last write, cut short
    if (absl::StrContains(scan.stop_reason, "runs past")) {
      Problem(absl::StrCat("segment ", segment, ": ", scan.stop_reason));
    }
  }
  for (uint32_t i = 0; i < pages; ++i) {
    if (in_hole[i]) {
      ++report_.pages_in_holes;
      continue;
    }
    if (i < scan.log_pages) {
      ++report_.pages_valid;
      continue;
    }
    if (reader_.page(i) == nullptr) {
      ++report_.pages_unreadable;
      Problem(absl::StrCat(Where(engine_, first_page + i),
                           ": unreadable (the device failed to read it), after the log's end"));
      continue;
    }
    absl::StatusOr<PageHeader> h =
        VerifyPage(reader_.page(i), g_, engine_.shape().seed, first_page + i);
    if (h.ok()) {
      ++report_.pages_stale;
    } else if (absl::IsNotFound(h.status())) {
      ++report_.pages_unwritten;
    } else {
      ++report_.pages_unreadable;
    }
  }
}

// Reads every live record's key back through the read path and compares the value.
const uint8_t* Checker::SegmentPage(uint64_t segment, uint64_t page_number) const {
  const uint8_t* page = reader_.page(static_cast<uint32_t>(page_number - g_.FirstPageOf(segment)));
  if (page == nullptr) return nullptr;
  absl::StatusOr<PageHeader> header = VerifyPage(page, g_, engine_.shape().seed, page_number);
  return header.ok() && header->type == static_cast<uint8_t>(PageType::kData) ? page : nullptr;
}

void Checker::CheckLiveRecords(uint64_t segment, const SegmentRecords& segment_records) {
  std::vector<const ScannedRecord*> live;
  // Records are the newest of their key on each page: a key may have several in one segment.
  absl::flat_hash_set<std::string_view> keys_matched;
  for (const ScannedRecord& record : segment_records.records) {
    if (IsLive(StandingOf(engine_, reader_, record))) live.push_back(&record);
    if (!engine_.shape().ordered && record.header.type == static_cast<uint8_t>(RecordType::kPut) &&
        keys_matched.insert(record.key).second) {
      // Every entry of the key into this segment, current or stale, matches a record.
      matched_entries_ += EntriesInSegment(engine_.shards().For(HashKey(record.key)),
                                           HashKey(record.key), record.key, g_, segment,
                                           [this, segment](uint64_t page_number) {
                                             return SegmentPage(segment, page_number);
                                           })
                              .size();
    }
  }
  live_found_ += live.size();
  for (size_t begin = 0; begin < live.size(); begin += kCheckGetBatch) {
    const size_t end = std::min(live.size(), begin + kCheckGetBatch);
    std::vector<std::string_view> keys;
    for (size_t i = begin; i < end; ++i) keys.push_back(live[i]->key);
    std::vector<absl::StatusOr<std::string>> values;
    engine_.reads().MultiGet(keys, &values);
    for (size_t i = begin; i < end; ++i) {
      const ScannedRecord& record = *live[i];
      const absl::StatusOr<std::string>& value = values[i - begin];
      ++report_.live_keys_checked;
      if (engine_.shape().ordered) matched_keys_.insert(HashKey(record.key));
      if (value.ok() && *value == record.value) continue;
      // A write may have replaced the key since its segment was read: only a key whose index
      // entry still points at this record has a problem.
      if (!IsLive(StandingOf(engine_, reader_, record))) continue;
      const std::string what =
          value.ok() ? "the read path returns a different value than the log holds"
                     : absl::StrCat("cannot be read: ", value.status().message());
      Problem(absl::StrCat("key ", ShowKey(record.key), " in ",
                           Where(engine_, record.page_number), ": ", what));
    }
  }
}

void Checker::CheckSegment(uint64_t segment) {
  // In a zone the device took out of service, holding nothing the store needs: not read (an
  // offline zone cannot be), and CheckZones notes it.
  if (engine_.segments().state(segment) == SegmentState::kRetired) return;
  ++report_.segments_scanned;
  report_.pages_scanned += g_.pages_per_segment;
  absl::Status read = reader_.Read(segment);
  if (!read.ok()) {
    Problem(absl::StrCat("segment ", segment, " (pages ", g_.FirstPageOf(segment), "..",
                         g_.FirstPageOf(segment) + g_.pages_per_segment - 1,
                         "): read failed: ", read.message()));
    report_.pages_unreadable += g_.pages_per_segment;
    return;
  }
  SegmentRecords records;
  CollectRecords(engine_, reader_, segment, &records);
  ClassifyPages(segment, records.scan);
  CheckLiveRecords(segment, records);
  CheckSummary(segment, records.scan);
}

void Checker::CheckSummary(uint64_t segment, const SegmentScanResult& scan) {
  // A log with holes lost records its summary still names: the holes are the problem.
  if (!scan.in_use || scan.summary.pages == 0 || scan.hole_pages > 0 ||
      scan.batches_discarded > 0) {
    return;
  }
  struct Named {
    KeyHash hash;
    uint64_t sequence = 0;
    uint32_t page_in_segment = 0;
    uint32_t record_bytes = 0;
    bool is_delete = false;
    bool operator==(const Named&) const = default;
  };
  std::vector<Named> in_log, in_summary;
  ScanSegment(g_, engine_.shape().seed, segment, [this](uint32_t i) { return reader_.page(i); },
              /*assemble_large_values=*/false, [&](const ScannedRecord& r) {
                in_log.push_back({HashKey(r.key), r.header.sequence, r.page_index,
                                  RecordBytes(r.key.size(), r.header.value_bytes),
                                  r.header.type == static_cast<uint8_t>(RecordType::kDelete)});
              });
  const SummaryPlace& place = scan.summary;
  const absl::StatusOr<SummaryFound> found = ReadSummary(
      g_, engine_.shape().seed, segment, place.first, place.pages, /*with_keys=*/false,
      [&](uint32_t i) { return reader_.page(place.first + i); },
      [&](absl::Span<const SummaryRecord> records) {
        for (const SummaryRecord& r : records) {
          in_summary.push_back(
              {r.hash, r.sequence, r.page_in_segment, r.record_bytes, r.is_delete});
        }
      },
      /*newer_than=*/0);
  const std::string where = absl::StrCat(
      "segment ", segment, "'s summary (", Where(engine_, g_.FirstPageOf(segment) + place.first),
      ", ", place.pages, " pages)");
  if (!found.ok()) {
    Problem(absl::StrCat(where, ": ", found.status().message(),
                         "; recovery reads the segment instead"));
    return;
  }
  if (in_summary.size() != in_log.size()) {
    Problem(absl::StrCat(where, " names ", in_summary.size(), " records where the log holds ",
                         in_log.size(), ": recovery would find another state than the log"));
    return;
  }
  for (size_t i = 0; i < in_log.size(); ++i) {
    if (in_summary[i] == in_log[i]) continue;
    Problem(absl::StrCat(where, ": entry ", i, " (sequence ", in_summary[i].sequence, ", page ",
                         in_summary[i].page_in_segment, ") is not the log's record there (",
                         "sequence ", in_log[i].sequence, ", page ", in_log[i].page_in_segment,
                         "): recovery would find another state than the log"));
    return;
  }
}

void Checker::CheckZoneSuperblocks() {
  absl::StatusOr<ZoneSuperblocks> found =
      ReadZoneSuperblocks(reader_.queue(), reader_.page_buffer());
  if (!found.ok()) {
    Problem(absl::StrCat("the metadata zones' superblocks: ", found.status().message()));
    return;
  }
  metadata_zones_ = found->zones;
  metadata_zones_read_ = true;
  for (uint32_t z = 0; z < kMetadataZones; ++z) {
    ++report_.pages_scanned;
    const absl::StatusOr<Superblock>& copy = found->copies[z];
    std::string fault;
    if (!copy.ok()) {
      fault = std::string(copy.status().message());
    } else if (found->closing[z]) {
      fault = "does not decode; the zone's closing copy (among its last pages) serves";
    } else if (GeometryOf(*copy).segment_count != g_.segment_count ||
               StoreSeed(copy->store_id) != engine_.shape().seed || copy->copy != z) {
      fault = "describes another store, or another copy, than this one";
    }
    if (fault.empty()) {
      ++report_.pages_valid;
    } else {
      ++report_.pages_unreadable;
      Problem(absl::StrCat("superblock copy ", z, " (the first page of metadata zone ", z, "): ",
                           fault, "; the next Open for writing writes it again"));
    }
  }
}

void Checker::CheckMapZones() {
  if (!metadata_zones_read_) return;  // CheckZoneSuperblocks said why
  std::vector<bool> found(g_.map_pages(), false);
  uint64_t newest = 0;
  absl::StatusOr<MetadataZonesRead> read = ReadMetadataZones(
      reader_.queue(), g_, engine_.shape().seed, engine_.shape().blocks_per_page,
      metadata_zones_, reader_.page_buffer(),
      [&](uint64_t index, const SegmentMapPageHeader&, const SegmentMapEntry* entries,
          uint64_t) {
        found[index] = true;
        ++newest;
        CheckMapEntries(index, entries);
      });
  if (!read.ok()) {
    Problem(absl::StrCat("the segment map's zones: ", read.status().message()));
    return;
  }
  report_.pages_scanned += read->pages_found + read->unusable_pages;
  report_.pages_valid += newest;
  report_.pages_stale += read->pages_found - newest;  // older copies
  report_.pages_unreadable += read->unusable_pages;
  if (read->damaged_pages > 0) {
    Problem(absl::StrCat(read->damaged_pages, " pages of the segment map's zones fail to read or "
                         "verify: the map says nothing, and recovery reads every segment"));
    return;
  }
  // Appends a cut lost below a write pointer (zeros): older copies serve (a note).
  if (read->unusable_pages > 0) {
    report_.notes.push_back(absl::StrCat(read->unusable_pages,
                                         " pages of the segment map's zones were never written "
                                         "(a cut lost their appends); older copies serve"));
  }
  for (uint64_t index = 0; index < found.size(); ++index) {
    if (!found[index]) {
      Problem(absl::StrCat("segment map page ", index, ": no copy in the metadata zones; "
                           "recovery reads every segment it describes"));
    }
  }
  if (!read->holds_every_page) {
    Problem(absl::StrCat("metadata zone ", read->current, " is current but lacks a copy of some "
                         "map page (a move cut short: the next Open completes it)"));
  }
}

void Checker::CheckMapEntries(uint64_t index, const SegmentMapEntry* entries) {
  const uint32_t per_page = MapEntriesPerPage(g_.page_bytes);
  const uint64_t first = index * per_page;
  for (uint64_t s = first; s < std::min<uint64_t>(g_.segment_count, first + per_page); ++s) {
    if (log_generation_[s] != 0 &&
        entries[s - first].state == static_cast<uint8_t>(MapState::kFree)) {
      Problem(absl::StrCat("segment ", s, " holds the log of generation ", log_generation_[s],
                           ", but the segment map says it is free: recovery would not read "
                           "it"));
    }
  }
}

void Checker::CheckZones() {
  absl::StatusOr<std::vector<storage::ZoneDescriptor>> zones =
      storage::ReportAllZones(reader_.queue());
  if (!zones.ok()) {
    Problem(absl::StrCat("zone report failed: ", zones.status().message()));
    return;
  }
  uint64_t empty = 0, open = 0, closed = 0, full = 0, other = 0;
  for (const storage::ZoneDescriptor& zone : *zones) {
    switch (zone.state) {
      case storage::ZoneState::kEmpty: ++empty; break;
      case storage::ZoneState::kImplicitlyOpen:
      case storage::ZoneState::kExplicitlyOpen: ++open; break;
      case storage::ZoneState::kClosed: ++closed; break;
      case storage::ZoneState::kFull: ++full; break;
      default: ++other; break;
    }
  }
  const storage::ZoneModel& model = engine_.device_info().zones;
  const uint32_t active_limit = model.max_active != 0 ? model.max_active : model.max_open;
  report_.notes.push_back(absl::StrCat(
      "zones: ", empty, " empty, ", open, " open, ", closed, " closed, ", full, " full",
      other > 0 ? absl::StrCat(", ", other, " read-only or offline") : std::string(), "; ",
      open + closed, " active",
      active_limit != 0 ? absl::StrCat(" of the ", active_limit, " the device keeps")
                        : std::string()));
  uint64_t retired = 0;
  for (uint64_t s = 0; s < g_.segment_count; ++s) {
    const storage::ZoneDescriptor& zone = (*zones)[kMetadataZones + s];
    if (storage::OutOfService(zone.state)) {
      if (engine_.segments().state(s) == SegmentState::kRetired) {
        ++retired;
      } else if (zone.state == storage::ZoneState::kReadOnly) {
        report_.notes.push_back(absl::StrCat(
            "segment ", s, ": its zone is read-only: its records are read until compaction "
            "moves them out, and it is then retired"));
      } else {
        Problem(absl::StrCat("segment ", s, ": its zone is offline, and the store holds it in use"));
      }
    } else if (log_generation_[s] == 0 && zone.state != storage::ZoneState::kEmpty &&
               engine_.segments().state(s) == SegmentState::kFree) {
      report_.notes.push_back(absl::StrCat("segment ", s, " is free but its zone holds data (",
                                           storage::ZoneStateName(zone.state),
                                           "): the next Open resets it"));
    }
  }
  if (retired > 0) {
    report_.notes.push_back(absl::StrCat(retired, " segments retired: their zones are read-only "
                                         "or offline, and the store never writes them again"));
  }
}

void Checker::CheckSegmentMap() {
  if (g_.zoned()) {
    CheckMapZones();
    return;
  }
  for (uint64_t index = 0; index < g_.map_pages(); ++index) {
    const uint64_t page_number = g_.map_first_page() + index;
    ++report_.pages_scanned;
    absl::StatusOr<const uint8_t*> page = reader_.ReadPage(page_number);
    const SegmentMapEntry* entries = nullptr;
    absl::Status fault = page.status();
    if (fault.ok()) {
      fault = DecodeMapPage(*page, g_, engine_.shape().seed, page_number, &entries).status();
    }
    if (!fault.ok()) {
      ++report_.pages_unreadable;
      Problem(absl::StrCat(Where(engine_, page_number), ": ", fault.message(),
                           "; recovery reads every segment it describes"));
      continue;
    }
    ++report_.pages_valid;
    CheckMapEntries(index, entries);
  }
}

// Every index entry must have been matched by a record of some valid part: a live record in
// ordered mode; in hash mode a page holding the entry's key, current or stale. No entry is
// matched twice (the ordered index holds one location per key; a hash-index entry is a (tag,
// page) pair and a page never holds two keys with one tag), so the counts are equal exactly when
// every entry resolves.
void Checker::CheckIndexCoverage(uint64_t entries) {
  const uint64_t matched = engine_.shape().ordered ? live_found_ : matched_entries_;
  if (entries == matched) return;
  if (!engine_.shape().ordered) {
    Problem(absl::StrCat("the index holds ", entries, " entries but the log holds ", matched,
                         " records they point at: ", entries > matched ? entries - matched : 0,
                         " index entries point at pages without their record (the hash index "
                         "holds no keys to name them; open the store in ordered mode to see "
                         "which)"));
    return;
  }
  for (auto& shard : engine_.shards()) {
    std::string cursor;
    bool exclusive = false;
    for (;;) {
      std::vector<std::pair<std::string, uint64_t>> batch;
      {
        absl::MutexLock lock(&shard->mu);
        absl::Status status = shard->index->Scan(cursor, exclusive, 1024, &batch);
        if (!status.ok()) {
          Problem(absl::StrCat("index scan failed: ", status.message()));
          return;
        }
      }
      if (batch.empty()) break;
      for (const auto& [key, location] : batch) {
        if (matched_keys_.contains(HashKey(key))) continue;
        const uint64_t page_number = Location::FromIndexValue(location).page;
        std::string why;
        absl::StatusOr<const uint8_t*> page = reader_.ReadPage(page_number);
        absl::StatusOr<PageHeader> header = absl::UnknownError("");
        if (!page.ok()) {
          why = absl::StrCat("read failed: ", page.status().message());
        } else if (header = VerifyPage(*page, g_, engine_.shape().seed, page_number);
                   !header.ok()) {
          why = PageFault(header.status());
        } else if (header->type != static_cast<uint8_t>(PageType::kData) ||
                   !FindRecord(*page, *header, key).ok()) {
          why = "the page holds no record of the key";
        } else {
          why = "the page holds the record but lies beyond the valid part of its segment's log";
        }
        Problem(absl::StrCat("index entry of key ", ShowKey(key), " points at ",
                             Where(engine_, page_number), ": ", why));
      }
      cursor = batch.back().first;
      exclusive = true;
    }
  }
}

}  // namespace

absl::StatusOr<CheckReport> Engine::Impl::Check(const ProgressCallback& progress) {
  absl::Status open = CheckOpen();
  if (!open.ok()) return open;
  CheckReport report;
  // Put everything written so far on the device, so that the log read back is the index's.
  if (error_.failed()) {
    report.notes.push_back(absl::StrCat("writes are refused since a device write failed (",
                                        error_.status().message(),
                                        "); pages not yet written are not checked"));
  } else if (absl::Status flushed = Flush(); !flushed.ok()) {
    report.notes.push_back(absl::StrCat("flush before the check failed: ", flushed.message()));
  }
  std::optional<Compactor::Pause> no_cleaning;  // none runs in a read-only store
  if (compactor_ != nullptr) no_cleaning.emplace(*compactor_);
  absl::StatusOr<std::unique_ptr<SegmentReader>> reader = SegmentReader::Open(*this);
  if (!reader.ok()) return reader.status();
  Checker checker(*this, **reader, &report);
  const uint64_t writes_before = index_writes();  // writes that change the index
  checker.CheckSuperblocks();
  const uint64_t segment_count = shape_.geometry.segment_count;
  for (uint64_t segment = 0; segment < segment_count; ++segment) {
    checker.CheckSegment(segment);
    if (progress) progress(segment + 1, segment_count);
  }
  checker.CheckSegmentMap();
  if (shape_.geometry.zoned()) checker.CheckZones();
  const uint64_t entries = IndexEntries(*this);
  if (index_writes() != writes_before) {
    report.notes.push_back(
        "writes ran during the check: index entries were not compared with the log");
  } else {
    checker.CheckIndexCoverage(entries);
  }
  checker.Finish();
  return report;
}

absl::Status Engine::Impl::ForEachLive(
    const std::function<absl::Status(std::string_view key, std::string_view value)>& visit,
    const ProgressCallback& progress) {
  absl::Status open = CheckOpen();
  if (!open.ok()) return open;
  // Pages still in memory are not on the device yet.
  if (error_.failed()) return error_.status();
  absl::Status flushed = Flush();
  if (!flushed.ok()) return flushed;
  std::optional<Compactor::Pause> no_cleaning;  // none runs in a read-only store
  if (compactor_ != nullptr) no_cleaning.emplace(*compactor_);
  absl::StatusOr<std::unique_ptr<SegmentReader>> reader = SegmentReader::Open(*this);
  if (!reader.ok()) return reader.status();
  const uint64_t segment_count = shape_.geometry.segment_count;
  SegmentRecords records;
  for (uint64_t segment = 0; segment < segment_count; ++segment) {
    // Out of service, holding nothing live (an offline one cannot be read at all).
    if (segments_->state(segment) == SegmentState::kRetired) continue;
    absl::Status read = (*reader)->Read(segment);
    if (!read.ok()) {
      return absl::Status(read.code(),
                          absl::StrCat("segment ", segment, ": read failed: ", read.message()));
    }
    CollectRecords(*this, **reader, segment, &records);
    for (const ScannedRecord& record : records.records) {
      if (!IsLive(StandingOf(*this, **reader, record))) continue;
      absl::Status status = visit(record.key, record.value);
      if (!status.ok()) return status;
    }
    if (progress) progress(segment + 1, segment_count);
  }
  return absl::OkStatus();
}

}  // namespace nvkv::kv
