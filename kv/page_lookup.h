// A read's way through the index and the pages: what Get, MultiGet, GetAsync and the write
// path's identity check (kKeyCheck) run on the calling thread's ReadQueue (read_queue.h).
#ifndef NVKV_KV_PAGE_LOOKUP_H_
#define NVKV_KV_PAGE_LOOKUP_H_

#include <string>

#include "absl/status/statusor.h"
#include "kv/read_queue.h"

namespace nvkv::kv {

// Starts `op` (kStarting, key and hash set): answers it from memory, or issues its first page
// read; the queue's reaping drives it on from there.
void StartLookup(ReadOp* op);

// Ends `op` with `result` (the value, or why there is none) and runs or queues its callback.
void FinishOp(ReadOp* op, absl::StatusOr<std::string> result);

}  // namespace nvkv::kv

#endif  // NVKV_KV_PAGE_LOOKUP_H_
