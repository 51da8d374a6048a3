// Page runs (page_runs.h): a large record's run of pages.
#include "kv/page_runs.h"

#include "kv/page_format.h"
#include "storage/base/check.h"

namespace nvkv::kv {

absl::Status WriteLargeRun(storage::Device& queue, const StoreShape& shape, const LargeRun& run,
                           const RecordHeader& header, std::string_view key,
                           std::string_view value, bool fua) {
  const Geometry& g = shape.geometry;
  // A chunk at a time; a page at a time when this thread's reads of large values hold every
  // chunk of its queue (its page buffers: one per read slot, plus spares).
  const storage::BufferLease chunk = storage::BufferLease::ChunkOrPage(queue.buffers());
  if (!chunk.valid()) return absl::InternalError("no buffer to write a large value from");
  PageRunWriter out(queue, shape, *chunk, fua, shape.placement.log);
  size_t value_done = 0;
  for (uint32_t index = 0; index < run.pages && out.ok(); ++index) {
    PageBuilder builder;
    builder.Start(out.Room(run.first_page + index), g,
                  index == 0 ? PageType::kData : PageType::kContinuation, run.generation,
                  run.first_in_segment + index, run.first_counter + index);
    if (index == 0) {
      value_done = builder.StartLargeRecord(header, key, value);
    } else {
      value_done += builder.AddContinuation(value.substr(value_done));
    }
    builder.Finish(shape.seed, run.first_page + index);
  }
  const absl::Status status = out.Finish();
  if (status.ok()) NVKV_CHECK(value_done == value.size());
  return status;
}

}  // namespace nvkv::kv
