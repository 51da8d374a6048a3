// Starting a thread without an exception: std::thread reports that the system would not create
// one (no memory for its stack under an address-space limit, the limit on processes reached) by
// throwing std::system_error, which would end a library that lets no exception out.
#ifndef NVKV_STORAGE_BASE_START_THREAD_H_
#define NVKV_STORAGE_BASE_START_THREAD_H_

#include <system_error>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace nvkv {

// Runs `body` on a new thread kept in `thread` (not joinable before); `what` names it in the
// error, kResourceExhausted, when the system will not create it (`thread` left as it was).
template <typename Body>
absl::Status StartThread(const char* what, std::thread& thread, Body&& body) {
  try {
    thread = std::thread(std::forward<Body>(body));
  } catch (const std::system_error& error) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot start ", what, ": ", error.code().message(),
                     " (the limits on memory or processes, ulimit -v or -u, may be too low)"));
  }
  return absl::OkStatus();
}

}  // namespace nvkv

#endif  // NVKV_STORAGE_BASE_START_THREAD_H_
