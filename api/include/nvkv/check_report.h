// nvkv/check_report.h: what DB::Check reports, and the progress callback of long walks. Plain
// values with no behaviour, so that the engine (kv/) fills them directly (tests/check_layering.sh
// lets kv/ include this header and options.h, and no other public header).
#ifndef NVKV_CHECK_REPORT_H_
#define NVKV_CHECK_REPORT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace nvkv {

// What DB::Check found: counts of what it read, and one line per problem that says where
// ("segment 3 page 17 (page 787, LBA 0x313): checksum mismatch; ..."). Every page read (the two
// superblocks, every page of every segment and the segment map's pages) is counted in exactly
// one of pages_valid, pages_in_holes, pages_stale, pages_unwritten and pages_unreadable. A
// segment map page that does not verify is counted as unreadable and is a problem (recovery
// then reads every segment it describes), and so is a segment that holds a log while the map
// on the device says it is free.
//
// A segment's log may legitimately end at a damaged page: a crash that cut the last write short
// (a torn tail). Such a page is counted in torn_tails and pages_unreadable, and is no problem.
// A damaged, missing or foreign page is a problem when the log goes on after it (later pages of
// the segment carry the log's generation at their own places): it is a hole, counted in
// pages_in_holes. Recovery skips a hole and recovers the rest of the segment; the records on
// the damaged page are lost (their keys read as older values or not at all) and a batch that
// straddles it is dropped whole. A crash with several pages of one log in flight can leave the
// same picture; none of those pages' writes had been acknowledged as durable.
struct CheckReport {
  uint64_t segments_scanned = 0;   // every segment of the store
  uint64_t segments_in_use = 0;    // segments holding a log; the others are free
  uint64_t pages_scanned = 0;      // superblocks, every page of every segment, the segment map
  uint64_t pages_valid = 0;        // sound superblocks and the pages of every log's valid part
  uint64_t pages_in_holes = 0;     // damaged pages inside a log (see above); each is a problem
  uint64_t pages_stale = 0;        // sound pages of no log: older generations, free-segment marks
  uint64_t pages_unwritten = 0;    // never written (all zero bytes)
  uint64_t pages_unreadable = 0;   // damaged pages outside every log, torn tails included
  uint64_t torn_tails = 0;         // logs that end at a damaged page with nothing of theirs after
  uint64_t records = 0;            // records in the logs' valid parts, dead ones included
  uint64_t live_keys_checked = 0;  // live records read back through Get's path and compared
  // At most kMaxProblems lines, then one that counts the rest.
  std::vector<std::string> problems;
  // Informational lines (e.g. "writes ran during the check: ...").
  std::vector<std::string> notes;

  static constexpr size_t kMaxProblems = 1000;

  // True when no problem was found.
  bool ok() const { return problems.empty(); }
};

// Progress of a long walk over the store (DB::Check, DB::ForEachLive): called on the calling
// thread after each segment with (segments done, segments in the store).
using ProgressCallback = std::function<void(uint64_t done, uint64_t total)>;

}  // namespace nvkv

#endif  // NVKV_CHECK_REPORT_H_
