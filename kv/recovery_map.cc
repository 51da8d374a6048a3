// The segment map as recovery reads it (recovery_map.h).
#include "kv/recovery_map.h"

#include <algorithm>
#include <array>
#include <utility>

#include "kv/metadata_zones.h"
#include "kv/segment_map.h"
#include "storage/base/status_macros.h"
#include "storage/buffer_pool.h"

namespace nvkv::kv {

namespace {

// The map of a zoned store: the newest copy of each page in the metadata zones, and where the
// map's log goes on (SegmentMap::ResumeZones).
absl::Status ReadMapZones(const StoreShape& shape, storage::Device& device,
                          const storage::Buffer& chunk, SegmentMap& map, MapPageVisitor visit) {
  NVKV_ASSIGN_OR_RETURN(const std::vector<storage::ZoneDescriptor> report,
                        storage::ReportZones(device, 0, kMetadataZones));
  std::array<storage::ZoneDescriptor, kMetadataZones> zones;
  std::copy_n(report.begin(), kMetadataZones, zones.begin());
  NVKV_ASSIGN_OR_RETURN(const MetadataZonesRead read,
                        ReadMetadataZones(device, shape.geometry, shape.seed,
                                          shape.blocks_per_page, zones, chunk, visit));
  const storage::ZoneDescriptor& current = zones[read.current];
  const uint64_t used_blocks = current.state == storage::ZoneState::kFull
                                   ? current.capacity
                                   : current.write_pointer - current.start;
  MapZoneLog::Found found;
  found.current = read.current;
  // A pointer off a page boundary (an append a cut tore part way): a writer's Open fills the
  // torn page's last blocks with zeros before its first map write (AlignMetadataZone), and the
  // places go on after it. That page, whole below the pointer then, fails to verify: every map
  // page is written again after it, which supersedes it (ReadMetadataZones).
  const bool torn = used_blocks % shape.blocks_per_page != 0;
  found.pages_used = std::min<uint64_t>(
      shape.geometry.pages_per_segment,
      (used_blocks + shape.blocks_per_page - 1) / shape.blocks_per_page);
  // A map that said nothing (a damaged copy) is written again whole.
  found.holds_every_page = read.holds_every_page && read.damaged_pages == 0 && !torn;
  map.ResumeZones(found, read.next_write_count);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<MapView> ReadMapView(const StoreShape& shape, storage::Device& device,
                                    SegmentTable& segments, bool read_all) {
  const Geometry& g = shape.geometry;
  MapView view;
  view.in_use.assign(g.segment_count, false);
  view.free.assign(g.segment_count, false);
  std::vector<SummaryPlace> summarized(g.segment_count);
  std::vector<std::pair<uint32_t, CheckpointPlace>> checkpoint;  // by place in it
  SegmentMap* map = segments.map();
  if (map != nullptr) {
    const storage::BufferLease chunk = storage::BufferLease::Chunk(device.buffers());
    if (!chunk.valid()) return absl::InternalError("no buffer to read the segment map into");
    const uint32_t per_page = MapEntriesPerPage(g.page_bytes);
    uint64_t pages_found = 0;
    const auto visit = [&](uint64_t index, const SegmentMapPageHeader& floors,
                           const SegmentMapEntry* entries, uint64_t count) {
      ++pages_found;
      view.floors.Raise(floors.sequence_floor, floors.generation_floor);
      map->LoadPage(index, entries);
      for (uint64_t e = 0; e < count; ++e) {
        const uint64_t segment = index * per_page + e;
        const SegmentMapEntry& entry = entries[e];
        const auto state = static_cast<MapState>(entry.state);
        view.free[segment] = state == MapState::kFree;
        view.in_use[segment] = state == MapState::kInUse || state == MapState::kSummarized;
        if (state == MapState::kSummarized) {
          summarized[segment] = SummaryPlace{entry.summary_first, entry.summary_pages};
        }
        if (state == MapState::kCheckpoint || state == MapState::kBaseCheckpoint) {
          checkpoint.push_back({entry.summary_first, {segment, entry.summary_pages}});
          // One mark of a base is enough: an Open that read the checkpoint marks it so
          // before anything is written, and a cut may leave only some pages of that map
          // write on the device.
          view.base = view.base || state == MapState::kBaseCheckpoint;
        }
      }
    };
    if (g.zoned()) {
      NVKV_RETURN_IF_ERROR(ReadMapZones(shape, device, *chunk, *map, visit));
    } else {
      ReadMapPages(device, g, shape.seed, shape.blocks_per_page, *chunk, visit);
    }
    // A page with no verifying copy says nothing: like a damaged one.
    view.pages_damaged = g.map_pages() - pages_found;
  }
  // The checkpoint's segments in its order: segment 0, 1, ... (kept whatever their marks say:
  // a checkpoint not used, or one whose marks are not its places, has them read).
  std::sort(checkpoint.begin(), checkpoint.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [position, place] : checkpoint) view.checkpoint.push_back(place);
  bool places_right = view.pages_damaged == 0;
  for (size_t i = 0; i < checkpoint.size(); ++i) {
    places_right = places_right && checkpoint[i].first == i;
  }
  if (!places_right && !view.checkpoint.empty()) {
    view.checkpoint_unusable = view.pages_damaged > 0
                                   ? "a page of the segment map is damaged"
                                   : "the segment map's marks of its segments do not line up";
  }
  std::vector<bool> in_checkpoint(g.segment_count, false);
  for (const CheckpointPlace& place : view.checkpoint) in_checkpoint[place.segment] = true;
  for (uint64_t s = 0; s < g.segment_count; ++s) {
    if (in_checkpoint[s]) {
      continue;  // recovery decides
    } else if (read_all) {
      view.to_read.push_back(s);
    } else if (view.free[s]) {
      ++view.segments_skipped;
    } else if (summarized[s].pages > 0) {
      view.summarized.push_back({s, summarized[s]});
    } else {
      view.to_read.push_back(s);
    }
  }
  return view;
}

}  // namespace nvkv::kv
