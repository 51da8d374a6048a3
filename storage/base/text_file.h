// Small text files of the kernel's (/proc, /sys): read whole, and the number one holds. Used by
// the NVMe device (sysfs queue limits, /proc/devices) and the engine's memory headroom (cgroup
// files).
#ifndef NVKV_STORAGE_BASE_TEXT_FILE_H_
#define NVKV_STORAGE_BASE_TEXT_FILE_H_

#include <charconv>
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

namespace nvkv {

// The whole of the file at `path`, or nullopt when it cannot be opened.
inline std::optional<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The unsigned decimal `text` holds, trailing newlines and spaces allowed; nullopt for anything
// else ("max", a sign, other characters, an overflow).
inline std::optional<uint64_t> ParseUnsigned(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace nvkv

#endif  // NVKV_STORAGE_BASE_TEXT_FILE_H_
