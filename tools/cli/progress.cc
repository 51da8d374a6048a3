#include "tools/cli/progress.h"

#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_format.h"
#include "tools/cli/codec.h"

namespace nvkv::cli {
namespace {

constexpr int kBarWidth = 30;
constexpr auto kRedrawInterval = std::chrono::milliseconds(100);
// A rate measured over less than this says little.
constexpr double kRateAfterSeconds = 0.5;

// `count` of a unit: human units for bytes; a tenth kept below 10 (a slow rate is not 0).
std::string Amount(double count, bool bytes) {
  if (bytes) return FormatBytes(static_cast<uint64_t>(count));
  return count < 10 ? absl::StrFormat("%.1f", count) : absl::StrFormat("%.0f", count);
}

std::string TimeLeft(double seconds) {
  if (seconds < 1) return "under 1 s left";
  if (seconds < 120) return absl::StrFormat("%.0f s left", seconds);
  return absl::StrFormat("%.0f min left", seconds / 60);
}

}  // namespace

std::string ProgressLine(std::string_view label, std::string_view unit, uint64_t done,
                         uint64_t total, double seconds) {
  const bool bytes = unit.substr(0, 5) == "bytes";
  std::string line;
  if (total == 0) {
    line = bytes ? absl::StrFormat("%s  %s%s", label, FormatBytes(done), unit.substr(5))
                 : absl::StrFormat("%s  %d %s", label, done, unit);
  } else {
    const uint64_t shown = done > total ? total : done;
    const int filled = static_cast<int>(shown * kBarWidth / total);
    line = absl::StrFormat("%s [%s%s] %3d%%  ", label, std::string(filled, '#'),
                           std::string(kBarWidth - filled, '.'),
                           static_cast<int>(shown * 100 / total));
    line += bytes ? absl::StrFormat("%s / %s", FormatBytes(shown), FormatBytes(total))
                  : absl::StrFormat("%d/%d %s", shown, total, unit);
  }
  if (seconds >= kRateAfterSeconds && done > 0) {
    const double rate = static_cast<double>(done) / seconds;
    line += bytes ? absl::StrFormat(", %s/s", Amount(rate, true))
                  : absl::StrFormat(", %s %s/s", Amount(rate, false), unit);
    if (total != 0 && done < total) {
      line += ", " + TimeLeft(static_cast<double>(total - done) / rate);
    }
  }
  return line;
}

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
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const std::string line = ProgressLine(label_, unit_, done, total, seconds);
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
