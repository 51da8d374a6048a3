// ZonePlaces (zone_places.h).
#include "kv/zone_places.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "storage/base/check.h"

namespace nvkv::kv {

std::vector<PlaceRun> RunsFromPlaces(std::vector<std::pair<uint32_t, uint32_t>> landed) {
  std::sort(landed.begin(), landed.end());
  std::vector<PlaceRun> runs;
  for (const auto& [position, place] : landed) {
    if (position == place) continue;
    if (!runs.empty()) {
      PlaceRun& last = runs.back();
      if (last.position + last.pages == position && last.place + last.pages == place) {
        ++last.pages;
        continue;
      }
    }
    runs.push_back(PlaceRun{position, 1, place});
  }
  return runs;
}

ZonePlaces::ZonePlaces(const Geometry& geometry)
    : geometry_(geometry), zones_(std::make_unique<Zone[]>(geometry.segment_count)) {
  NVKV_CHECK(geometry.zoned());
}

const PlaceRun* ZonePlaces::RunHolding(const Zone& zone, uint32_t position) {
  // The last run starting at or before `position`.
  auto after = std::upper_bound(
      zone.runs.begin(), zone.runs.end(), position,
      [](uint32_t p, const PlaceRun& run) { return p < run.position; });
  if (after == zone.runs.begin()) return nullptr;
  const PlaceRun& run = *std::prev(after);
  return position < run.position + run.pages ? &run : nullptr;
}

uint64_t ZonePlaces::PlaceOf(uint64_t page) const {
  const uint64_t first_log_page = geometry_.FirstPageOf(0);
  if (page < first_log_page || page >= geometry_.total_pages()) return page;
  const uint64_t segment = geometry_.SegmentOf(page);
  const Zone& zone = zones_[segment];
  if (zone.run_count.load(std::memory_order_acquire) == 0) return page;
  const uint32_t position = geometry_.PageInSegment(page);
  absl::ReaderMutexLock lock(&mu_);
  const PlaceRun* run = RunHolding(zone, position);
  if (run == nullptr) return page;
  return geometry_.FirstPageOf(segment) + run->place + (position - run->position);
}

uint32_t ZonePlaces::ContiguousFrom(uint64_t page, uint32_t count) const {
  NVKV_CHECK(count > 0);
  const uint64_t first = PlaceOf(page);
  uint32_t contiguous = 1;
  while (contiguous < count && PlaceOf(page + contiguous) == first + contiguous) ++contiguous;
  return contiguous;
}

absl::Status ZonePlaces::Landed(uint64_t first, uint32_t count, uint64_t place) {
  if (count == 0) return absl::OkStatus();
  const uint64_t segment = geometry_.SegmentOf(first);
  const uint64_t zone_first = geometry_.FirstPageOf(segment);
  const uint64_t capacity = geometry_.pages_per_segment;
  if (first - zone_first + count > capacity || place < zone_first ||
      place - zone_first + count > capacity) {
    return absl::DataLossError(absl::StrCat(
        "pages ", first, "..", first + count - 1, " of segment ", segment, " landed at page ",
        place, ", outside the writable pages of their zone"));
  }
  if (first == place) return absl::OkStatus();  // where its number says: the common case
  const PlaceRun added{static_cast<uint32_t>(first - zone_first), count,
                       static_cast<uint32_t>(place - zone_first)};
  absl::MutexLock lock(&mu_);
  Zone& zone = zones_[segment];
  auto at = std::upper_bound(
      zone.runs.begin(), zone.runs.end(), added.position,
      [](uint32_t p, const PlaceRun& run) { return p < run.position; });
  size_t index = static_cast<size_t>(at - zone.runs.begin());
  const bool overlaps_next = at != zone.runs.end() && added.position + added.pages > at->position;
  const bool overlaps_before =
      index > 0 &&
      zone.runs[index - 1].position + zone.runs[index - 1].pages > added.position;
  if (overlaps_next || overlaps_before) {
    return absl::DataLossError(absl::StrCat("pages ", first, "..", first + count - 1,
                                            " of segment ", segment,
                                            " landed twice (the device says so)"));
  }
  // Joined to the run before it or after it when it goes on from it, place and position alike.
  const auto joins = [](const PlaceRun& a, const PlaceRun& b) {
    return a.position + a.pages == b.position && a.place + a.pages == b.place;
  };
  if (index > 0 && joins(zone.runs[index - 1], added)) {
    zone.runs[index - 1].pages += added.pages;
    --index;
  } else {
    zone.runs.insert(at, added);
  }
  if (index + 1 < zone.runs.size() && joins(zone.runs[index], zone.runs[index + 1])) {
    zone.runs[index].pages += zone.runs[index + 1].pages;
    zone.runs.erase(zone.runs.begin() + static_cast<ptrdiff_t>(index) + 1);
  }
  zone.run_count.store(static_cast<uint32_t>(zone.runs.size()), std::memory_order_release);
  return absl::OkStatus();
}

void ZonePlaces::Clear(uint64_t segment) { Restore(segment, {}); }

std::vector<PlaceRun> ZonePlaces::Runs(uint64_t segment) const {
  absl::ReaderMutexLock lock(&mu_);
  return zones_[segment].runs;
}

void ZonePlaces::Restore(uint64_t segment, std::vector<PlaceRun> runs) {
  absl::MutexLock lock(&mu_);
  Zone& zone = zones_[segment];
  zone.runs = std::move(runs);
  zone.run_count.store(static_cast<uint32_t>(zone.runs.size()), std::memory_order_release);
}

uint64_t ZonePlaces::run_count() const {
  uint64_t total = 0;
  for (uint64_t s = 0; s < geometry_.segment_count; ++s) {
    total += zones_[s].run_count.load(std::memory_order_relaxed);
  }
  return total;
}

}  // namespace nvkv::kv
