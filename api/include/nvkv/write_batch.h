// WriteBatch: Puts and Deletes that DB::Write applies atomically, in order: after any crash
// either all of them are visible or none is. A later entry for the same key wins.
//
//   nvkv::WriteBatch batch;
//   batch.Delete("old-key");
//   batch.Put("new-key", value);
//   absl::Status s = db->Write(batch);
//
// The batch copies every key and value it is given; the caller's buffers may be reused at once.
// Entries are checked when the batch is written (DB::Write), not when they are added.
//
// Thread contract: const methods may be called from several threads at once; a non-const method
// needs exclusive access (as for std::string).
#ifndef NVKV_WRITE_BATCH_H_
#define NVKV_WRITE_BATCH_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace nvkv {

class DB;

class WriteBatch {
 public:
  WriteBatch();
  ~WriteBatch();
  WriteBatch(const WriteBatch&);
  WriteBatch& operator=(const WriteBatch&);
  WriteBatch(WriteBatch&&) noexcept;
  WriteBatch& operator=(WriteBatch&&) noexcept;

  // Stores `key` = `value` when the batch is written.
  void Put(std::string_view key, std::string_view value);
  // Removes `key` when the batch is written (nothing happens if it is absent).
  void Delete(std::string_view key);
  // Empties the batch (keeping its memory for reuse).
  void Clear();

  // Number of Put and Delete entries.
  size_t Count() const;
  // Bytes the batch occupies in the log, approximately: its keys and values plus a fixed
  // per-entry overhead. DB::Write takes every batch of up to DB::max_batch_bytes() and refuses
  // a larger one: split batches before they pass it.
  size_t ApproximateSize() const;

  // The per-entry overhead ApproximateSize() counts (a record header in the log).
  static constexpr size_t kEntryOverheadBytes = 24;

 private:
  friend class DB;

  struct Entry {
    bool is_delete;
    size_t key_bytes;
    size_t value_bytes;
  };

  // Every key and value back to back, in entry order.
  std::string bytes_;
  std::vector<Entry> entries_;
};

}  // namespace nvkv

#endif  // NVKV_WRITE_BATCH_H_
