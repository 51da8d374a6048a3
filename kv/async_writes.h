// AsyncWrites: one thread's asynchronous writes on one engine (Engine::WriteAsync), from the
// moment they are appended until their callbacks run inside the thread's Poll: durable writes
// waiting for their pages (DurabilityMarks) and writes whose callbacks are due.
//
// How a waiting thread learns that a write became durable: while it has durable writes waiting,
// it is one of the log writer's listeners; when a head's durable prefix moves, the writer checks
// the waiting writes' marks (AnyCovered) and signals the thread's EventFd if one is covered.
// Poll blocks on it (or, with reads in flight, on its read queue with the event armed there) and
// then collects the writes now durable (LogWriter::Covers). A write's marks are published (under
// waiting_mu_) before the Collect that Poll makes right before any wait: the writer either sees
// them when it looks after a move, or that Collect sees the move (a write already durable when
// it was added included).
//
// Thread contract: used only by the thread it belongs to (it lives in that thread's ReadQueue),
// except AnyCovered and Signal, which the log writer calls.
#ifndef NVKV_KV_ASYNC_WRITES_H_
#define NVKV_KV_ASYNC_WRITES_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "kv/engine.h"
#include "kv/log_writer.h"
#include "storage/event_fd.h"

namespace nvkv::kv {

class AsyncWrites final : public DurabilityListener {
 public:
  explicit AsyncWrites(LogWriter* writer) : writer_(writer) {}
  ~AsyncWrites() { StopListening(); }
  AsyncWrites(const AsyncWrites&) = delete;
  AsyncWrites& operator=(const AsyncWrites&) = delete;

  // Writes started and not yet reported by a callback.
  uint32_t pending() const { return static_cast<uint32_t>(waiting_count_ + ready_.size()); }
  bool has_waiting() const { return waiting_count_ > 0; }
  bool has_ready() const { return !ready_.empty(); }

  // Makes sure a durable write can be waited for (the listener's eventfd exists): called before
  // the write is appended, so that nothing fails after it.
  absl::Status PrepareToWait();
  // A write whose outcome is known: its callback runs at the next Poll.
  void AddReady(WriteCallback done, absl::Status status);
  // Where the caller puts the marks of its next durable write (a vector that keeps its capacity
  // from earlier writes), before AddWaiting.
  DurabilityMarks& next_marks() { return next_marks_; }
  // A durable write waiting for the pages next_marks() names. REQUIRES: PrepareToWait
  // succeeded.
  void AddWaiting(WriteCallback done);
  // Moves the waiting writes that `marks` covers, or that the writer failed, to the ready list.
  void Collect();
  // Runs the callbacks of the ready writes (callbacks may start new writes); returns how many.
  uint32_t RunReady();

  // The eventfd the log writer signals while writes wait (null before the first durable write).
  storage::EventFd* wake() const { return wake_.get(); }
  // Whether its wait request is in flight on the thread's queue.
  bool wake_armed() const { return wake_ != nullptr && wake_->armed(); }

  // No longer a listener of the log writer (writes still waiting are abandoned: their callbacks
  // never run). Before the log writer goes; idempotent.
  void StopListening();

  // DurabilityListener, for the log writer's thread.
  bool AnyCovered(const LogWriter& writer) override;
  void Signal() override { wake_->Signal(); }

 private:
  struct Waiting {
    WriteCallback done;
    DurabilityMarks marks;
  };

  LogWriter* const writer_;
  std::unique_ptr<storage::EventFd> wake_;
  bool listening_ = false;
  DurabilityMarks next_marks_;
  // Written by the owning thread under waiting_mu_, read by the writer under it (AnyCovered),
  // and by the owning thread without it. waiting_[0, waiting_count_) wait; the rest are spare
  // entries whose marks keep their capacity.
  absl::Mutex waiting_mu_;  // a leaf, under LogWriter's listeners mutex
  std::vector<Waiting> waiting_;
  size_t waiting_count_ = 0;
  std::vector<std::pair<WriteCallback, absl::Status>> ready_;
};

}  // namespace nvkv::kv

#endif  // NVKV_KV_ASYNC_WRITES_H_
