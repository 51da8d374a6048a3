// Reading a whole segment (SegmentBuffer), as recovery, compaction and `check` do, and what they
// do when a large read of a segment's pages fails (an I/O or media error).
//
// A failed read of many pages says nothing about which of them is bad: they are read again one
// at a time, and only those that still fail are unreadable. ScanSegment (segment_scan.h) is then
// given no bytes for them (page_at returns null) and treats each like a damaged page: a hole
// when the log goes on after it, so one bad block loses the records on its page, not the store.
#ifndef NVKV_KV_SEGMENT_READ_H_
#define NVKV_KV_SEGMENT_READ_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kv/page_format.h"
#include "kv/store_shape.h"
#include "kv/zone_places.h"
#include "storage/device.h"

namespace nvkv::kv {

// Page i of a segment read into `chunks` of `pages_per_chunk` pages each, or null when
// unreadable[i] (an empty `unreadable`: every page was read).
inline const uint8_t* PageInChunks(const std::vector<storage::Buffer>& chunks,
                                   uint32_t pages_per_chunk, uint32_t page_bytes,
                                   const std::vector<bool>& unreadable, uint32_t i) {
  if (!unreadable.empty() && unreadable[i]) return nullptr;
  return chunks[i / pages_per_chunk].data + size_t{i % pages_per_chunk} * page_bytes;
}

// Reads `page_count` pages from `first_lba` into `chunk` again, one page at a time, after a read
// of them all failed; sets unreadable[first_index + i] for each page i that fails again.
// Returns how many did. Other requests in flight on `queue` complete meanwhile.
uint32_t RereadPageByPage(storage::Device& queue, uint64_t first_lba, uint32_t page_count,
                          uint32_t blocks_per_page, uint32_t page_bytes,
                          const storage::Buffer& chunk, uint32_t first_index,
                          std::vector<bool>* unreadable);

// One segment's pages read into chunk buffers of a queue's pool, every chunk's read in flight
// at once. Pages the device cannot read are found by reading the failed chunks again a page at a
// time (RereadPageByPage); page(i) is null for them. The chunks go back to the pool with it.
//
// Use: Issue(segment), reap the queue until done(), then Settle(); or Read(segment) for all
// three. Thread contract: the queue's thread only.
class SegmentBuffer {
 public:
  // The number of chunks a segment of `geometry` needs from `pool`.
  static uint32_t ChunksFor(const Geometry& geometry, const storage::BufferPool& pool);
  // Takes the chunks from `queue`'s pool for segments of `shape`; kResourceExhausted when it
  // has too few free.
  static absl::StatusOr<std::unique_ptr<SegmentBuffer>> Make(storage::Device& queue,
                                                            const StoreShape& shape);
  ~SegmentBuffer();
  SegmentBuffer(const SegmentBuffer&) = delete;
  SegmentBuffer& operator=(const SegmentBuffer&) = delete;

  // Sends the reads of every page of `segment`. An error means the queue refused one: the reads
  // already sent still complete (reap until done()).
  absl::Status Issue(uint64_t segment);
  bool done() const { return pending_ == 0; }
  // After done(): reads the pages of failed chunks again one at a time. Returns how many pages
  // of the segment cannot be read (all of them: `status()` says why the first chunk failed).
  uint32_t Settle();
  // Issue, reap, Settle. An error only when the queue itself fails (nothing completes).
  absl::StatusOr<uint32_t> Read(uint64_t segment);

  uint64_t segment() const { return segment_; }
  const absl::Status& status() const { return status_; }  // the first failed chunk read's
  // Page i of the segment, or null when the device could not read it. On zones page i is the
  // one of position i, wherever it landed (kv/FORMAT.md "Page identity"): the verifying page
  // of the zone that says it is page i; zeros (never written) when none does or two do, and
  // null when none does and some page of the zone could not be read (it may have been that one).
  const uint8_t* page(uint32_t i) const {
    if (!geometry_.zoned()) return PageAt(i);
    const uint32_t place = place_of_[i];
    if (place == kNoPlace) return unreadable_.empty() ? zeros_.data() : nullptr;
    return place == kTwoPlaces ? zeros_.data() : PageAt(place);
  }
  // Zoned: where the positions found landed, as the place table keeps it (zone_places.h).
  std::vector<PlaceRun> PlaceRuns() const;

 private:
  static constexpr uint32_t kNoPlace = UINT32_MAX;
  static constexpr uint32_t kTwoPlaces = UINT32_MAX - 1;

  SegmentBuffer(storage::Device& queue, const StoreShape& shape);
  static void OnChunkRead(storage::IoRequest* request);
  // The page at place i of the segment (its i-th page as the device holds them), or null.
  const uint8_t* PageAt(uint32_t i) const {
    return PageInChunks(chunks_.buffers(), pages_per_chunk_, geometry_.page_bytes, unreadable_, i);
  }
  // Zoned: finds which position each page of the zone read claims (place_of_).
  void FindPositions();

  storage::Device& queue_;
  const Geometry geometry_;
  const uint64_t store_seed_;
  const uint32_t blocks_per_page_;
  uint32_t pages_per_chunk_ = 0;
  storage::ChunkLeases chunks_;
  std::vector<storage::IoRequest> requests_;  // one per chunk
  uint64_t segment_ = 0;
  uint32_t pending_ = 0;
  absl::Status status_;
  std::vector<bool> unreadable_;  // empty while every page read
  // Zoned: per position, the place of the one verifying page that claims it (kNoPlace: none,
  // kTwoPlaces: more than one), and a page of zeros.
  std::vector<uint32_t> place_of_;
  std::vector<uint8_t> zeros_;
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_SEGMENT_READ_H_
