// The store's sticky failure (STYLE.md section 3): once a write's durability is unknown (a page
// write or a flush failed, a queue broke), every later write is refused until the store is
// reopened, whose recovery finds what is durable. The first cause is kept.
//
// Thread contract: thread-safe; failed() is one atomic load, for hot paths.
#ifndef NVKV_KV_STICKY_ERROR_H_
#define NVKV_KV_STICKY_ERROR_H_

#include <atomic>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace nvkv::kv {

class StickyError {
 public:
  // Records `cause`, unless a failure is recorded already.
  void Set(const absl::Status& cause) {
    {
      absl::MutexLock lock(&mu_);
      if (error_.ok()) {
        error_ = absl::FailedPreconditionError(absl::StrCat(
            "the store refuses writes after a failed device write (reopen to recover): ",
            cause.ToString()));
      }
    }
    failed_.store(true, std::memory_order_release);
  }
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // OK, or kFailedPrecondition saying why writes are refused.
  absl::Status status() const {
    absl::MutexLock lock(&mu_);
    return error_;
  }

 private:
  std::atomic<bool> failed_{false};
  mutable absl::Mutex mu_;  // a leaf: taken under any other lock, never the reverse
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_STICKY_ERROR_H_
