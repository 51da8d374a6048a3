// Lookahead: a short queue that hides memory latency behind the items ahead of one.
#ifndef NVKV_KV_LOOKAHEAD_H_
#define NVKV_KV_LOOKAHEAD_H_

#include <array>
#include <cstddef>

namespace nvkv::kv {

// Items wait in a short queue before they are handled: the caller prefetches what handling an
// item will touch as it pushes it, and handling the items ahead of it covers the time the memory
// takes to arrive. Recovery's tables and indexes are far larger than the caches: a probe that
// waited for memory took most of its time.
template <typename Item>
class Lookahead {
 public:
  static constexpr size_t kDepth = 16;  // enough to cover one memory access

  // Queues `item`, handling the oldest first when the queue is full.
  template <typename Handle>
  void Push(const Item& item, Handle handle) {
    if (count_ == kDepth) {
      handle(items_[first_]);
      first_ = (first_ + 1) % kDepth;
      --count_;
    }
    items_[(first_ + count_) % kDepth] = item;
    ++count_;
  }

  // Handles every item queued, in the order pushed.
  template <typename Handle>
  void Drain(Handle handle) {
    for (; count_ > 0; --count_) {
      handle(items_[first_]);
      first_ = (first_ + 1) % kDepth;
    }
  }

 private:
  std::array<Item, kDepth> items_{};
  size_t first_ = 0, count_ = 0;
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_LOOKAHEAD_H_
