// NewestRecords: while recovery scans the log, the newest record seen so far of every key, known by
// the key's hash alone (hash mode keeps no key bytes; ordered mode keeps the keys in its index and
// here only each key's newest sequence, to tell whether a record replaces what it holds). It holds
// every key of a shard at once, beside the index being built, so it is made small: 24 bytes per
// entry, where a hash map of the 128-bit hash to the record took a 32-byte slot.
//
// Entry (three uint64_t; an empty slot is all zero):
//
//   lo        hash.lo
//   sequence  bits 0..55 the record's sequence (> 0), bits 56..63 check bits 0..7
//   packed    page (bits 0..30) | is_delete (31) | record bytes (32..52) | check bits 8..18
//
// Which key an entry is: hash.lo, hash.hi's bits 0..3 choose one of kPartitions sub-tables, and
// hash.hi's bits 4..13 and 23..31 are the 19 check bits kept in the entry (kHiBitsKept: recovery
// tells its passes' keys apart by bits 23..31): 87 bits compared, on top of the
// shard (the top bits of hash.hi). Two keys of one shard agreeing in all 87 would be taken for
// one (the older one lost); with n keys in a shard that happens with probability about
// n^2 / 2^88: 3e-9 at a billion keys.
//
// Sequences must be below 2^56 to fit (KeepIfNewer refuses others): nvkv writes one per record,
// so that is 228 years at ten million records a second.
//
// Sub-tables: each is an open-addressing table with linear probing, home = fastrange of the top
// 32 bits of hash.lo, maximum load 7/8, growing by 1.25x. Growing one sub-table copies 1/16 of
// a shard's entries, so the table never holds two copies of itself, as one big table would
// while it grows (2-3x its size). Slot arrays are ZeroedBlocks: large ones are mapped from the
// system in huge pages and unmapped when replaced, leaving no holes in the heap. At 7/8
// before and 0.7 after a growth, an entry costs 27-34 bytes per key.
//
// Thread contract: not thread-safe.
#ifndef NVKV_KV_NEWEST_RECORDS_H_
#define NVKV_KV_NEWEST_RECORDS_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "kv/key_hash.h"
#include "kv/zeroed_block.h"

namespace nvkv::kv {

class NewestRecords {
 public:
  struct Record {
    uint64_t sequence = 0;      // in [1, kSequenceLimit)
    uint64_t page = 0;          // < kPageLimit
    uint32_t record_bytes = 0;  // < kRecordBytesLimit
    bool is_delete = false;
  };
  static constexpr uint64_t kSequenceLimit = uint64_t{1} << 56;
  static constexpr uint64_t kPageLimit = uint64_t{1} << 31;
  static constexpr uint32_t kRecordBytesLimit = uint32_t{1} << 21;
  static constexpr uint32_t kPartitions = 16;

  NewestRecords() = default;
  NewestRecords(NewestRecords&&) = default;
  NewestRecords& operator=(NewestRecords&&) = default;

  enum class Kept : uint8_t {
    kNewest,   // `record` is now the key's newest
    kOlder,    // the key's newest held has an equal or higher sequence: nothing changed
    kRefused,  // record.sequence is not in [1, kSequenceLimit): nothing kept
    kNoMemory,  // the table had to grow and the system had no memory for it: nothing kept
  };
  // Keeps `record` as `hash`'s newest unless one with an equal or higher sequence is held
  // (equal sequences are one record copied by compaction: either copy will do).
  // REQUIRES: record.page < kPageLimit, record.record_bytes < kRecordBytesLimit.
  Kept KeepIfNewer(const KeyHash& hash, const Record& record);

  // Asks the CPU to fetch the slot where KeepIfNewer(hash, ...) will start probing, so that a
  // caller that knows its next keys early can overlap their memory accesses.
  void Prefetch(const KeyHash& hash) const {
    const Partition& partition = partitions_[hash.hi & (kPartitions - 1)];
    if (partition.slots.capacity > 0) {
      __builtin_prefetch(partition.slots.data + Home(hash.lo, partition.slots.capacity), 1);
    }
  }

  // Calls visit(hash_lo, record) for every key held, in no particular order.
  template <typename Visit>
  void ForEach(Visit visit) const {
    for (const Partition& partition : partitions_) {
      for (uint64_t i = 0; i < partition.slots.capacity; ++i) {
        const Entry& entry = partition.slots.data[i];
        if (entry.sequence != 0) visit(entry.lo, Unpack(entry));
      }
    }
  }

  // Drops every key `doomed(hash)` is true of, then shrinks the sub-tables to what is left
  // (where the system has memory for the smaller ones). `hash` holds what an entry keeps of its
  // key's hash: hash.lo, and the bits kHiBitsKept of hash.hi (the rest 0).
  template <typename Doomed>
  void EraseIf(Doomed doomed) {
    for (uint32_t p = 0; p < kPartitions; ++p) {
      Partition& partition = partitions_[p];
      // (EraseAt may move a later entry into slot i, which is then looked at again.)
      for (uint64_t i = 0; i < partition.slots.capacity;) {
        const Entry& entry = partition.slots.data[i];
        if (entry.sequence != 0 && doomed(HashOf(entry, p))) {
          EraseAt(partition, i);
        } else {
          ++i;
        }
      }
      Shrink(partition);
    }
  }
  // The bits of hash.hi an entry keeps: 0..3 (the sub-table) and the check bits, 4..13 and
  // 23..31.
  static constexpr uint64_t kHiBitsKept = 0xff80'3fff;

  // Makes room for about `keys` keys in all, so that holding them needs no growth (each growth
  // copies a sub-table). An estimate: more keys still fit, fewer leave the room unused. Only a
  // hint: without memory for it the table stays as it is (KeepIfNewer then says kNoMemory).
  void Reserve(uint64_t keys);
  // The bytes a table of nothing but Reserve(keys) allocates (allocated_bytes then).
  static uint64_t BytesFor(uint64_t keys);

  uint64_t size() const { return size_; }
  // Bytes of the slot arrays.
  uint64_t allocated_bytes() const;
  // Frees everything.
  void Clear();

 private:
  struct Entry {
    uint64_t lo = 0;
    uint64_t sequence = 0;
    uint64_t packed = 0;
  };
  static_assert(sizeof(Entry) == 24);

  // A zeroed array of entries (ZeroedBlock: huge pages where large); data null when the system
  // had no memory for it.
  struct SlotArray {
    SlotArray() = default;
    explicit SlotArray(uint64_t capacity);

    ZeroedBlock block;
    Entry* data = nullptr;
    uint64_t capacity = 0;
  };

  struct Partition {
    SlotArray slots;
    uint64_t size = 0;
  };

  static Entry Pack(const KeyHash& hash, const Record& record);
  // What `entry` (in sub-table `partition`) keeps of its key's hash (EraseIf).
  static KeyHash HashOf(const Entry& entry, uint32_t partition);
  // Empties slot `i` of `partition`, moving back the entries after it whose probes passed it.
  void EraseAt(Partition& partition, uint64_t i);
  // Moves `partition` into as few slots as hold its entries at the most load; unchanged when
  // the system has no memory for them.
  static void Shrink(Partition& partition);
  static Record Unpack(const Entry& entry);
  static bool SameKey(const Entry& entry, const Entry& probe);
  static uint64_t Home(uint64_t lo, uint64_t capacity) { return ((lo >> 32) * capacity) >> 32; }
  // Moves `partition` into `capacity` slots (more than it holds); false, and `partition` as it
  // was, when the system has no memory for them.
  static bool Resize(Partition& partition, uint64_t capacity);

  std::vector<Partition> partitions_ = std::vector<Partition>(kPartitions);
  uint64_t size_ = 0;
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_NEWEST_RECORDS_H_
