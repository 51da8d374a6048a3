#include "kv/newest_records.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "kv/page_format.h"
#include "storage/base/check.h"

namespace nvkv::kv {
namespace {

// Entry::sequence: the sequence in bits 0..55, check bits 0..7 above.
constexpr int kSequenceCheckShift = 56;
// Entry::packed: page in bits 0..30, is_delete in bit 31, record bytes in bits 32..52, check bits
// 8..18 in 53..63.
constexpr int kDeleteShift = 31;
constexpr int kBytesShift = 32;
constexpr int kPackedCheckShift = 53;
constexpr int kCheckBits = 19;
constexpr int kCheckFirstBit = 4;  // hash.hi bits 0..3 choose the partition
// The check bits: hash.hi bits 4..13 (kLowCheckBits of them), then 23..31.
constexpr int kLowCheckBits = 10;
constexpr int kHighCheckFirstBit = 23;

constexpr uint64_t kMinCapacity = 8;

static_assert(NewestRecords::kHiBitsKept ==
                  (((uint64_t{1} << (kCheckFirstBit + kLowCheckBits)) - 1) |
                   (((uint64_t{1} << (kCheckBits - kLowCheckBits)) - 1) << kHighCheckFirstBit)),
              "an entry keeps hash.hi's partition and check bits");
static_assert(NewestRecords::kPartitions == uint32_t{1} << kCheckFirstBit,
              "the partition bits sit below the check bits");
static_assert(kSequenceCheckShift + 8 == 64 && kPackedCheckShift + (kCheckBits - 8) == 64,
              "the check bits fill both words");
static_assert(sizeof(RecordHeader) + kMaxKeyBytes + kMaxValueBytesCap <
                  NewestRecords::kRecordBytesLimit,
              "every record's size fits the entry's 21 bits");

// Entries a sub-table of `capacity` slots may hold: 7/8 of it.
uint64_t MaxEntries(uint64_t capacity) { return capacity - capacity / 8; }

uint64_t CheckOf(const KeyHash& hash) {
  const uint64_t low = (hash.hi >> kCheckFirstBit) & ((uint64_t{1} << kLowCheckBits) - 1);
  const uint64_t high =
      (hash.hi >> kHighCheckFirstBit) & ((uint64_t{1} << (kCheckBits - kLowCheckBits)) - 1);
  return low | (high << kLowCheckBits);
}

}  // namespace

NewestRecords::SlotArray::SlotArray(uint64_t slot_count)
    : block(ZeroedBlock::Allocate(slot_count * sizeof(Entry))),
      data(static_cast<Entry*>(block.data())),
      capacity(data != nullptr ? slot_count : 0) {}

NewestRecords::Entry NewestRecords::Pack(const KeyHash& hash, const Record& record) {
  NVKV_CHECK(record.page < kPageLimit);
  NVKV_CHECK(record.record_bytes < kRecordBytesLimit);
  const uint64_t check = CheckOf(hash);
  Entry entry;
  entry.lo = hash.lo;
  entry.sequence = record.sequence | ((check & 0xff) << kSequenceCheckShift);
  entry.packed = record.page | (uint64_t{record.is_delete} << kDeleteShift) |
                 (uint64_t{record.record_bytes} << kBytesShift) |
                 ((check >> 8) << kPackedCheckShift);
  return entry;
}

NewestRecords::Record NewestRecords::Unpack(const Entry& entry) {
  Record record;
  record.sequence = entry.sequence & (kSequenceLimit - 1);
  record.page = entry.packed & (kPageLimit - 1);
  record.is_delete = (entry.packed >> kDeleteShift) & 1;
  record.record_bytes =
      static_cast<uint32_t>((entry.packed >> kBytesShift) & (kRecordBytesLimit - 1));
  return record;
}

KeyHash NewestRecords::HashOf(const Entry& entry, uint32_t partition) {
  const uint64_t check = (entry.sequence >> kSequenceCheckShift) |
                         ((entry.packed >> kPackedCheckShift) << 8);
  const uint64_t low = check & ((uint64_t{1} << kLowCheckBits) - 1);
  const uint64_t high = check >> kLowCheckBits;
  return KeyHash{entry.lo,
                 partition | (low << kCheckFirstBit) | (high << kHighCheckFirstBit)};
}

void NewestRecords::EraseAt(Partition& partition, uint64_t i) {
  const uint64_t capacity = partition.slots.capacity;
  Entry* const data = partition.slots.data;
  for (uint64_t j = i;;) {
    j = j + 1 == capacity ? 0 : j + 1;
    if (data[j].sequence == 0) break;
    // The entry at j stays unless its probe from home passed the hole at i: home in (i, j]
    // (cyclically) means it did not.
    const uint64_t home = Home(data[j].lo, capacity);
    const bool stays = i < j ? (home > i && home <= j) : (home > i || home <= j);
    if (stays) continue;
    data[i] = data[j];
    i = j;
  }
  data[i] = Entry{};
  --partition.size;
  --size_;
}

void NewestRecords::Shrink(Partition& partition) {
  uint64_t capacity = kMinCapacity;
  while (MaxEntries(capacity) < partition.size) capacity += capacity / 4;
  if (capacity < partition.slots.capacity) Resize(partition, capacity);
}

bool NewestRecords::SameKey(const Entry& entry, const Entry& probe) {
  return entry.lo == probe.lo &&
         entry.sequence >> kSequenceCheckShift == probe.sequence >> kSequenceCheckShift &&
         entry.packed >> kPackedCheckShift == probe.packed >> kPackedCheckShift;
}

NewestRecords::Kept NewestRecords::KeepIfNewer(const KeyHash& hash, const Record& record) {
  if (record.sequence == 0 || record.sequence >= kSequenceLimit) return Kept::kRefused;
  const Entry probe = Pack(hash, record);
  Partition& partition = partitions_[hash.hi & (kPartitions - 1)];
  uint64_t capacity = partition.slots.capacity;
  if (capacity > 0) {
    for (uint64_t pos = Home(hash.lo, capacity);; pos = pos + 1 == capacity ? 0 : pos + 1) {
      Entry& entry = partition.slots.data[pos];
      if (entry.sequence == 0) break;  // a key not held yet
      if (SameKey(entry, probe)) {
        if (Unpack(entry).sequence >= record.sequence) return Kept::kOlder;
        entry = probe;
        return Kept::kNewest;
      }
    }
  }
  if (partition.size + 1 > MaxEntries(capacity)) {
    if (!Resize(partition, std::max(kMinCapacity, capacity + capacity / 4))) {
      return Kept::kNoMemory;
    }
    capacity = partition.slots.capacity;
  }
  uint64_t pos = Home(hash.lo, capacity);
  while (partition.slots.data[pos].sequence != 0) pos = pos + 1 == capacity ? 0 : pos + 1;
  partition.slots.data[pos] = probe;
  ++partition.size;
  ++size_;
  return Kept::kNewest;
}

namespace {
// The slots of each sub-table Reserve(keys) makes.
uint64_t ReservedCapacity(uint64_t keys, uint64_t partitions, uint64_t min_capacity) {
  // The keys of a sub-table vary around keys / partitions (by about its square root): 5% more,
  // and a little for small tables, so that hardly one grows.
  const uint64_t per_partition = keys / partitions + keys / partitions / 20 + 64;
  // Slots for them at the most load a sub-table takes (7/8): the estimate is high already, and
  // every slot more is memory touched at random (measured: a load of 2/3 recovered slower).
  return std::max(min_capacity, per_partition + per_partition / 7 + 1);
}
}  // namespace

uint64_t NewestRecords::BytesFor(uint64_t keys) {
  return kPartitions * ReservedCapacity(keys, kPartitions, kMinCapacity) * sizeof(Entry);
}

void NewestRecords::Reserve(uint64_t keys) {
  const uint64_t capacity = ReservedCapacity(keys, kPartitions, kMinCapacity);
  for (Partition& partition : partitions_) {
    if (partition.slots.capacity < capacity && !Resize(partition, capacity)) return;
  }
}

bool NewestRecords::Resize(Partition& partition, uint64_t capacity) {
  const uint64_t old_capacity = partition.slots.capacity;
  SlotArray slots(capacity);
  if (slots.data == nullptr) return false;
  for (uint64_t i = 0; i < old_capacity; ++i) {
    const Entry& entry = partition.slots.data[i];
    if (entry.sequence == 0) continue;
    uint64_t pos = Home(entry.lo, capacity);
    while (slots.data[pos].sequence != 0) pos = pos + 1 == capacity ? 0 : pos + 1;
    slots.data[pos] = entry;
  }
  partition.slots = std::move(slots);
  return true;
}

uint64_t NewestRecords::allocated_bytes() const {
  uint64_t bytes = 0;
  for (const Partition& partition : partitions_) bytes += partition.slots.capacity * sizeof(Entry);
  return bytes;
}

void NewestRecords::Clear() {
  std::vector<Partition>(kPartitions).swap(partitions_);
  size_ = 0;
}

}  // namespace nvkv::kv
