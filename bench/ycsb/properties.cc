#include "bench/ycsb/properties.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "util/size_parse.h"

namespace nvkv::ycsb {
namespace {

// Debian's Abseil has its own string_view type: views cross over explicitly.
absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }
std::string_view Sv(absl::string_view s) { return std::string_view(s.data(), s.size()); }

absl::Status BadValue(std::string_view name, std::string_view value, std::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat("property ", Av(name), "=", Av(value), ": expected ", Av(expected)));
}

// Splits "name=value", "name: value" or "name = value" at the first '=' or ':'.
bool SplitAssignment(std::string_view line, std::string_view* name, std::string_view* value) {
  const size_t separator = line.find_first_of("=:");
  if (separator == std::string_view::npos) return false;
  *name = Sv(absl::StripAsciiWhitespace(Av(line.substr(0, separator))));
  *value = Sv(absl::StripAsciiWhitespace(Av(line.substr(separator + 1))));
  return !name->empty();
}

}  // namespace

absl::Status Properties::ParseText(std::string_view text, std::string_view source) {
  size_t line_number = 0;
  std::string logical;  // a line with its continuations joined
  size_t logical_start = 0;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::string_view stripped = Sv(absl::StripLeadingAsciiWhitespace(Av(line)));
    if (logical.empty()) {
      if (stripped.empty() || stripped[0] == '#' || stripped[0] == '!') continue;
      logical_start = line_number;
    }
    const bool continues = !stripped.empty() && stripped.back() == '\\';
    if (continues) stripped.remove_suffix(1);
    logical.append(stripped);
    if (continues && !text.empty()) continue;
    std::string_view name, value;
    if (!SplitAssignment(logical, &name, &value)) {
      return absl::InvalidArgumentError(absl::StrCat(Av(source), ":", logical_start,
                                                     ": expected name=value, got '", logical,
                                                     "'"));
    }
    Set(name, value);
    logical.clear();
  }
  return absl::OkStatus();
}

absl::Status Properties::ParseFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open property file ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return ParseText(text.str(), path);
}

absl::Status Properties::ParseAssignment(std::string_view assignment) {
  std::string_view name, value;
  if (!SplitAssignment(assignment, &name, &value) || assignment.find('=') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("-p ", Av(assignment), ": expected name=value"));
  }
  Set(name, value);
  return absl::OkStatus();
}

void Properties::Set(std::string_view name, std::string_view value) {
  values_[std::string(name)] = std::string(value);
}

bool Properties::Has(std::string_view name) const { return values_.find(name) != values_.end(); }

std::string Properties::GetString(std::string_view name, std::string_view fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::string(fallback) : it->second;
}

absl::StatusOr<uint64_t> Properties::GetUint(std::string_view name, uint64_t fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  uint64_t value = 0;
  if (!absl::SimpleAtoi(it->second, &value) || it->second.empty() || it->second[0] == '-') {
    return BadValue(name, it->second, "a whole number");
  }
  return value;
}

absl::StatusOr<double> Properties::GetDouble(std::string_view name, double fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  double value = 0;
  if (!absl::SimpleAtod(it->second, &value)) return BadValue(name, it->second, "a number");
  return value;
}

absl::StatusOr<bool> Properties::GetBool(std::string_view name, bool fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  const std::string lower = absl::AsciiStrToLower(it->second);
  if (lower == "true" || lower == "1") return true;
  if (lower == "false" || lower == "0") return false;
  return BadValue(name, it->second, "true or false");
}

absl::StatusOr<uint64_t> Properties::GetBytes(std::string_view name, uint64_t fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  absl::StatusOr<uint64_t> bytes = util::ParseSize(it->second);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("property ", Av(name), "=", it->second, ": ", bytes.status().message()));
  }
  return *bytes;
}

}  // namespace nvkv::ycsb
