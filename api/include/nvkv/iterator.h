// Iterator: walks the keys of a store opened with IndexMode::kOrdered in increasing byte order
// (memcmp of the key bytes, shorter first on a tie).
//
//   std::unique_ptr<nvkv::Iterator> it = db->NewIterator();
//   for (it->Seek("user:"); it->Valid() && it->key().starts_with("user:"); it->Next()) {
//     Use(it->key(), it->value());
//   }
//   if (!it->status().ok()) ...  // the walk stopped early
//
// Consistency: each key/value pair is read atomically (never a value half-written), but the walk
// is not a point-in-time snapshot. The iterator reads the store in batches of kBatchKeys pairs,
// each batch resuming after the last key of the one before, so a write made while the walk is in
// progress is seen if it lands in a batch not yet read and missed otherwise; a key is never
// returned twice and keys always come in increasing order.
//
// Errors: when a read fails, Valid() turns false and status() says why. An iterator of a store
// opened with IndexMode::kHash is never valid and its status() is kFailedPrecondition.
//
// Thread contract: an Iterator is used by one thread at a time (external synchronization);
// different iterators may be used by different threads at once. It borrows the DB that made it,
// which must outlive it; after DB::Close() the next batch fails with kFailedPrecondition.
#ifndef NVKV_ITERATOR_H_
#define NVKV_ITERATOR_H_

#include <cstddef>
#include <memory>
#include <string_view>

#include "absl/status/status.h"

namespace nvkv {

class DB;

class Iterator {
 public:
  // Key/value pairs read from the store per batch.
  static constexpr size_t kBatchKeys = 128;

  ~Iterator();
  Iterator(const Iterator&) = delete;
  Iterator& operator=(const Iterator&) = delete;

  // True when the iterator is at a key/value pair.
  bool Valid() const;

  // Moves to the first key of the store (not valid if the store is empty).
  void SeekToFirst();
  // Moves to the first key >= target (not valid if there is none).
  void Seek(std::string_view target);
  // Moves to the next key. REQUIRES: Valid().
  void Next();

  // The current pair. REQUIRES: Valid(). The views stay valid until the iterator is moved or
  // destroyed.
  std::string_view key() const;
  std::string_view value() const;

  // OK unless a read failed (then Valid() is false), or the store is not in ordered mode
  // (kFailedPrecondition). A Seek clears an earlier read error and tries again.
  absl::Status status() const;

 private:
  friend class DB;
  struct Rep;
  explicit Iterator(std::unique_ptr<Rep> rep);

  std::unique_ptr<Rep> rep_;
};

}  // namespace nvkv

#endif  // NVKV_ITERATOR_H_
