// Page runs: writing many pages through one pool buffer, consecutive pages in one command
// (PageRunWriter), and reading scattered pages through one chunk, a chunk's worth in flight at
// once (ReadEachPage). The one mechanism for every writer of pages outside the log writer (a
// checkpoint, the segment map while the writer is not running, a store's growth, a large record)
// and for recovery's reads of single pages.
#ifndef NVKV_KV_PAGE_RUNS_H_
#define NVKV_KV_PAGE_RUNS_H_

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "kv/page_format.h"
#include "kv/store_shape.h"
#include "storage/buffer_pool.h"
#include "storage/base/status_macros.h"
#include "storage/device.h"

namespace nvkv::kv {

// Gathers pages in `buffer` (a chunk, or as little as one page buffer) and writes them through
// `device`, synchronously: consecutive pages as one write command of up to the buffer's size. A
// page that does not follow the ones gathered, or a full buffer, sends them first. Every write
// has FUA when `fua` and names placement handle `placement` (shape.placement's log or metadata).
// After a failure nothing more is written, and Finish returns it.
//
// On a zoned store (shape.places) the pages are positions of a zone's log: each run goes by Zone
// Append to its zone (as long as the device's append limit allows), and where it landed goes
// into the place table. One command at a time, so a writer alone in a zone lands its runs in
// order from the write pointer.
class PageRunWriter {
 public:
  // `buffer` must outlive the writer.
  PageRunWriter(storage::Device& device, const StoreShape& shape, const storage::Buffer& buffer,
                bool fua, uint8_t placement)
      : device_(device),
        shape_(shape),
        buffer_(buffer),
        capacity_(RunPages(device, shape, buffer)),
        fua_(fua),
        placement_(placement) {}
  PageRunWriter(const PageRunWriter&) = delete;
  PageRunWriter& operator=(const PageRunWriter&) = delete;

  // Where the bytes of page `page_number` go: the caller fills them before the next call.
  uint8_t* Room(uint64_t page_number) {
    if (pages_ == capacity_ || (pages_ > 0 && page_number != first_ + pages_)) WriteRun();
    if (pages_ == 0) first_ = page_number;
    return buffer_.data + size_t{pages_++} * shape_.geometry.page_bytes;
  }

  // False once a write failed (nothing more is written).
  bool ok() const { return status_.ok(); }
  // Writes the pages gathered; the first failure of any write.
  absl::Status Finish() {
    WriteRun();
    return status_;
  }

 private:
  // The pages one command carries: the buffer's, and on zones at most the append limit's.
  static uint32_t RunPages(const storage::Device& device, const StoreShape& shape,
                           const storage::Buffer& buffer) {
    uint32_t pages = buffer.bytes / shape.geometry.page_bytes;
    const storage::ZoneModel& zones = device.info().zones;
    if (shape.places != nullptr && zones.max_append_blocks != 0) {
      pages = std::min(pages, std::max<uint32_t>(1, zones.max_append_blocks /
                                                        shape.blocks_per_page));
    }
    return pages;
  }
  void WriteRun() {
    if (pages_ > 0 && status_.ok()) {
      if (shape_.places == nullptr) {
        status_ = storage::WriteBlocks(device_, shape_.LbaOf(first_),
                                       pages_ * shape_.blocks_per_page, buffer_, fua_,
                                       placement_);
      } else {
        status_ = AppendRun();
      }
    }
    pages_ = 0;
  }
  absl::Status AppendRun() {
    const Geometry& g = shape_.geometry;
    storage::IoRequest append;
    append.op = storage::IoOp::kZoneAppend;
    append.fua = fua_;
    append.placement = placement_;
    append.lba = shape_.LbaOf(g.FirstPageOf(g.SegmentOf(first_)));
    append.lba_count = pages_ * shape_.blocks_per_page;
    append.buffer = buffer_;
    append.buffer.bytes = pages_ * g.page_bytes;
    NVKV_RETURN_IF_ERROR(storage::RunOne(device_, append));
    return shape_.places->Landed(first_, pages_, append.appended_lba / shape_.blocks_per_page);
  }

  storage::Device& device_;
  const StoreShape& shape_;
  const storage::Buffer& buffer_;
  const uint32_t capacity_;  // pages the buffer holds
  const bool fua_;
  const uint8_t placement_;
  uint64_t first_ = 0;   // page number of the buffer's first page
  uint32_t pages_ = 0;   // pages gathered, not yet written
  absl::Status status_;
};

// Reads `pages` (one page each, where StoreShape::ReadLbaOf says) through one chunk of
// `device`'s pool, a chunk's worth in flight at once, and calls `visit(i, page, status)` for
// each in order (status: the page's read); stops at the first error `visit` returns, or the
// device's.
template <typename Visit>
absl::Status ReadEachPage(storage::Device& device, const StoreShape& shape,
                          const std::vector<uint64_t>& pages, Visit visit) {
  const storage::BufferLease lease = storage::BufferLease::Chunk(device.buffers());
  if (!lease.valid()) return absl::InternalError("no buffer to read pages into");
  const storage::Buffer& chunk = *lease;
  const uint32_t page_bytes = shape.geometry.page_bytes;
  const size_t per_chunk = chunk.bytes / page_bytes;
  absl::Status status;
  std::vector<storage::IoRequest> requests;
  for (size_t first = 0; first < pages.size() && status.ok(); first += per_chunk) {
    const size_t count = std::min(per_chunk, pages.size() - first);
    requests.assign(count, storage::IoRequest{});
    for (size_t i = 0; i < count; ++i) {
      storage::IoRequest& request = requests[i];
      request.op = storage::IoOp::kRead;
      request.lba = shape.ReadLbaOf(pages[first + i]);
      request.lba_count = shape.blocks_per_page;
      request.buffer = chunk;
      request.buffer.data = chunk.data + i * page_bytes;
      request.buffer.bytes = page_bytes;
    }
    status = storage::RunAll(device, requests);
    for (size_t i = 0; i < count && status.ok(); ++i) {
      status = visit(first + i, chunk.data + i * page_bytes, requests[i].status);
    }
  }
  return status;
}

// Where a large record's run of pages goes (HeadAppender::AppendLarge assigns it at the head):
// pages first_page.. of the store, first_in_segment.. of their segment, holding the log of
// `generation`, head counters first_counter...
struct LargeRun {
  uint64_t first_page = 0;
  uint32_t first_in_segment = 0;
  uint64_t generation = 0;
  uint64_t first_counter = 0;
  uint32_t pages = 0;  // LargeRecordPages of the record
};
// Writes a large record (`header`, which has kRecordLarge, `key`, `value`) into `run` through
// `queue`: a data page that starts it, continuation pages after, a chunk of them per command (a
// page when this thread's reads hold every chunk of its queue), each with FUA when `fua`.
absl::Status WriteLargeRun(storage::Device& queue, const StoreShape& shape, const LargeRun& run,
                           const RecordHeader& header, std::string_view key,
                           std::string_view value, bool fua);

}  // namespace nvkv::kv

#endif  // NVKV_KV_PAGE_RUNS_H_
