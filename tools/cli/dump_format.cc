#include "tools/cli/dump_format.h"

#include <optional>

#include "absl/strings/str_cat.h"

namespace nvkv::cli {
namespace {

const char* EncodingName(Encoding encoding) {
  return encoding == Encoding::kHex ? "hex" : "escaped";
}

std::optional<Encoding> EncodingNamed(std::string_view name) {
  if (name == "hex") return Encoding::kHex;
  if (name == "escaped") return Encoding::kEscaped;
  return std::nullopt;
}

}  // namespace

std::string DumpHeaderLine(FieldEncodings encodings) {
  if (encodings.key == encodings.value) {
    return absl::StrCat(kDumpHeaderPrefix, EncodingName(encodings.key), "\n");
  }
  return absl::StrCat(kDumpHeaderPrefix, EncodingName(encodings.key), ",",
                      EncodingName(encodings.value), "\n");
}

std::string DumpPairLine(std::string_view key, std::string_view value, FieldEncodings encodings) {
  std::string line = Encode(key, encodings.key, /*is_key=*/true);
  line += '\t';
  line += Encode(value, encodings.value, /*is_key=*/false);
  line += '\n';
  return line;
}

absl::Status ParseDumpLine(std::string_view line, FieldEncodings* encodings, DumpLine* out) {
  out->is_pair = false;
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.empty()) return absl::OkStatus();
  if (line.front() == '#') {
    if (line.starts_with(kDumpHeaderPrefix)) {
      // "hex" or "escaped" for both fields, or "KEY,VALUE".
      const std::string_view names = line.substr(sizeof(kDumpHeaderPrefix) - 1);
      const size_t comma = names.find(',');
      const std::optional<Encoding> key = EncodingNamed(names.substr(0, comma));
      const std::optional<Encoding> value =
          comma == std::string_view::npos ? key : EncodingNamed(names.substr(comma + 1));
      if (!key.has_value() || !value.has_value()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "unknown encoding '", Escape(names, false), "' (hex, escaped, or KEY,VALUE of those)"));
      }
      *encodings = FieldEncodings{*key, *value};
    }
    return absl::OkStatus();
  }
  const size_t tab = line.find('\t');
  if (tab == std::string_view::npos || line.find('\t', tab + 1) != std::string_view::npos) {
    return absl::InvalidArgumentError("expected KEY<TAB>VALUE (one tab)");
  }
  absl::StatusOr<std::string> key = Decode(line.substr(0, tab), encodings->key);
  if (!key.ok()) return absl::InvalidArgumentError(absl::StrCat("key: ", key.status().message()));
  absl::StatusOr<std::string> value = Decode(line.substr(tab + 1), encodings->value);
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
