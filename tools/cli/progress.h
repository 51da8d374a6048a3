// A progress bar on stderr, for load, dump, check and compact: drawn only when stderr is a
// terminal, redrawn at most ten times a second, erased by Finish (or the destructor) so that
// whatever is printed next starts on a clean line.
//
//   check [##########..........]  52%  32/62 segments
//   load  12345 pairs
//
// Thread contract: one thread at a time (external synchronization).
#ifndef NVKV_TOOLS_CLI_PROGRESS_H_
#define NVKV_TOOLS_CLI_PROGRESS_H_

#include <chrono>
#include <cstdint>
#include <string>

namespace nvkv::cli {

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
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace nvkv::cli

#endif  // NVKV_TOOLS_CLI_PROGRESS_H_
