// ZeroedBlock: zeroed memory for a large table (the hash index's slots, recovery's table of
// newest records, the key filters recovery makes). Small blocks come from the heap. Large ones
// are mapped from the system (from 2 MiB on, starting on a 2 MiB boundary) and, for a table
// filled at random, advised to use huge pages, so that filling them takes one page fault per
// 2 MiB instead of one per 4 KiB (each fault an exception: on a virtual machine a costly one),
// and random probes miss the TLB less. The advice is a hint: a system without transparent huge
// pages gives 4 KiB pages, zeroed as well. A block filled from the front instead takes 4 KiB
// pages (resident only as far as it is filled) and has them faulted in many at a time
// (Populate). Freed memory goes back to the system at once, so a table that grows leaves no hole
// in the heap behind.
//
// Thread contract: none (a value type; the owner serializes).
#ifndef NVKV_KV_ZEROED_BLOCK_H_
#define NVKV_KV_ZEROED_BLOCK_H_

#include <cstdint>

namespace nvkv::kv {

class ZeroedBlock {
 public:
  // Blocks of at least this many bytes are mapped, not taken from the heap.
  static constexpr uint64_t kMapBytes = uint64_t{16} << 10;

  ZeroedBlock() = default;
  ZeroedBlock(ZeroedBlock&& other) noexcept { *this = static_cast<ZeroedBlock&&>(other); }
  ZeroedBlock& operator=(ZeroedBlock&& other) noexcept;
  ZeroedBlock(const ZeroedBlock&) = delete;
  ZeroedBlock& operator=(const ZeroedBlock&) = delete;
  ~ZeroedBlock() { Free(); }

  enum class Pages : uint8_t {
    kHuge,   // a table filled at random: huge pages where large
    kSmall,  // a block filled from the front: 4 KiB pages, Populate ahead of the filling
  };
  // `bytes` (> 0) zeroed bytes, aligned to at least 16; an empty block (data() null) when the
  // system has no memory for them.
  static ZeroedBlock Allocate(uint64_t bytes, Pages pages = Pages::kHuge);

  // Makes the pages of bytes [from, from + count) resident in one system call, where faulting
  // them in one by one would take an exception each (MADV_POPULATE_WRITE, Linux 5.14; where the
  // system refuses it, they are faulted in as they are touched). Only a hint.
  void Populate(uint64_t from, uint64_t count);

  void* data() const { return data_; }
  uint64_t bytes() const { return bytes_; }

 private:
  void Free();

  void* data_ = nullptr;
  uint64_t bytes_ = 0;
  bool mapped_ = false;
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_ZEROED_BLOCK_H_
