// Sizes given on a command line or in a property file: "4096", "4k", "64MiB", "1g". The one
// size parser of the project: nvkv-cli (format --capacity, --page-bytes, --segment-bytes),
// nvkv-iobench (--bs, --size) and nvkv-ycsb (nvkv.capacity).
//
// Why util/: the CLI in tools/ and the benchmarks in bench/ both need it, and neither may include
// the other's files or kv/ or storage/ (tests/check_layering.sh); util/ is below every layer.
//
// Grammar: one or more ASCII digits, then nothing or one unit, in any case ("4K", "4KIB"):
//   b              bytes
//   k, kb, kib     2^10 bytes     (likewise m 2^20, g 2^30, t 2^40)
// Units are powers of 1024 always, as in fio (whose default kb_base is 1024): "4kb" is 4096.
// Nothing else is accepted: no sign, no blanks, no fraction ("1.5g"), no "0x", no "ki" (no
// parser documented it), no other suffix. The value must fit in 64 bits.
//
// Thread contract: plain functions.
#ifndef NVKV_UTIL_SIZE_PARSE_H_
#define NVKV_UTIL_SIZE_PARSE_H_

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace nvkv::util {

// kInvalidArgument for text outside the grammar ("'12q' is not a size (examples: ...)") and for
// a size of 2^64 bytes or more ("'20000000t' is too large ..."); "0" is 0.
absl::StatusOr<uint64_t> ParseSize(std::string_view text);

// ParseSize, and zero ("0", "0k") is refused too.
absl::StatusOr<uint64_t> ParsePositiveSize(std::string_view text);

}  // namespace nvkv::util

#endif  // NVKV_UTIL_SIZE_PARSE_H_
