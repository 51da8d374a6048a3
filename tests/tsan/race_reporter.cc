// A real data race, for the race_is_reported test (NVKV_TSAN builds only): one thread writes
// `value` under the lock, the other without it. TSan must report it although every lock call
// goes through the annotating wrappers of absl_sync_annotations.cc.
#include <cstdio>
#include <thread>

#include "absl/synchronization/mutex.h"

int main() {
  absl::Mutex mu;
  int value = 0;
  std::thread other([&] {
    absl::MutexLock lock(&mu);
    ++value;
  });
  ++value;  // the race
  other.join();
  std::printf("value %d\n", value);
  return 0;
}
