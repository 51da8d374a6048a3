// Key filters: a segment's Bloom filter of the keys whose puts it holds (SegmentContents), and the
// shared blocks of memory the filters recovery makes are cut from.
#ifndef NVKV_KV_KEY_FILTER_H_
#define NVKV_KV_KEY_FILTER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "kv/key_hash.h"
#include "kv/zeroed_block.h"

namespace nvkv::kv {

// A Bloom filter of keys, of a power of two bits: `probes` bits per key, at (lo + i * step)
// modulo the size, so that folding (ORing the upper half into the lower) keeps every key's
// bits. A query stops at the first clear bit: mostly one memory access for a key not there.
class FilterBlocks;
class KeyFilter {
 public:
  KeyFilter(uint64_t words, uint32_t probes);  // empty, in memory of its own
  // The same, null when the system has no memory for it.
  static std::unique_ptr<KeyFilter> OwnOrNull(uint64_t words, uint32_t probes);
  // A filter of `words` words in `blocks`' memory, empty or holding `saved` words (the
  // checkpoint's); null when the system has no memory to give.
  static std::unique_ptr<KeyFilter> InBlocks(uint64_t words, uint32_t probes,
                                             FilterBlocks& blocks,
                                             const uint64_t* saved = nullptr);
  // Add may run beside MayContain (relaxed atomic words), but not beside another Add (the
  // thread filling the segment, under its shard's lock, or recovery); FoldTo beside neither.
  void Add(const KeyHash& hash);
  bool MayContain(const KeyHash& hash) const;
  void FoldTo(uint64_t words);  // a power of two; no-op unless smaller
  uint64_t words() const { return words_; }
  void CopyTo(std::vector<uint64_t>* words) const;  // its words (the checkpoint's)

 private:
  // Empty, in `own_bits` (`words` of them).
  KeyFilter(uint64_t words, uint32_t probes, std::unique_ptr<std::atomic<uint64_t>[]> own_bits);
  // InBlocks': `bits` in `block`, set to `saved` (zero when null).
  KeyFilter(uint64_t words, uint32_t probes, const uint64_t* saved, std::atomic<uint64_t>* bits,
            std::shared_ptr<ZeroedBlock> block);

  uint64_t words_;
  const uint32_t probes_;
  std::unique_ptr<std::atomic<uint64_t>[]> own_bits_;  // bits_ when they are its own
  std::shared_ptr<ZeroedBlock> shared_block_;  // the block bits_ lie in when in FilterBlocks'
  std::atomic<uint64_t>* bits_;
};
// Memory for the filters recovery makes, a thousand or more at once: blocks of 2 MiB or more
// that the filters in them share, each freed with the last of them, filled from the front and
// faulted in 256 KiB at a time (ZeroedBlock::Populate), instead of a heap allocation per filter
// and, on a fresh heap, a page fault per 4 KiB.
class FilterBlocks {
 public:
  // Room for `words` zeroed words, in the block `*block` is given a share of; null when the
  // system has no memory for a block they need.
  std::atomic<uint64_t>* Take(uint64_t words, std::shared_ptr<ZeroedBlock>* block);
  void Close() { block_.reset(); }  // no more filters: the block goes with its filters

 private:
  std::shared_ptr<ZeroedBlock> block_;
  uint64_t used_words_ = 0;
  uint64_t populated_words_ = 0;  // of block_, from its start
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_KEY_FILTER_H_
