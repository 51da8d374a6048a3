#include "tools/cli/dump_format.h"

#include "absl/strings/str_cat.h"

namespace nvkv::cli {

std::string DumpHeaderLine(Encoding encoding) {
  return absl::StrCat(kDumpHeaderPrefix, encoding == Encoding::kHex ? "hex" : "escaped", "\n");
}

std::string DumpPairLine(std::string_view key, std::string_view value, Encoding encoding) {
  std::string line = Encode(key, encoding, /*is_key=*/true);
  line += '\t';
  line += Encode(value, encoding, /*is_key=*/false);
  line += '\n';
  return line;
}

absl::Status ParseDumpLine(std::string_view line, Encoding* encoding, DumpLine* out) {
  out->is_pair = false;
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.empty()) return absl::OkStatus();
  if (line.front() == '#') {
    if (line.starts_with(kDumpHeaderPrefix)) {
      const std::string_view name = line.substr(sizeof(kDumpHeaderPrefix) - 1);
      if (name == "hex") {
        *encoding = Encoding::kHex;
      } else if (name == "escaped") {
        *encoding = Encoding::kEscaped;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("unknown encoding '", Escape(name, false), "'"));
      }
    }
    return absl::OkStatus();
  }
  const size_t tab = line.find('\t');
  if (tab == std::string_view::npos || line.find('\t', tab + 1) != std::string_view::npos) {
    return absl::InvalidArgumentError("expected KEY<TAB>VALUE (one tab)");
  }
  absl::StatusOr<std::string> key = Decode(line.substr(0, tab), *encoding);
  if (!key.ok()) return absl::InvalidArgumentError(absl::StrCat("key: ", key.status().message()));
  absl::StatusOr<std::string> value = Decode(line.substr(tab + 1), *encoding);
  if (!value.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("value: ", value.status().message()));
  }
  if (key->empty()) return absl::InvalidArgumentError("empty key");
  out->is_pair = true;
  out->key = std::move(*key);
  out->value = std::move(*value);
  return absl::OkStatus();
}

}  // namespace nvkv::cli
