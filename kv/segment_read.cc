#include "kv/segment_read.h"

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

}  // namespace nvkv::kv
