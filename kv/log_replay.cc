// The log replay of a recovery (log_replay.h).
#include "kv/log_replay.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {
namespace {

constexpr size_t kSampleSegments = 4;
constexpr size_t kSampleShare = 32;

// How many of the segments read whole the first pass projects their keys from: a
// kSampleShare-th of them, or none (0) under kSampleSegments * kSampleShare segments (a few
// segments say little of a small log, and growing tables or starting again cost little there).
size_t SampleOf(size_t segments) {
  return segments < kSampleSegments * kSampleShare ? 0 : segments / kSampleShare;
}
}  // namespace

LogReplay::LogReplay(const StoreShape& shape, storage::Device& device, SegmentTable& segments,
                     RecoveryBudget& budget, const RecoveryBase& base, RecordSink& sink,
                     RecoveryReport& report, std::vector<uint64_t> to_read,
                     std::vector<Summarized> summarized, const Floors& floors)
    : shape_(shape),
      g_(shape.geometry),
      device_(device),
      segments_(segments),
      budget_(budget),
      base_(base),
      sink_(sink),
      report_(report),
      to_read_(std::move(to_read)),
      summarized_(std::move(summarized)),
      in_use_(shape.geometry.segment_count, false),
      generation_(shape.geometry.segment_count, 0),
      summary_(shape.geometry.segment_count),
      floors_(floors) {
  std::sort(to_read_.begin(), to_read_.end());
}

void LogReplay::DropKept() {
  for (std::unique_ptr<SummaryBuilder>& kept : kept_) kept.reset();
  kept_bytes_ = 0;
}

uint64_t LogReplay::SummarizedRecords() const { return RecordsSummarized(shape_, summarized_); }

// Reads the summaries the map names (with each segment's last page, for a free marker newer
// than the summary), many in flight at once, and applies those that verify; the segment of
// any other is read whole instead (to_read_).
// The first pass reads the summaries the map names; a later one those the first used.
absl::Status LogReplay::ReadSummaries() {
  const std::vector<Summarized>& summaries = pass() == 0 ? summarized_ : used_;
  budget_.AddPassPages(SegmentsToReadThisPass().size() * g_.pages_per_segment);
  for (const Summarized& s : summaries) budget_.AddPassPages(s.place.pages + 1);
  if (summaries.empty()) return absl::OkStatus();
  // Room for this pass's share of the keys the summaries name, so that the tables do not grow
  // step by step as they fill.
  sink_.ReserveTables(RecordsSummarized(shape_, summaries) / budget_.passes());
  // Tables that will not fit are known before any summary is read.
  NVKV_RETURN_IF_ERROR(CheckBudget());
  storage::BufferPool& pool = device_.buffers();
  const storage::ChunkLeases chunks = storage::ChunkLeases::UpTo(pool, pool.chunk_count());
  if (chunks.empty()) return absl::InternalError("no buffer to read summaries into");
  const uint32_t pages_per_chunk = pool.chunk_bytes() / g_.page_bytes;
  absl::Status status;
  size_t next = 0;
  while (next < summaries.size() && status.ok()) {
    // As many summaries as the chunks take: the summary's pages, then the last page.
    struct Placed {
      Summarized summarized;
      const uint8_t* pages;  // summary pages, then the segment's last page
      size_t request;        // index of its first request (two per summary)
    };
    std::vector<Placed> placed;
    std::vector<storage::IoRequest> requests;
    uint32_t chunk = 0, used = 0;
    while (next < summaries.size()) {
      const Summarized& s = summaries[next];
      const uint32_t need = s.place.pages + 1;
      if (need > pages_per_chunk) {  // larger than a chunk: read the segment instead
        ReadWholeInstead(s);
        ++next;
        continue;
      }
      if (used + need > pages_per_chunk) {
        if (++chunk == chunks.size()) break;
        used = 0;
      }
      uint8_t* at = chunks[chunk].data + size_t{used} * g_.page_bytes;
      placed.push_back({s, at, requests.size()});
      // `count` pages from `page` into the chunk, `offset` pages after `at`.
      const auto read = [&](uint64_t page, uint32_t count, uint32_t offset) {
        storage::IoRequest& request = requests.emplace_back();
        request.op = storage::IoOp::kRead;
        request.lba = shape_.LbaOf(page);
        request.lba_count = count * shape_.blocks_per_page;
        request.buffer = chunks[chunk];
        request.buffer.data = at + size_t{offset} * g_.page_bytes;
        request.buffer.bytes = count * g_.page_bytes;
      };
      const uint64_t first_page = g_.FirstPageOf(s.segment);
      read(first_page + s.place.first, s.place.pages, 0);
      read(first_page + g_.pages_per_segment - 1, 1, s.place.pages);
      used += need;
      ++next;
    }
    status = storage::RunAll(device_, requests);
    for (const Placed& p : placed) {
      if (!status.ok()) break;
      const std::span<storage::IoRequest> its_reads(&requests[p.request], 2);
      bool read = its_reads[0].status.ok() && its_reads[1].status.ok();
      // The first pass read it: a read that fails now is tried again (a transient error), and
      // only a summary that reads otherwise makes this pass differ.
      for (uint32_t again = 0; !read && pass() > 0 && again < kRereadsInLaterPasses; ++again) {
        status = storage::RunAll(device_, its_reads);
        if (!status.ok()) break;
        read = its_reads[0].status.ok() && its_reads[1].status.ok();
      }
      if (!status.ok()) break;
      const bool applied = read && ApplySummary(p.summarized, p.pages);
      budget_.PagesApplied(p.summarized.place.pages + 1);
      if (applied) {
        if (pass() == 0) used_.push_back(p.summarized);
      } else if (pass() == 0) {
        ReadWholeInstead(p.summarized);
      } else {
        status = absl::UnavailableError(absl::StrCat(
            "segment ", p.summarized.segment, ": its summary verified in the first pass of "
            "recovery but not in pass ", pass() + 1, " (the device reads differently)"));
      }
    }
    if (status.ok()) status = CheckBudget();
  }
  if (!status.ok()) return status;
  std::sort(to_read_.begin(), to_read_.end());
  return absl::OkStatus();
}

// The first pass: summary `s` is not used, its segment is read whole instead.
void LogReplay::ReadWholeInstead(const Summarized& s) {
  ++report_.summaries_unused;
  to_read_.push_back(s.segment);
  budget_.AddPassPages(g_.pages_per_segment);
}

// Applies the records of `segment` that a summary gives (read, or kept by the first pass).
void LogReplay::ApplySummaryRecords(uint64_t segment, absl::Span<const SummaryRecord> records) {
  for (const SummaryRecord& record : records) {
    FoundRecord found;
    found.hash = record.hash;
    found.key = record.key;
    found.page_number = g_.FirstPageOf(segment) + record.page_in_segment;
    found.record_bytes = record.record_bytes;
    found.sequence = record.sequence;
    found.is_delete = record.is_delete;
    sink_.Add(segment, found);
  }
  sink_.Flush();  // while the keys are valid
}

// Applies one summary read with its segment's last page (`pages`); false when it does not
// verify, or the segment was freed after it was written: its segment is then read instead.
// Every pass applies its records; the first also notes what the summary says of its segment.
bool LogReplay::ApplySummary(const Summarized& summarized, const uint8_t* pages) {
  const uint64_t segment = summarized.segment;
  const SummaryPlace& place = summarized.place;
  const uint64_t last_page = g_.FirstPageOf(segment) + g_.pages_per_segment - 1;
  const absl::StatusOr<PageHeader> last =
      VerifyPage(pages + size_t{place.pages} * g_.page_bytes, g_, shape_.seed, last_page);
  // The last page holds nothing but free markers; never written, the segment was never freed.
  uint64_t freed_at = 0;
  if (last.ok() && last->type == static_cast<uint8_t>(PageType::kFree)) {
    freed_at = GenerationOf(*last);
  } else if (!absl::IsNotFound(last.status())) {
    return false;
  }
  // The entry count the summary's first page gives, to size the segment's key filter once it
  // is known to verify (when its records are visited).
  SummaryHeader peeked;
  std::memcpy(&peeked, pages + sizeof(PageHeader), sizeof(peeked));
  const absl::StatusOr<SummaryFound> found = ReadSummary(
      g_, shape_.seed, segment, place.first, place.pages, shape_.ordered,
      [&](uint32_t i) { return pages + size_t{i} * g_.page_bytes; },
      [&](absl::Span<const SummaryRecord> records) {
        if (!records.empty() && pass() == 0) {
          const absl::Status sized =
              segments_.contents().SizeRecoveredFilter(segment, peeked.entry_count);
          if (!sized.ok() && refused_.ok()) refused_ = sized;
        }
        ApplySummaryRecords(segment, records);
      },
      /*newer_than=*/freed_at);
  if (!found.ok()) return false;
  report_.pages += place.pages + 1;
  if (pass() > 0) return true;
  in_use_[segment] = true;
  generation_[segment] = found->generation;
  summary_[segment] = place;
  max_generation_ = std::max(max_generation_, found->generation);
  floors_.Raise(found->header.sequence_floor, found->header.generation_floor);
  ++report_.segments_summarized;
  return true;
}

// The places in to_read_ of the segments this pass reads: every one in the first; in a later
// pass only those where the first found records (an announced segment no head took, or a
// free one, adds nothing to any pass, and reading it whole again would cost a segment each).
// Nor those whose records the first pass kept (ScanRead).
std::vector<size_t> LogReplay::SegmentsToReadThisPass() const {
  std::vector<size_t> positions;
  for (size_t p = 0; p < to_read_.size(); ++p) {
    const bool kept = p < kept_.size() && kept_[p] != nullptr;
    if (pass() == 0 || (scanned_[p].records > 0 && !kept)) positions.push_back(p);
  }
  return positions;
}

// A later pass: applies the records the first kept of segments it read whole, as if read
// again.
absl::Status LogReplay::ApplyKeptRecords() {
  for (size_t p = 0; p < kept_.size(); ++p) {
    if (kept_[p] == nullptr) continue;
    const uint64_t segment = to_read_[p];
    NVKV_RETURN_IF_ERROR(kept_[p]->Visit(g_, [&](absl::Span<const SummaryRecord> records) {
      ApplySummaryRecords(segment, records);
    }));
  }
  return absl::OkStatus();
}

// Reads the segments of to_read_ this pass needs, several in flight at once (as many as the
// queue's chunks allow), and scans each in segment order as its reads complete.
absl::Status LogReplay::ReadSegments(GoOn go_on) {
  storage::BufferPool& pool = device_.buffers();
  const uint32_t chunks_per_segment = SegmentBuffer::ChunksFor(g_, pool);
  if (pool.chunk_count() < chunks_per_segment) {
    return absl::InvalidArgumentError(absl::StrCat("segments of ", g_.segment_bytes(),
                                                   " bytes are too large to recover"));
  }
  const uint32_t parallel = std::max<uint32_t>(1, pool.chunk_count() / chunks_per_segment);
  std::vector<std::unique_ptr<SegmentBuffer>> buffers;
  for (uint32_t b = 0; b < parallel; ++b) {
    NVKV_ASSIGN_OR_RETURN(std::unique_ptr<SegmentBuffer> buffer,
                          SegmentBuffer::Make(device_, shape_));
    buffers.push_back(std::move(buffer));
  }
  const std::vector<size_t> positions = SegmentsToReadThisPass();
  // The keys the tables hold already (the summaries'), and room for this pass's share of
  // those of the segments read whole, once a start given up has projected them.
  const uint64_t held_before = sink_.tables().entries;
  const uint64_t filters_before = segments_.contents().filter_bytes();
  if (budget_.whole_records() > 0 && !positions.empty()) {
    sink_.ReserveTables(held_before + budget_.whole_records() / budget_.passes());
    NVKV_RETURN_IF_ERROR(CheckBudget());
  }
  std::deque<SegmentBuffer*> in_flight;
  size_t next = 0;
  size_t scanned = 0;  // to_read_[positions[scanned]] is the next to scan
  while (next < positions.size() || !in_flight.empty()) {
    while (next < positions.size() && in_flight.size() < parallel) {
      SegmentBuffer* buffer = buffers[next % parallel].get();
      NVKV_RETURN_IF_ERROR(buffer->Issue(to_read_[positions[next++]]));
      in_flight.push_back(buffer);
    }
    SegmentBuffer& read = *in_flight.front();
    while (!read.done()) {
      NVKV_RETURN_IF_ERROR(device_.Reap(1).status());
    }
    NVKV_RETURN_IF_ERROR(ScanRead(read, positions[scanned++]));
    in_flight.pop_front();
    budget_.PagesApplied(g_.pages_per_segment);
    absl::Status budget = go_on(CheckBudget());
    if (budget.ok() && pass() == 0 && budget_.whole_records() == 0 &&
        scanned == SampleOf(positions.size())) {
      budget = ProjectWholeRecords(held_before, filters_before, scanned, positions.size(),
                                   go_on);
    }
    if (!budget.ok()) {
      // Recovery starts again on this queue: no read may still land in these buffers.
      for (SegmentBuffer* buffer : in_flight) {
        while (!buffer->done()) NVKV_RETURN_IF_ERROR(device_.Reap(1).status());
      }
      return budget;
    }
  }
  return absl::OkStatus();
}

// Scans one segment read whole into `read`, to_read_[position]. Every pass applies its
// records; the first notes what the scan says of the segment, and a later one checks that it
// found the same.
absl::Status LogReplay::ScanRead(SegmentBuffer& read, size_t position) {
  const uint64_t segment = read.segment();
  // With passes to come, the first keeps the records they apply (not its own keys'), as a
  // summary in memory, so that they need not read the segment again: within a quarter of the
  // tables' budget beside it (Open's peak is to stay within the index and a tenth of it), and
  // as long as the segment's would be a summary (MaxSummaryPages: not of small records).
  std::unique_ptr<SummaryBuilder> keep;
  if (pass() == 0 && budget_.passes() > 1 && kept_bytes_ < budget_.kept_limit()) {
    keep = std::make_unique<SummaryBuilder>();
    keep->Reset(shape_.ordered, g_);
  }
  // Pages the device cannot read are damaged ones (segment_read.h), unless none of the
  // segment can be read: then the device, not a block, is failing, and a store opened without
  // it would look empty there.
  uint32_t failed = read.Settle();
  // The first pass read more of it: a read that fails now is tried again (a transient error),
  // and only a segment that still reads otherwise makes this pass differ.
  for (uint32_t again = 0; pass() > 0 && failed > scanned_[position].unreadable_pages &&
                           again < kRereadsInLaterPasses;
       ++again) {
    NVKV_ASSIGN_OR_RETURN(failed, read.Read(segment));
  }
  // (Unless the device says the zone is offline: its pages are unread ones, whose records an Open
  // goes without only when degraded, as for any page it cannot read.)
  if (failed == g_.pages_per_segment) {
    if (!ZoneOffline(segment)) {
      return absl::Status(read.status().code(),
                          absl::StrCat("segment ", segment, ": no page of it can be read: ",
                                       read.status().message()));
    }
    unread_zone_offline_ = true;
  }
  const auto page_at = [&read](uint32_t i) { return read.page(i); };
  const SegmentScanResult scan = ScanSegment(
      g_, shape_.seed, segment, page_at, /*assemble=*/false,
      [&](const ScannedRecord& record) {
        FoundRecord found;
        found.hash = HashKey(record.key);
        found.key = record.key;
        found.page_number = record.page_number;
        found.record_bytes = RecordBytes(record.key.size(), record.header.value_bytes);
        found.sequence = record.header.sequence;
        found.is_delete = record.header.type == static_cast<uint8_t>(RecordType::kDelete);
        sink_.Add(segment, found);
        if (keep != nullptr && record.page_number >= base_.tail_from(segment) &&
            budget_.PassOf(found.hash) != 0) {
          keep->Add(found.hash, shape_.ordered ? record.key : std::string_view(),
                    record.header,
                    static_cast<uint32_t>(record.page_number - g_.FirstPageOf(segment)));
        }
      });
  sink_.Flush();  // while the keys are valid: the read's buffers are reused after this
  if (pass() == 0 && failed > 0) NoteUnread(read, scan);
  // On zones the records found are named by position: where those landed is the place table's.
  if (pass() == 0 && shape_.places != nullptr) shape_.places->Restore(segment, read.PlaceRuns());
  if (pass() == 0) {
    kept_.resize(to_read_.size());
    // (A segment with none to keep is kept too: a later pass has nothing to read there.)
    if (keep != nullptr && !keep->abandoned()) {
      const uint64_t bytes = keep->ShrinkToFit();
      if (kept_bytes_ + bytes <= budget_.kept_limit()) {
        kept_bytes_ += bytes;
        kept_[position] = std::move(keep);
      }
    }
  }
  report_.pages += g_.pages_per_segment;
  const ScanFacts facts{scan.in_use,    scan.generation,        scan.hole_pages,
                        scan.records,   scan.batches_discarded, failed};
  if (pass() > 0) {
    if (facts == scanned_[position]) return absl::OkStatus();
    return absl::UnavailableError(absl::StrCat(
        "segment ", segment, ": pass ", pass() + 1, " of recovery found its log other than the "
        "first did (the device reads differently)"));
  }
  scanned_.push_back(facts);
  const bool other_log = scan.in_use ? scan.generation != segments_.generation(segment)
                                      : base_.tail_from(segment) != g_.FirstPageOf(segment);
  if (base_.knows(segment) && other_log) {
    // A head's segment of the base checkpoint holds another log than the one it knew, though
    // its last page said nothing changed (damage where the log began). A head the checkpoint
    // names at its segment's first page had written nothing there: that segment may hold no
    // log still (a batch took it and was refused, and nothing was written after).
    base_failed_ = absl::StrCat("segment ", segment, " holds another log than the checkpoint's");
  }
  report_.unreadable_pages += failed;
  in_use_[segment] = scan.in_use;
  generation_[segment] = scan.generation;
  // A whole log that ends with its summary (written before a crash, but not yet in the map):
  // the map may say so from now on, once the summary verifies and accounts for every record.
  if (scan.in_use && scan.summary.pages > 0 && scan.hole_pages == 0 &&
      scan.batches_discarded == 0) {
    const absl::StatusOr<SummaryFound> found = ReadSummary(
        g_, shape_.seed, segment, scan.summary.first, scan.summary.pages,
        // An ordered Open names only summaries it could use itself (with keys).
        shape_.ordered, [&](uint32_t i) { return read.page(scan.summary.first + i); },
        [](absl::Span<const SummaryRecord>) {}, /*newer_than=*/0);
    if (found.ok() && found->generation == scan.generation &&
        found->header.entry_count == scan.records) {
      summary_[segment] = scan.summary;
    }
  }
  max_generation_ = std::max(max_generation_, scan.max_generation);
  // Sequences of pages outside every log count too: a new record must never lose to an old one
  // that a later recovery might read.
  max_sequence_ = std::max(max_sequence_, scan.max_sequence);
  report_.batches_discarded += scan.batches_discarded;
  if (base_.knows(segment)) {
    // Of a head's segment the base checkpoint knows, the batches written after it only: it
    // holds those before (which a hole found now would drop: their records read as damaged).
    scan.dropped.ForEach([&](uint64_t first, uint64_t last) {
      if (first >= base_.next_sequence()) report_.dropped_batch_records.Add(first, last);
    });
  } else {
    report_.dropped_batch_records.AddAll(scan.dropped);
  }
  report_.damaged_pages += scan.hole_pages;
  return absl::OkStatus();
}

// `read` has pages the device failed to read (twice). Unless the segment holds no log and its
// first page says so, or they are pages of the summary the map names (read whole because the
// summary could not be: its log's records are on the pages before), they may hold records:
// they are noted (RecoveryReport::unread_pages), and recovery goes on without their records,
// as it does past a damaged page. Without open_degraded UnreadRefusal then fails the Open, once
// the pass has found whether the recovery it is part of stands (over a base, a head's segment
// that cannot be read sets the base aside, and the log read instead may not need these pages).
void LogReplay::NoteUnread(const SegmentBuffer& read, const SegmentScanResult& scan) {
  const uint64_t segment = read.segment();
  if (!scan.in_use && read.page(0) != nullptr) return;
  uint32_t records_end = g_.pages_per_segment;
  for (const Summarized& s : summarized_) {
    if (s.segment == segment) records_end = s.place.first;
  }
  for (uint32_t i = 0; i < records_end; ++i) {
    if (read.page(i) != nullptr) continue;
    if (report_.unread_pages.empty()) unread_why_ = std::string(read.status().message());
    report_.unread_pages.push_back(g_.FirstPageOf(segment) + i);
  }
}

bool LogReplay::ZoneOffline(uint64_t segment) {
  if (!g_.zoned()) return false;
  const absl::StatusOr<storage::ZoneDescriptor> zone =
      storage::ReportZone(device_, kMetadataZones + segment);
  return zone.ok() && zone->state == storage::ZoneState::kOffline;
}

// Why an Open that is not degraded fails when pages of the log could not be read (NoteUnread):
// a read that fails now may work at the next Open, and an Open without their records would
// hand out their sequences again and leave their batches half there for compaction to find. (Of
// an offline zone they never read again: only a degraded Open goes on.)
absl::Status LogReplay::UnreadRefusal() const {
  const std::vector<uint64_t>& unread = report_.unread_pages;
  constexpr size_t kNamed = 8;
  std::string pages;
  for (size_t i = 0; i < std::min(unread.size(), kNamed); ++i) {
    absl::StrAppend(&pages, i == 0 ? "" : ", ", "page ", unread[i]);
  }
  if (unread.size() > kNamed) absl::StrAppend(&pages, " and ", unread.size() - kNamed, " more");
  const char* const how = unread_zone_offline_
                              ? "they lie in a zone the device took offline, which never reads "
                                "again: open with Options::open_degraded (nvkv-cli --degraded) "
                                "to go on without them"
                              : "open it again once the device reads them, or with "
                                "Options::open_degraded (nvkv-cli --degraded) to go on without "
                                "them";
  return absl::UnavailableError(absl::StrCat(
      pages, " of the log cannot be read (", unread_why_,
      "); the store does not open without their records: ", how));
}

// After the first pass: what it found of each segment, for the segment table.
void LogReplay::RecoverSegments() {
  for (uint64_t s = 0; s < g_.segment_count; ++s) {
    // What the base checkpoint knows of a segment stands, but for a head's log gone on since.
    if (base_.knows(s) && base_.tail_from(s) == 0) continue;
    SegmentTable::RecoveredSegment found;
    found.extends_restored = base_.knows(s);
    found.in_use = in_use_[s];
    found.generation = generation_[s];
    found.min_sequence = sink_.min_sequence(s);
    found.max_sequence = sink_.max_sequence(s);
    found.summary = summary_[s];
    segments_.RecoverSegment(s, found);
  }
}

// Segments read whole name their records only as they are read: pass 0 projects how many
// there are from the first few it read (SampleOf: a kSampleShare-th of them, when there are
// many), before the tables have grown far, and how large their key filters grow. `read` of the
// pass's `to_read` segments read whole are scanned; before the first, the tables held
// `held_before` keys and the key filters took `filters_before` bytes. PlanFor then decides
// (the next start plans for the projected records and filters); when the passes planned do,
// the tables take room for the projected keys now, instead of growing step by step.
absl::Status LogReplay::ProjectWholeRecords(uint64_t held_before, uint64_t filters_before,
                                            size_t read, size_t to_read, GoOn go_on) {
  uint64_t share = 0;
  const absl::Status planned = budget_.ProjectWholeRecords(
      held_before, filters_before, sink_.tables(),
      segments_.contents().filter_bytes(), read, to_read, &share);
  const uint64_t all_passes = share * budget_.passes();
  const absl::Status status = go_on(planned);
  if (status.ok()) sink_.ReserveTables(all_passes / budget_.passes());
  return status;
}

}  // namespace nvkv::kv
