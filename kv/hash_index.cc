#include "kv/hash_index.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "storage/base/check.h"
#include "storage/base/status_macros.h"

namespace nvkv::kv {
namespace {

constexpr uint64_t kOccupiedBit = uint64_t{1} << 31;
constexpr uint64_t kPageMask = kOccupiedBit - 1;
static_assert(kHashIndexPageLimit == kOccupiedBit, "a page must fit below the occupied bit");
static_assert(kPageMask + 1 == kHashIndexPageLimit, "page bits 30..0 hold [0, 2^31)");

// MurmurHash3's fmix32: xor-shifts and odd multipliers, each invertible, so a bijection.
constexpr uint32_t Mix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bU;
  h ^= h >> 13;
  h *= 0xc2b2ae35U;
  h ^= h >> 16;
  return h;
}

// The tag of a key: its hash's bits 0..31, mixed (see hash_index.h for why these bits).
uint32_t TagOf(uint64_t hash) { return Mix32(static_cast<uint32_t>(hash)); }

uint32_t EntryTag(uint64_t entry) { return static_cast<uint32_t>(entry >> 32); }
uint64_t EntryPage(uint64_t entry) { return entry & kPageMask; }
uint64_t MakeEntry(uint32_t tag, uint64_t page) {
  return (uint64_t{tag} << 32) | kOccupiedBit | page;
}

// Entries a table of `capacity` slots may hold: floor(capacity * 0.9).
uint64_t MaxEntries(uint64_t capacity) {
  return capacity / HashIndex::kMaxLoadDenominator * HashIndex::kMaxLoadNumerator +
         capacity % HashIndex::kMaxLoadDenominator * HashIndex::kMaxLoadNumerator /
             HashIndex::kMaxLoadDenominator;
}

// The smallest capacity (at least kMinCapacity) whose MaxEntries is >= `entries`, clamped to
// kMaxCapacity.
uint64_t CapacityFor(uint64_t entries) {
  if (entries >= MaxEntries(HashIndex::kMaxCapacity)) return HashIndex::kMaxCapacity;
  // entries < 3.9e9, so the product cannot overflow.
  uint64_t capacity =
      (entries * HashIndex::kMaxLoadDenominator + HashIndex::kMaxLoadNumerator - 1) /
      HashIndex::kMaxLoadNumerator;
  return std::max(capacity, HashIndex::kMinCapacity);
}

}  // namespace

uint64_t HashIndex::Distance(uint64_t entry, uint64_t pos) const {
  const uint64_t home = Home(EntryTag(entry));
  return pos >= home ? pos - home : pos + capacity_ - home;
}

void HashIndex::Find(uint64_t hash, std::string_view /*key*/,
                     std::vector<uint64_t>* pages) const {
  pages->clear();
  if (size_ == 0) return;
  const uint32_t tag = TagOf(hash);
  uint64_t pos = Home(tag);
  // Invariant 2: the tag's entries sit after every entry with an earlier home or a smaller tag at
  // the same home, and before every entry with a later home or a larger tag.
  for (uint64_t probe = 0;; ++probe) {
    const uint64_t entry = slots_[pos];
    if (entry == kEmpty) break;
    const uint64_t distance = Distance(entry, pos);
    if (distance < probe) break;  // its home is after ours
    if (distance == probe) {       // same home as ours
      const uint32_t entry_tag = EntryTag(entry);
      if (entry_tag == tag) {
        pages->push_back(EntryPage(entry));
      } else if (entry_tag > tag) {
        break;
      }
    }
    pos = Next(pos);
  }
  // Slots hold a tag's entries oldest first (Place puts a new one after its equals); callers
  // want the newest first (index.h).
  std::reverse(pages->begin(), pages->end());
}

uint64_t HashIndex::Locate(uint32_t tag, uint64_t page) const {
  if (size_ == 0) return kNotFound;
  uint64_t pos = Home(tag);
  for (uint64_t probe = 0;; ++probe) {
    const uint64_t entry = slots_[pos];
    if (entry == kEmpty) return kNotFound;
    const uint64_t distance = Distance(entry, pos);
    if (distance < probe) return kNotFound;
    if (distance == probe) {
      const uint32_t entry_tag = EntryTag(entry);
      if (entry_tag == tag && EntryPage(entry) == page) return pos;
      if (entry_tag > tag) return kNotFound;
    }
    pos = Next(pos);
  }
}

absl::Status HashIndex::Insert(uint64_t hash, std::string_view /*key*/, uint64_t page) {
  if (page >= kHashIndexPageLimit) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "page %d is beyond the hash index's 31-bit page numbers (limit %d); use the ordered "
        "index for a device of more pages",
        page, kHashIndexPageLimit));
  }
  NVKV_RETURN_IF_ERROR(MakeRoomFor(1));
  Place(MakeEntry(TagOf(hash), page));
  NoteChange();
  return absl::OkStatus();
}

absl::Status HashIndex::MakeRoomFor(uint64_t inserts) {
  if (inserts <= MaxEntries(capacity_) - size_) return absl::OkStatus();
  if (inserts > MaxEntries(kMaxCapacity) - size_) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "hash index is full: %d entries, and %d more would pass the %d that one shard's table "
        "of %d slots can hold",
        size_, inserts, MaxEntries(kMaxCapacity), kMaxCapacity));
  }
  const uint64_t grown = capacity_ / kGrowthDenominator * kGrowthNumerator +
                         capacity_ % kGrowthDenominator * kGrowthNumerator / kGrowthDenominator;
  return Rehash(std::min(std::max(grown, CapacityFor(size_ + inserts)), kMaxCapacity));
}

void HashIndex::Prefetch(uint64_t hash) const {
  if (capacity_ > 0) __builtin_prefetch(slots_ + Home(TagOf(hash)), 1);
}

uint64_t HashIndex::Place(uint64_t entry) {
  NVKV_DCHECK(size_ < MaxEntries(capacity_));
  const uint32_t tag = EntryTag(entry);
  uint64_t pos = Home(tag);
  for (uint64_t probe = 0;; ++probe) {
    const uint64_t current = slots_[pos];
    if (current == kEmpty) {
      slots_[pos] = entry;
      ++size_;
      return pos;
    }
    const uint64_t distance = Distance(current, pos);
    if (distance < probe) break;  // `current` has a later home: `entry` goes before it
    if (distance == probe && EntryTag(current) > tag) break;
    pos = Next(pos);
  }
  // Shift the rest of the run, [pos, end), one slot right into the empty slot `end` that ends
  // it. At load 0.9 that is ~50 slots on average, so move them with memmove, not one by one.
  uint64_t end = Next(pos);
  while (slots_[end] != kEmpty) end = Next(end);
  uint64_t* slots = slots_;
  if (end < pos) {  // the run wraps: shift [0, end) first, then carry the last slot to slot 0
    std::memmove(slots + 1, slots, end * sizeof(uint64_t));
    slots[0] = slots[capacity_ - 1];
    end = capacity_ - 1;
  }
  std::memmove(slots + pos + 1, slots + pos, (end - pos) * sizeof(uint64_t));
  slots[pos] = entry;
  ++size_;
  return pos;
}

bool HashIndex::PlaceRightAfter(uint64_t pos, uint64_t entry) {
  NVKV_DCHECK(size_ < MaxEntries(capacity_));
  // Not across the table's end: there homes would have to be compared cyclically.
  if (pos >= capacity_ || pos + 1 == capacity_) return false;
  const uint64_t before = slots_[pos];
  if (before == kEmpty || slots_[pos + 1] != kEmpty) return false;
  // `before` ends its run (slot pos + 1 is empty), whose entries are in (home, tag) order and
  // fill every slot from before's home to `pos` (invariants 1 and 2). An entry that sorts at or
  // after `before` and whose home lies in [before's home, pos + 1] goes at the run's end. (An
  // entry that wrapped around the table's end has a home above pos + 1: never taken here.)
  const uint32_t tag = EntryTag(entry), tag_before = EntryTag(before);
  const uint64_t home = Home(tag), home_before = Home(tag_before);
  if (home < home_before || home > pos + 1) return false;
  if (home == home_before && tag < tag_before) return false;
  slots_[pos + 1] = entry;
  ++size_;
  return true;
}

bool HashIndex::Replace(uint64_t hash, std::string_view /*key*/, uint64_t old_page,
                        uint64_t new_page) {
  if (new_page >= kHashIndexPageLimit) return false;
  const uint32_t tag = TagOf(hash);
  const uint64_t pos = Locate(tag, old_page);
  if (pos == kNotFound) return false;
  // The slot order depends on the tag only, so the entry stays where it is.
  slots_[pos] = MakeEntry(tag, new_page);
  NoteChange();
  return true;
}

bool HashIndex::Erase(uint64_t hash, std::string_view /*key*/, uint64_t page) {
  const uint64_t pos = Locate(TagOf(hash), page);
  if (pos == kNotFound) return false;
  RemoveAt(pos);
  NoteChange();
  return true;
}

void HashIndex::RemoveAt(uint64_t pos) {
  // Backward shift: pull each following entry that is away from its home one slot closer. An
  // entry at its home (distance 0) or an empty slot ends the shift (invariant 1 still holds).
  uint64_t next = Next(pos);
  while (slots_[next] != kEmpty && Distance(slots_[next], next) != 0) {
    slots_[pos] = slots_[next];
    pos = next;
    next = Next(next);
  }
  slots_[pos] = kEmpty;
  --size_;
}

void HashIndex::ForEachValue(const std::function<void(uint64_t value)>& visit) const {
  for (uint64_t pos = 0; pos < capacity_; ++pos) {
    const uint64_t entry = slots_[pos];
    if (entry != kEmpty) visit(entry & kPageMask);
  }
}

uint64_t HashIndex::EraseIf(const std::function<bool(uint64_t value)>& doomed) {
  if (size_ == 0) return 0;
  // From an empty slot on, once around: a removal shifts only entries after it (up to that
  // empty slot at most) into its slot, which is looked at again.
  uint64_t start = 0;
  while (slots_[start] != kEmpty) ++start;
  uint64_t erased = 0;
  for (uint64_t i = 1; i < capacity_;) {
    const uint64_t pos = (start + i) % capacity_;
    const uint64_t entry = slots_[pos];
    if (entry != kEmpty && doomed(entry & kPageMask)) {
      RemoveAt(pos);
      ++erased;
    } else {
      ++i;
    }
  }
  if (erased > 0) NoteChange();
  return erased;
}

bool HashIndex::SaveSome(SaveCursor& cursor, const SaveVisitor& visit) const {
  if (!cursor.started) {
    cursor = SaveCursor();
    cursor.started = true;
    cursor.changes = changes();
  }
  NVKV_CHECK(cursor.changes == changes());  // (the caller's contract: nothing changed)
  if (size_ == 0) return true;
  // From the first empty slot on, as Rehash reads them: a run that wraps around the end is then
  // visited in order, and placing the words in this order keeps every tag's entries in theirs.
  // (The same start every call: the table is as it was.)
  uint64_t start = 0;
  while (slots_[start] != kEmpty) ++start;
  auto slot = [&](uint64_t position) {
    const uint64_t at = start + position;  // below twice the capacity (no division per slot)
    return slots_[at >= capacity_ ? at - capacity_ : at];
  };
  while (cursor.position < capacity_) {
    const uint64_t entry = slot(++cursor.position);
    if (entry == kEmpty || visit({}, entry)) continue;
    // Stopped: done when only empty slots are left.
    while (cursor.position < capacity_ && slot(cursor.position + 1) == kEmpty) ++cursor.position;
    return cursor.position == capacity_;
  }
  return true;
}

std::optional<uint64_t> HashIndex::SavedValue(uint64_t word) const {
  if ((word & kOccupiedBit) == 0) return std::nullopt;
  return EntryPage(word);
}

absl::Status HashIndex::RestoreEntry(std::string_view /*key*/, uint64_t word) {
  if ((word & kOccupiedBit) == 0) {
    return absl::InvalidArgumentError("hash index: a restored entry must be an occupied slot");
  }
  NVKV_RETURN_IF_ERROR(MakeRoomFor(1));
  if (PlaceRightAfter(restored_at_, word)) {
    ++restored_at_;
  } else {
    restored_at_ = Place(word);
  }
  NoteChange();
  return absl::OkStatus();
}

IndexStats HashIndex::stats() const {
  return IndexStats{.entries = size_, .memory_bytes = capacity_ * sizeof(uint64_t)};
}

uint64_t HashIndex::BytesFor(uint64_t entries) const {
  return CapacityFor(entries) * sizeof(uint64_t);
}

void HashIndex::Reserve(uint64_t expected_entries) {
  const uint64_t capacity = CapacityFor(expected_entries);
  if (capacity <= capacity_) return;
  // Best effort (see Index::Reserve): on failure the table keeps its size and a later Insert
  // that needs the room reports kResourceExhausted.
  Rehash(capacity).IgnoreError();
}

absl::Status HashIndex::Rehash(uint64_t capacity) {
  NVKV_CHECK(capacity <= kMaxCapacity);
  NVKV_CHECK(MaxEntries(capacity) >= size_);
  // Zeroed slots are empty; a large table comes in huge pages (ZeroedBlock).
  ZeroedBlock table = ZeroedBlock::Allocate(capacity * sizeof(uint64_t));
  if (table.data() == nullptr) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "hash index: cannot allocate %d bytes to grow to %d slots (%d entries)",
        capacity * sizeof(uint64_t), capacity, size_));
  }
  const ZeroedBlock old_table = std::exchange(table_, std::move(table));
  const uint64_t* old_slots = std::exchange(slots_, static_cast<uint64_t*>(table_.data()));
  const uint64_t old_capacity = std::exchange(capacity_, capacity);
  const uint64_t old_size = std::exchange(size_, 0);
  if (old_size == 0) return absl::OkStatus();
  // Visit the old table in tag order: start after an empty slot (a run begins there) and wrap.
  // Tag order is also the new table's order, so each entry lands at the end of its run and
  // Place shifts (almost) nothing.
  uint64_t start = 0;
  while (old_slots[start] != kEmpty) ++start;
  for (uint64_t pos = start + 1; pos < old_capacity; ++pos) {
    if (old_slots[pos] != kEmpty) Place(old_slots[pos]);
  }
  for (uint64_t pos = 0; pos < start; ++pos) {
    if (old_slots[pos] != kEmpty) Place(old_slots[pos]);
  }
  NVKV_CHECK(size_ == old_size);
  return absl::OkStatus();
}

}  // namespace nvkv::kv
