#include "kv/segment_read.h"

#include "absl/strings/str_cat.h"
#include "storage/base/check.h"

namespace nvkv::kv {

uint32_t RereadPageByPage(storage::Device& queue, uint64_t first_lba, uint32_t page_count,
                          uint32_t blocks_per_page, uint32_t page_bytes,
                          const storage::Buffer& chunk, uint32_t first_index,
                          std::vector<bool>* unreadable) {
  NVKV_CHECK(uint64_t{page_count} * page_bytes <= chunk.bytes);
  NVKV_CHECK(first_index + page_count <= unreadable->size());
  uint32_t failed = 0;
  for (uint32_t i = 0; i < page_count; ++i) {
    // A page of the chunk: the same registered buffer, at the page's offset.
    storage::Buffer page = chunk;
    page.data = chunk.data + size_t{i} * page_bytes;
    page.bytes = page_bytes;
    const uint64_t lba = first_lba + uint64_t{i} * blocks_per_page;
    const absl::Status read = storage::ReadBlocks(queue, lba, blocks_per_page, page);
    if (!read.ok()) {
      (*unreadable)[first_index + i] = true;
      ++failed;
    }
  }
  return failed;
}

uint32_t SegmentBuffer::ChunksFor(const Geometry& geometry, const storage::BufferPool& pool) {
  const uint32_t pages_per_chunk = pool.chunk_bytes() / geometry.page_bytes;
  return (geometry.pages_per_segment + pages_per_chunk - 1) / pages_per_chunk;
}

SegmentBuffer::SegmentBuffer(storage::Device& queue, const StoreShape& shape)
    : queue_(queue),
      geometry_(shape.geometry),
      store_seed_(shape.seed),
      blocks_per_page_(shape.blocks_per_page) {
  if (geometry_.zoned()) zeros_.assign(geometry_.page_bytes, 0);
}

absl::StatusOr<std::unique_ptr<SegmentBuffer>> SegmentBuffer::Make(storage::Device& queue,
                                                                  const StoreShape& shape) {
  const Geometry& geometry = shape.geometry;
  storage::BufferPool& pool = queue.buffers();
  auto buffer = std::unique_ptr<SegmentBuffer>(new SegmentBuffer(queue, shape));
  buffer->pages_per_chunk_ = pool.chunk_bytes() / geometry.page_bytes;
  const uint32_t chunk_count = ChunksFor(geometry, pool);
  buffer->chunks_ = storage::ChunkLeases::UpTo(pool, chunk_count);
  if (buffer->chunks_.size() < chunk_count) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "segments of ", geometry.segment_bytes(), " bytes need ", chunk_count,
        " read buffers of ", pool.chunk_bytes(), " bytes; ", buffer->chunks_.size(), " are free"));
  }
  buffer->requests_.resize(chunk_count);
  return buffer;
}

SegmentBuffer::~SegmentBuffer() {
  // Reads still out (the queue broke): the kernel may yet write into the chunks, so they stay
  // out of the pool.
  if (pending_ == 0) return;
  chunks_.Abandon();
}

void SegmentBuffer::OnChunkRead(storage::IoRequest* request) {
  auto* buffer = static_cast<SegmentBuffer*>(request->context);
  if (!request->status.ok() && buffer->status_.ok()) buffer->status_ = request->status;
  --buffer->pending_;
}

absl::Status SegmentBuffer::Issue(uint64_t segment) {
  NVKV_CHECK(pending_ == 0);
  segment_ = segment;
  status_ = absl::OkStatus();
  unreadable_.clear();
  for (uint32_t c = 0; c < chunks_.size(); ++c) {
    const uint32_t first = c * pages_per_chunk_;
    const uint32_t count = std::min(pages_per_chunk_, geometry_.pages_per_segment - first);
    storage::IoRequest& request = requests_[c];
    request = storage::IoRequest{};
    request.op = storage::IoOp::kRead;
    request.lba = (geometry_.FirstPageOf(segment) + first) * blocks_per_page_;
    request.lba_count = count * blocks_per_page_;
    request.buffer = chunks_[c];
    request.on_done = OnChunkRead;
    request.context = this;
    absl::Status status = queue_.Enqueue(&request);
    if (!status.ok()) return status;
    ++pending_;
  }
  return absl::OkStatus();
}

uint32_t SegmentBuffer::Settle() {
  NVKV_CHECK(pending_ == 0);
  uint32_t failed = 0;
  if (!status_.ok()) {
    unreadable_.assign(geometry_.pages_per_segment, false);
    for (uint32_t c = 0; c < chunks_.size(); ++c) {
      const storage::IoRequest& request = requests_[c];
      if (request.status.ok()) continue;
      failed += RereadPageByPage(queue_, request.lba, request.lba_count / blocks_per_page_,
                                 blocks_per_page_, geometry_.page_bytes, chunks_[c],
                                 c * pages_per_chunk_, &unreadable_);
    }
  }
  if (geometry_.zoned()) FindPositions();
  return failed;
}

void SegmentBuffer::FindPositions() {
  const uint32_t pages = geometry_.pages_per_segment;
  place_of_.assign(pages, kNoPlace);
  for (uint32_t place = 0; place < pages; ++place) {
    const uint8_t* data = PageAt(place);
    if (data == nullptr) continue;
    const absl::StatusOr<PageHeader> header =
        VerifyZonePage(data, geometry_, store_seed_, segment_);
    if (!header.ok() || header->page_in_segment >= pages) continue;
    uint32_t& claimed = place_of_[header->page_in_segment];
    claimed = claimed == kNoPlace ? place : kTwoPlaces;
  }
}

std::vector<PlaceRun> SegmentBuffer::PlaceRuns() const {
  std::vector<std::pair<uint32_t, uint32_t>> landed;
  for (uint32_t position = 0; position < place_of_.size(); ++position) {
    if (place_of_[position] < kTwoPlaces) landed.emplace_back(position, place_of_[position]);
  }
  return RunsFromPlaces(std::move(landed));
}

absl::StatusOr<uint32_t> SegmentBuffer::Read(uint64_t segment) {
  absl::Status issued = Issue(segment);
  while (pending_ > 0) {
    absl::StatusOr<uint32_t> reaped = queue_.Reap(1);
    if (!reaped.ok()) return reaped.status();  // the queue is broken: nothing more completes
  }
  if (!issued.ok()) return issued;
  return Settle();
}

}  // namespace nvkv::kv
