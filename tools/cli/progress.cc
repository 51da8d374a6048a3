#include "tools/cli/progress.h"

#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_format.h"

namespace nvkv::cli {
namespace {

constexpr int kBarWidth = 30;
constexpr auto kRedrawInterval = std::chrono::milliseconds(100);

}  // namespace

Progress::Progress(std::string label, std::string unit)
    : label_(std::move(label)), unit_(std::move(unit)), enabled_(isatty(STDERR_FILENO) == 1) {}

Progress::~Progress() { Finish(); }

void Progress::Update(uint64_t done, uint64_t total) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  const bool last = total != 0 && done >= total;
  if (drawn_ && !last && now - last_draw_ < kRedrawInterval) return;
  last_draw_ = now;
  Draw(done, total);
}

void Progress::Draw(uint64_t done, uint64_t total) {
  std::string line;
  if (total == 0) {
    line = absl::StrFormat("%s  %d %s", label_, done, unit_);
  } else {
    const uint64_t shown = done > total ? total : done;
    const int filled = static_cast<int>(shown * kBarWidth / total);
    line = absl::StrFormat("%s [%s%s] %3d%%  %d/%d %s", label_, std::string(filled, '#'),
                           std::string(kBarWidth - filled, '.'),
                           static_cast<int>(shown * 100 / total), shown, total, unit_);
  }
  // Carriage return, the line, then erase whatever a longer earlier line left behind.
  std::fprintf(stderr, "\r%s\033[K", line.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void Progress::Finish() {
  if (!drawn_) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace nvkv::cli
