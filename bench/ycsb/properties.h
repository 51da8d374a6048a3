// Properties: the name=value settings of a YCSB run, read from property files (-P) and the
// command line (-p), as YCSB reads them.
//
// File format (a strict subset of Java's .properties, which YCSB's workload files use):
//   - blank lines and lines whose first non-blank character is '#' or '!' are comments;
//   - every other line is `name=value` or `name: value` (blanks around the separator and at
//     both ends are dropped); a line ending in a backslash continues on the next line;
//   - a line with no '=' or ':', or an empty name, is an error that names the file and line.
// A later setting of the same name replaces the earlier one; -p settings replace file ones.
//
// Thread contract: not synchronized; filled before the run, then only read.
#ifndef NVKV_BENCH_YCSB_PROPERTIES_H_
#define NVKV_BENCH_YCSB_PROPERTIES_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace nvkv::ycsb {

class Properties {
 public:
  // Parses `text` (from `source`, a file name used in error messages) and merges it in.
  // kInvalidArgument for a bad line: "workloads/x:7: expected name=value, got 'foo'".
  absl::Status ParseText(std::string_view text, std::string_view source);
  // Reads and parses a file: kNotFound when it cannot be opened.
  absl::Status ParseFile(const std::string& path);
  // Parses one `name=value` (a -p argument).
  absl::Status ParseAssignment(std::string_view assignment);

  void Set(std::string_view name, std::string_view value);
  bool Has(std::string_view name) const;

  // Typed reads: the default when the property is absent, kInvalidArgument naming the property
  // and its value when it does not parse.
  std::string GetString(std::string_view name, std::string_view fallback) const;
  absl::StatusOr<uint64_t> GetUint(std::string_view name, uint64_t fallback) const;
  absl::StatusOr<double> GetDouble(std::string_view name, double fallback) const;
  absl::StatusOr<bool> GetBool(std::string_view name, bool fallback) const;
  // Sizes with an optional k/m/g/t suffix (powers of 1024): "256m", "1g", "4096"; the grammar
  // is util/size_parse.h's.
  absl::StatusOr<uint64_t> GetBytes(std::string_view name, uint64_t fallback) const;

  const std::map<std::string, std::string, std::less<>>& all() const { return values_; }

 private:
  std::map<std::string, std::string, std::less<>> values_;
};

}  // namespace nvkv::ycsb

#endif  // NVKV_BENCH_YCSB_PROPERTIES_H_
