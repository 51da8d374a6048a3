#include "tests/testutil/device_io.h"

#include <cstring>
#include <span>

#include "storage/base/check.h"
#include "tests/testutil/block_pattern.h"

namespace nvkv::testing {
namespace {

// A page when the blocks fit one, else a chunk; checked, since a test without buffers is broken.
storage::Buffer Borrow(storage::BufferPool& pool, uint64_t bytes, bool* chunk) {
  *chunk = bytes > pool.page_bytes();
  storage::Buffer buffer = *chunk ? pool.GetChunk() : pool.GetPage();
  NVKV_CHECK(buffer.valid());
  NVKV_CHECK(bytes <= buffer.bytes);
  return buffer;
}

void Return(storage::BufferPool& pool, const storage::Buffer& buffer, bool chunk) {
  if (chunk) {
    pool.PutChunk(buffer);
  } else {
    pool.PutPage(buffer);
  }
}

}  // namespace

absl::Status WritePattern(storage::Device& device, uint64_t lba, uint32_t lba_count,
                          uint64_t seed, bool fua) {
  const uint64_t bytes = uint64_t{lba_count} * device.info().lba_bytes;
  bool chunk = false;
  storage::Buffer buffer = Borrow(device.buffers(), bytes, &chunk);
  FillPattern(buffer.data, bytes, seed);
  absl::Status status = storage::WriteBlocks(device, lba, lba_count, buffer, fua);
  Return(device.buffers(), buffer, chunk);
  return status;
}

absl::StatusOr<std::vector<uint8_t>> ReadBack(storage::Device& device, uint64_t lba,
                                              uint32_t lba_count) {
  const uint64_t bytes = uint64_t{lba_count} * device.info().lba_bytes;
  bool chunk = false;
  storage::Buffer buffer = Borrow(device.buffers(), bytes, &chunk);
  absl::Status status = storage::ReadBlocks(device, lba, lba_count, buffer);
  std::vector<uint8_t> data(buffer.data, buffer.data + bytes);
  Return(device.buffers(), buffer, chunk);
  if (!status.ok()) return status;
  return data;
}

storage::IoRequest MakeRequest(storage::IoOp op, uint64_t lba, uint32_t lba_count,
                               const storage::Buffer& buffer) {
  storage::IoRequest request;
  request.op = op;
  request.lba = lba;
  request.lba_count = lba_count;
  request.buffer = buffer;
  return request;
}

AsyncIo::AsyncIo(storage::Device& device, storage::IoOp op, uint64_t lba, uint32_t lba_count,
                 uint64_t seed, bool fua)
    : device_(&device) {
  const uint64_t bytes = uint64_t{lba_count} * device.info().lba_bytes;
  request_.op = op;
  request_.fua = fua;
  request_.lba = lba;
  request_.lba_count = lba_count;
  request_.on_done = OnDone;
  request_.context = this;
  if (op == storage::IoOp::kFlush) return;
  request_.buffer = Borrow(device.buffers(), bytes, &chunk_);
  if (op == storage::IoOp::kWrite || op == storage::IoOp::kZoneAppend) {
    FillPattern(request_.buffer.data, bytes, seed);
  } else {
    std::memset(request_.buffer.data, 0xAB, bytes);
  }
}

AsyncIo::~AsyncIo() {
  if (request_.buffer.valid()) Return(device_->buffers(), request_.buffer, chunk_);
}

std::vector<uint8_t> AsyncIo::Data(size_t bytes) const {
  return std::vector<uint8_t>(request_.buffer.data, request_.buffer.data + bytes);
}

void AsyncIo::OnDone(storage::IoRequest* request) {
  static_cast<AsyncIo*>(request->context)->done_ = true;
}

}  // namespace nvkv::testing
