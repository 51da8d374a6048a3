// Where recovery puts the records it reads (recovery_sink.h).
#include "kv/recovery_sink.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {
namespace {

NewestRecords::Record NewestOf(const FoundRecord& record) {
  NewestRecords::Record newest;
  newest.sequence = record.sequence;
  newest.page = record.page_number;
  newest.record_bytes = record.record_bytes;
  newest.is_delete = record.is_delete;
  return newest;
}

}  // namespace

RecordSink::RecordSink(const StoreShape& shape, SegmentTable& segments, const ShardSet& shards,
                       RecoveryBudget& budget, RecoveryBase& base, RecoveryReport& report)
    : shape_(shape),
      segments_(segments),
      shards_(shards),
      budget_(budget),
      base_(base),
      report_(report),
      newest_(shards.size()),
      min_seq_(shape.geometry.segment_count, UINT64_MAX),
      max_seq_(shape.geometry.segment_count, 0) {}

// One record recovery applies, found in `segment`. It waits in a short queue (noted_, a
// Lookahead) while the table slot it will probe is fetched, and is applied when the queue is
// full or by Flush, which the caller runs while its keys are still valid and before
// records of another segment are noted.
// A record of another pass's keys is noted in the first pass only (for the segment table).
void RecordSink::Add(uint64_t segment, const FoundRecord& record) {
  // A head's segment the base checkpoint knows up to its end of the log then: of those
  // records, the key filter only (RecoveryBase::LoadBase left the filter out).
  if (record.page_number < base_.tail_from(segment)) {
    if (pass() == 0 && !record.is_delete) {
      segments_.contents().NoteRestoredPut(segment, record.hash);
    }
    return;
  }
  const bool in_pass = budget_.PassOf(record.hash) == pass();
  if (!in_pass && pass() > 0) return;
  const uint32_t shard = shards_.For(record.hash).id;
  if (in_pass) newest_[shard].Prefetch(record.hash);
  noted_.Push(Noted{segment, shard, in_pass, record},
              [this](const Noted& noted) { Apply(noted); });
}

void RecordSink::Apply(const Noted& noted) {
  const uint64_t segment = noted.segment;
  const FoundRecord& record = noted.record;
  const KeyHash& hash = record.hash;
  const uint32_t shard = noted.shard;
  if (noted.in_pass) {
    NewestRecords::Record newest = NewestOf(record);
    if (shape_.ordered) newest.page = newest.record_bytes = 0;  // the index keeps them
    switch (newest_[shard].KeepIfNewer(hash, newest)) {
      case NewestRecords::Kept::kNewest:
        if (shape_.ordered) ApplyToOrderedIndex(shards_[shard], hash, record);
        break;
      case NewestRecords::Kept::kOlder:
        break;
      case NewestRecords::Kept::kRefused:
        if (refused_.ok()) {
          refused_ = absl::DataLossError(absl::StrCat(
              "page ", record.page_number, ": record sequence ", record.sequence,
              " is not below 2^56, which no nvkv store reaches"));
        }
        break;
      case NewestRecords::Kept::kNoMemory:
        // CheckBudget starts recovery again in more passes, when it can.
        budget_.TablesFailed(tables().bytes);
        if (refused_.ok()) {
          refused_ = absl::ResourceExhaustedError(absl::StrCat(
              "recovery: no memory to grow the table of newest records beyond ",
              newest_[shard].allocated_bytes(), " bytes (Options::recovery_memory_bytes reads "
              "the log in passes within less)"));
        }
        break;
    }
  }
  if (pass() == 0) {
    min_seq_[segment] = std::min(min_seq_[segment], record.sequence);
    max_seq_[segment] = std::max(max_seq_[segment], record.sequence);
    max_sequence_ = std::max(max_sequence_, record.sequence);
    segments_.contents().Note(segment, hash, record.sequence, record.record_bytes,
                              record.is_delete);
    ++report_.records;
  }
}

// Ordered mode: `record` is its key's newest so far: the key's entry says so (a delete removes
// it).
void RecordSink::ApplyToOrderedIndex(Shard& shard, const KeyHash& hash, const FoundRecord& record) {
  absl::MutexLock lock(&shard.mu);
  shard.index->Find(hash.lo, record.key, &found_);
  if (base_.over_base() && record.sequence < base_.next_sequence()) {
    // Over a base, a copy compaction made of an older record (ApplyTailHashed): a delete
    // hides nothing the base does not know of; a put counts only where the base holds no entry
    // of its key (which is the copy's original, or newer).
    if (record.is_delete || !found_.empty()) return;
  }
  if (record.is_delete) {
    if (!found_.empty()) shard.index->Erase(hash.lo, record.key, found_.front());
    return;
  }
  const uint64_t value =
      Location::Indexed(record.page_number, record.record_bytes, /*index_keeps_size=*/true)
          .index_value();
  if (found_.empty()) {
    const absl::Status inserted = shard.index->Insert(hash.lo, record.key, value);
    if (!inserted.ok() && refused_.ok()) refused_ = inserted;
  } else {
    shard.index->Replace(hash.lo, record.key, found_.front(), value);
  }
}

// After each pass, each shard's index entries of the pass's keys: hash mode builds them from
// the shard's table, which is freed before the next shard's are built; ordered mode has built
// them already.
absl::Status RecordSink::BuildPassIndexes() {
  for (const auto& shard : shards_) {
    NewestRecords& table = newest_[shard->id];
    report_.table_bytes_peak = std::max(report_.table_bytes_peak, table.allocated_bytes());
    absl::MutexLock lock(&shard->mu);
    if (shape_.ordered) {
      table.Clear();
    } else if (base_.over_base()) {
      NVKV_RETURN_IF_ERROR(ApplyTailHashed(*shard, table));
    } else {
      NVKV_RETURN_IF_ERROR(DrainHashed(*shard, table, budget_.passes() - pass()));
    }
  }
  return absl::OkStatus();
}

void RecordSink::AddLiveOfIndexes() {
  // Over a base checkpoint the index's entries are the live records, each with its size: counted
  // again, whatever the log after it replaced.
  if (base_.over_base()) segments_.ClearLiveBytes();
  for (const auto& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    shard->index->ForEachValue([&](uint64_t value) {
      const Location location = Location::FromIndexValue(value);
      segments_.AddLive(shape_.geometry.SegmentOf(location.page), location.record_bytes);
    });
  }
}

// Adds to `shard`'s index the newest record of each key of its table, then frees the table.
// `passes_left` counts this one: the passes after it will add about as many, so the index is
// sized once for them all.
absl::Status RecordSink::DrainHashed(Shard& shard, NewestRecords& table, uint32_t passes_left) {
  uint64_t live = 0;
  table.ForEach([&](uint64_t, const NewestRecords::Record& newest) {
    live += newest.is_delete ? 0 : 1;
  });
  // Each pass takes a random share of the keys: this one's count, taken for each pass to come,
  // errs by about passes_left * sqrt(live). Three times that more, so that a later pass hardly
  // ever has to grow the index (which briefly holds it twice).
  const uint64_t error =
      passes_left > 1 ? static_cast<uint64_t>(3 * std::sqrt(static_cast<double>(live)) + 1) : 0;
  shard.index->Reserve(shard.index->stats().entries + (live + error) * passes_left);
  absl::Status status;
  struct Live {
    uint64_t hash_lo = 0;
    NewestRecords::Record newest;
  };
  const auto insert = [&](const Live& live) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (!status.ok()) return;
    status = InsertLive(shard, live.hash_lo, live.newest.page, live.newest.record_bytes);
  };
  Lookahead<Live> queue;
  table.ForEach([&](uint64_t hash_lo, const NewestRecords::Record& newest)
                    ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (newest.is_delete) return;
    shard.index->Prefetch(hash_lo);
    queue.Push(Live{hash_lo, newest}, insert);
  });
  queue.Drain(insert);
  table.Clear();
  return status;
}

// Over a base checkpoint, hash mode: the newest record of each key of `shard`'s table that the
// log after the checkpoint holds (kv/FORMAT.md "Recovery from a base"):
//   - a record written after the checkpoint (its sequence at least the base's next one): a put
//     gets an entry of its own before any the key had (a blind overwrite, kv/README.md: the
//     older ones are stale), a delete erases every entry of the key;
//   - a copy compaction made of an older record: a delete hides nothing the base does not
//     know of (when it was its key's newest the base holds no entry of the key); a put gets
//     an entry only when none of the base's entries of the key holds it or a newer record
//     (compaction copied it from a segment freed since, or kept it where damage hid which of
//     the key's records was current).
// The base's entries of a key are found by reading the pages of its tag's entries; entries on
// pages of the log after the base are other keys' (two keys with one tag never share a page).
// A page that cannot be read, or an index that cannot grow, sets the base aside
// (base_failed_: recovery reads the log instead).
absl::Status RecordSink::ApplyTailHashed(Shard& shard, NewestRecords& table) {
  uint64_t puts = 0;
  table.ForEach([&](uint64_t, const NewestRecords::Record& newest) {
    puts += newest.is_delete ? 0 : 1;
  });
  const absl::Status room = shard.index->MakeRoomFor(puts);
  if (!room.ok()) {
    base_failed_ = absl::StrCat("the index cannot grow over the checkpoint: ", room.message());
    return absl::OkStatus();
  }
  std::vector<uint64_t> base_candidates;
  table.ForEach([&](uint64_t hash_lo, const NewestRecords::Record& newest)
                    ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (!base_failed_.empty()) return;
    const bool copy = newest.sequence < base_.next_sequence();
    if (copy && newest.is_delete) return;
    shard.index->Find(hash_lo, {}, &found_);
    if (!newest.is_delete && !copy) {
      InsertTailPut(shard, hash_lo, newest);
      return;
    }
    base_candidates.clear();
    for (const uint64_t candidate : found_) {
      if (base_.IsBasePage(Location::FromIndexValue(candidate).page)) {
        base_candidates.push_back(candidate);
      }
    }
    uint64_t erased = 0;
    std::optional<uint64_t> base_newest;  // the newest sequence of the key the base holds
    for (const uint64_t candidate : base_candidates) {
      const uint64_t page = Location::FromIndexValue(candidate).page;
      ++report_.pages;
      const absl::StatusOr<RecoveryBase::KeysRecord> found = base_.NewestOfKeyOn(page, hash_lo);
      if (!found.ok()) {
        base_failed_ = std::string(found.status().message());
        return;
      }
      if (!found->holds) continue;  // another key's with the same tag
      if (newest.is_delete) {
        shard.index->Erase(hash_lo, {}, candidate);
        segments_.AddLive(shape_.geometry.SegmentOf(page),
                          -static_cast<int64_t>(found->record_bytes));
        ++erased;
      } else {
        base_newest = std::max(base_newest.value_or(0), found->sequence);
      }
    }
    if (newest.is_delete) {
      if (erased > 1) shard.ErasedStale(erased - 1);
      return;
    }
    if (base_newest && *base_newest >= newest.sequence) return;  // the base holds it, or newer
    InsertTailPut(shard, hash_lo, newest);  // (found_ is still the tag's entries)
  });
  table.Clear();
  return absl::OkStatus();
}

// ApplyTailHashed: `newest`, a put, gets an entry before the key's others (found_ holds the
// tag's entries), which it probably makes stale.
void RecordSink::InsertTailPut(Shard& shard, uint64_t hash_lo,
                               const NewestRecords::Record& newest) {
  if (!found_.empty()) {
    const uint64_t first = Location::FromIndexValue(found_.front()).page;
    segments_.AddLikelyStale(shape_.geometry.SegmentOf(first), newest.record_bytes);
    ++shard.stale_entries;
  }
  const absl::Status inserted =
      InsertLive(shard, hash_lo, newest.page, newest.record_bytes);
  if (!inserted.ok()) {
    base_failed_ = absl::StrCat("the index cannot grow over the checkpoint: ",
                                inserted.message());
  }
}

// Adds one live key to `shard`'s index and its bytes to its segment's live bytes.
absl::Status RecordSink::InsertLive(Shard& shard, uint64_t hash_lo, uint64_t page,
                                    uint32_t record_bytes) {
  const Location location = shape_.IndexedAt(page, record_bytes);
  NVKV_RETURN_IF_ERROR(shard.index->Insert(hash_lo, {}, location.index_value()));
  segments_.AddLive(shape_.geometry.SegmentOf(page), record_bytes);
  return absl::OkStatus();
}

TableUse RecordSink::tables() const {
  TableUse use;
  for (const NewestRecords& table : newest_) {
    use.bytes += table.allocated_bytes();
    use.entries += table.size();
  }
  return use;
}

void RecordSink::ReserveTables(uint64_t keys) {
  for (NewestRecords& table : newest_) table.Reserve(keys / newest_.size());
}

void RecordSink::DropLaterPasses() {
  const auto later = [this](const KeyHash& hash) { return budget_.PassOf(hash) != 0; };
  for (NewestRecords& table : newest_) table.EraseIf(later);
  if (!shape_.ordered) return;
  for (const auto& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    std::vector<std::pair<std::string, uint64_t>> entries;
    std::string after;
    for (bool first = true;; first = false) {
      (void)shard->index->Scan(after, /*exclusive=*/!first, 4096, &entries);
      if (entries.empty()) break;
      for (const auto& [key, value] : entries) {
        const KeyHash hash = HashKey(key);
        if (later(hash)) shard->index->Erase(hash.lo, key, value);
      }
      after = entries.back().first;
    }
  }
}

}  // namespace nvkv::kv
