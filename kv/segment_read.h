// Reading a segment whose pages the device cannot all read: what recovery, compaction and
// `check` do when a large read of a segment's pages fails (an I/O or media error).
//
// A failed read of many pages says nothing about which of them is bad: they are read again one
// at a time, and only those that still fail are unreadable. ScanSegment (segment_scan.h) is then
// given no bytes for them (page_at returns null) and treats each like a damaged page: a hole
// when the log goes on after it, so one bad block loses the records on its page, not the store.
#ifndef NVKV_KV_SEGMENT_READ_H_
#define NVKV_KV_SEGMENT_READ_H_

#include <cstdint>
#include <vector>

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

}  // namespace nvkv::kv

#endif  // NVKV_KV_SEGMENT_READ_H_
