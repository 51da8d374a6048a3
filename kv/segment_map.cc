// SegmentMap (segment_map.h).
#include "kv/segment_map.h"

#include <algorithm>

#include "storage/base/check.h"

namespace nvkv::kv {

SegmentMap::SegmentMap(const Geometry& geometry, uint64_t store_seed)
    : geometry_(geometry),
      store_seed_(store_seed),
      per_page_(MapEntriesPerPage(geometry.page_bytes)),
      page_count_(geometry.map_pages()),
      entries_(geometry.segment_count, SegmentMapEntry{}),
      pages_(page_count_) {}

void SegmentMap::UseZones(const Superblock& superblock) {
  absl::MutexLock lock(&mu_);
  zones_.emplace(geometry_, superblock);
}

void SegmentMap::ResumeZones(const MapZoneLog::Found& found, uint64_t next_write_count) {
  absl::MutexLock lock(&mu_);
  NVKV_CHECK(zones_.has_value() && next_write_count > 0);
  zones_->Resume(found);
  write_count_ = next_write_count - 1;
  if (!found.holds_every_page) ChangeEveryPageLocked();
}

std::optional<uint32_t> SegmentMap::current_zone() const {
  absl::MutexLock lock(&mu_);
  if (!zones_.has_value()) return std::nullopt;
  return zones_->current();
}

void SegmentMap::LoadPage(uint64_t index, const SegmentMapEntry* entries) {
  absl::MutexLock lock(&mu_);
  const uint64_t first = index * per_page_;
  const uint64_t count = std::min<uint64_t>(per_page_, entries_.size() - first);
  std::copy(entries, entries + count, entries_.begin() + static_cast<ptrdiff_t>(first));
}

SegmentMap::Ticket SegmentMap::Set(uint64_t segment, MapState state, const SummaryPlace& summary) {
  NVKV_CHECK((state == MapState::kSummarized || state == MapState::kCheckpoint ||
              state == MapState::kBaseCheckpoint) == (summary.pages > 0));
  absl::MutexLock lock(&mu_);
  const uint64_t index = segment / per_page_;
  PageState& page = pages_[index];
  SegmentMapEntry entry{};
  entry.state = static_cast<uint8_t>(state);
  entry.summary_first = summary.first;
  entry.summary_pages = summary.pages;
  SegmentMapEntry& current = entries_[segment];
  if (current.state != entry.state || current.summary_first != entry.summary_first ||
      current.summary_pages != entry.summary_pages) {
    current = entry;
    ChangedLocked(index);
    page.announces = page.announces || state == MapState::kInUse;
  }
  return Ticket{index, page.version};
}

SegmentMap::Ticket SegmentMap::Rewrite(uint64_t segment) {
  absl::MutexLock lock(&mu_);
  const uint64_t index = segment / per_page_;
  ChangedLocked(index);
  return Ticket{index, pages_[index].version};
}

void SegmentMap::ChangedLocked(uint64_t index) {
  PageState& page = pages_[index];
  if (page.version == page.written) dirty_pages_.fetch_add(1, std::memory_order_release);
  ++page.version;
}

bool SegmentMap::Durable(const Ticket& ticket) const {
  absl::MutexLock lock(&mu_);
  return pages_[ticket.index].written >= ticket.version;
}

void SegmentMap::ChangeEveryPageLocked() {
  for (uint64_t index = 0; index < page_count_; ++index) ChangedLocked(index);
}

bool SegmentMap::WritableLocked(uint64_t index) const {
  const PageState& state = pages_[index];
  return state.version != state.written && !state.in_flight &&
         (!zones_.has_value() || zones_->MayAppend(index));
}

int SegmentMap::UrgencyLocked(uint64_t index) const {
  if (zones_.has_value() && !zones_->Holds(index)) return 2;  // a move goes on
  return pages_[index].announces ? 1 : 0;  // heads may wait for it
}

std::optional<SegmentMap::PageWrite> SegmentMap::TakeWrite(uint8_t* page, Floors floors) {
  absl::MutexLock lock(&mu_);
  if (!dirty()) return std::nullopt;
  std::optional<uint64_t> chosen;
  for (uint64_t index = 0; index < page_count_; ++index) {
    if (!WritableLocked(index)) continue;
    if (!chosen.has_value() || UrgencyLocked(index) > UrgencyLocked(*chosen)) chosen = index;
    if (UrgencyLocked(index) == 2) break;
  }
  if (!chosen.has_value()) return std::nullopt;
  pages_[*chosen].in_flight = true;
  pages_[*chosen].announces = false;
  return EncodeLocked(*chosen, page, floors);
}

SegmentMap::PageWrite SegmentMap::EncodeLocked(uint64_t index, uint8_t* page, Floors floors) {
  const uint64_t first = index * per_page_;
  const uint32_t count =
      static_cast<uint32_t>(std::min<uint64_t>(per_page_, entries_.size() - first));
  PageWrite write;
  write.index = index;
  write.version = pages_[index].version;
  if (zones_.has_value()) {
    zones_->Take(index);
    write.page_number = zones_->current_first_page();
    write.append = true;
  } else {
    write.page_number = geometry_.map_first_page() + index;
  }
  EncodeMapPage(page, geometry_, store_seed_, write.page_number, static_cast<uint32_t>(index),
                floors(), entries_.data() + first, count, ++write_count_);
  return write;
}

void SegmentMap::Written(const PageWrite& write, bool ok) {
  absl::MutexLock lock(&mu_);
  PageState& state = pages_[write.index];
  state.in_flight = false;
  if (!ok) {
    state.announces = true;  // written again, and early: what it announced still waits
    if (zones_.has_value()) zones_->Failed(write.index);
    return;
  }
  if (write.version <= state.written) return;
  state.written = write.version;
  if (state.written == state.version) {
    const uint64_t was_dirty = dirty_pages_.fetch_sub(1, std::memory_order_release);
    NVKV_CHECK(was_dirty > 0);
  }
}

std::optional<MapZoneLog::Move> SegmentMap::MoveTarget() const {
  absl::MutexLock lock(&mu_);
  if (!zones_.has_value() || !dirty()) return std::nullopt;
  for (const PageState& state : pages_) {
    if (state.in_flight) return std::nullopt;
  }
  return zones_->MoveTarget();
}

void SegmentMap::Moved() {
  absl::MutexLock lock(&mu_);
  NVKV_CHECK(zones_.has_value());
  zones_->Moved();
  ChangeEveryPageLocked();
}

void SegmentMap::MoveOn() {
  absl::MutexLock lock(&mu_);
  NVKV_CHECK(zones_.has_value());
  zones_->FilledUp();
  ChangeEveryPageLocked();
}

uint64_t ReadMapPages(storage::Device& device, const Geometry& geometry, uint64_t store_seed,
                      uint32_t blocks_per_page, const storage::Buffer& chunk,
                      MapPageVisitor visit) {
  const uint32_t per_page = MapEntriesPerPage(geometry.page_bytes);
  const uint64_t pages_per_chunk = chunk.bytes / geometry.page_bytes;
  uint64_t unusable = 0;
  for (uint64_t first = 0; first < geometry.map_pages(); first += pages_per_chunk) {
    const uint64_t count = std::min(pages_per_chunk, geometry.map_pages() - first);
    const absl::Status read = storage::ReadBlocks(
        device, (geometry.map_first_page() + first) * blocks_per_page,
        static_cast<uint32_t>(count * blocks_per_page), chunk);
    if (!read.ok()) {
      unusable += count;
      continue;
    }
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t index = first + i;
      const SegmentMapEntry* entries = nullptr;
      const absl::StatusOr<SegmentMapPageHeader> floors =
          DecodeMapPage(chunk.data + i * geometry.page_bytes, geometry, store_seed,
                        geometry.map_first_page() + index, &entries);
      if (!floors.ok()) {
        ++unusable;
        continue;
      }
      visit(index, *floors, entries,
            std::min<uint64_t>(per_page, geometry.segment_count - index * per_page));
    }
  }
  return unusable;
}

}  // namespace nvkv::kv
