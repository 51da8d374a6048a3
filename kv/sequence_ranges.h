// A set of record sequences, as sorted disjoint ranges: recovery's list of the records it
// dropped because their batch was cut short (by a crash, or by damage), which a page read must
// never take for its key's current record (page_lookup.cc). Such a record can share a page with
// the record recovery applied for its key, written before the batch began.
//
// Small by construction (one range per cut batch), written only while Open runs.
// Thread contract: not thread-safe; const calls may run concurrently once writes are done.
#ifndef NVKV_KV_SEQUENCE_RANGES_H_
#define NVKV_KV_SEQUENCE_RANGES_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kv/page_format.h"

namespace nvkv::kv {

class SequenceRanges {
 public:
  // Adds [first, last]; ranges that overlap or touch merge.
  void Add(uint64_t first, uint64_t last) {
    auto it = std::lower_bound(ranges_.begin(), ranges_.end(), first,
                               [](const Range& r, uint64_t s) { return r.last + 1 < s; });
    // `it` is the first range ending at or after first - 1: merge every range it touches.
    while (it != ranges_.end() && it->first <= last + 1) {
      first = std::min(first, it->first);
      last = std::max(last, it->last);
      it = ranges_.erase(it);
    }
    ranges_.insert(it, Range{first, last});
  }
  void AddAll(const SequenceRanges& other) {
    for (const Range& r : other.ranges_) Add(r.first, r.last);
  }

  bool Contains(uint64_t sequence) const {
    auto it = std::lower_bound(ranges_.begin(), ranges_.end(), sequence,
                               [](const Range& r, uint64_t s) { return r.last < s; });
    return it != ranges_.end() && it->first <= sequence;
  }
  bool empty() const { return ranges_.empty(); }
  // Whether the record `header` describes is one of the dropped batches' (the one rule every
  // reader of a page applies: a read, compaction, recovery over a base).
  bool DropsRecord(const RecordHeader& header) const {
    return (header.flags & kRecordInBatch) != 0 && Contains(header.sequence);
  }
  // Calls visit(first, last) for every range, in order.
  template <typename Visit>
  void ForEach(Visit visit) const {
    for (const Range& r : ranges_) visit(r.first, r.last);
  }
  size_t range_count() const { return ranges_.size(); }

 private:
  struct Range {
    uint64_t first, last;
  };
  std::vector<Range> ranges_;  // sorted, disjoint, not touching
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_SEQUENCE_RANGES_H_
