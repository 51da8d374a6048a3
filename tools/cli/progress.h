// A progress bar on stderr, for load, dump, check and compact: drawn only when stderr is a
// terminal, redrawn at most ten times a second, erased by Finish (or the destructor) so that
// whatever is printed next starts on a clean line.
//
//   check [##########..........]  52%  32/62 segments, 15 segments/s, 2 s left
//   load [######################........]  73%  18.1 MiB / 24.8 MiB, 9.6 MiB/s, 1 s left
//   dump  12345 pairs, 5000 pairs/s
//
// Thread contract: one thread at a time (external synchronization).
#ifndef NVKV_TOOLS_CLI_PROGRESS_H_
#define NVKV_TOOLS_CLI_PROGRESS_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace nvkv::cli {

// The line a bar shows for `done` of `total` (0: unknown) `unit`s, `seconds` after it started:
// a unit that starts with "bytes" in human units (KiB, MiB, ...); the rate once some time has
// passed, and the time left when the total is known.
std::string ProgressLine(std::string_view label, std::string_view unit, uint64_t done,
                         uint64_t total, double seconds);

class Progress {
 public:
  // `label` starts the line, `unit` names what is counted ("segments", "pairs").
  Progress(std::string label, std::string unit);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // `total` 0: unknown (a count is shown instead of a bar).
  void Update(uint64_t done, uint64_t total);
  // Erases the bar.
  void Finish();

  bool enabled() const { return enabled_; }

 private:
  void Draw(uint64_t done, uint64_t total);

  const std::string label_;
  const std::string unit_;
  const bool enabled_;
  bool drawn_ = false;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace nvkv::cli

#endif  // NVKV_TOOLS_CLI_PROGRESS_H_
