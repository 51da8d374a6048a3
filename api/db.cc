// nvkv::DB and nvkv::Iterator over kv::Engine. The engine takes the public value types (options,
// stats, check reports) as they are; keys and values are checked here against the public limits
// before they reach it.
#include "nvkv/db.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kv/engine.h"

namespace nvkv {
namespace {

// The engine reads the public Options as they are; its refusals that force_format overrides
// carry the payload DB documents.
static_assert(std::string_view(DB::kFormatRefusedPayload) == kv::kFormatRefusedPayload);

// The DBs whose ForEachLive is running `visit` on this thread (innermost last; walks of
// different DBs may nest). On such a DB, CompactAll, Checkpoint, Check and ForEachLive would
// wait for the compaction lock the walk holds, so they refuse instead.
thread_local std::vector<const void*> tls_visiting_dbs;

bool IsVisiting(const void* db) {
  return std::find(tls_visiting_dbs.begin(), tls_visiting_dbs.end(), db) !=
         tls_visiting_dbs.end();
}

absl::Status InsideVisitError(const char* what) {
  return absl::FailedPreconditionError(
      absl::StrCat(what, " cannot be called from inside a ForEachLive visitor"));
}

// ----- Argument checks (the engine checks too; these name the public limit). -----

absl::Status CheckKey(std::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("empty key");
  if (key.size() > DB::kMaxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("key of ", key.size(),
                                                   " bytes is over the limit of ",
                                                   DB::kMaxKeyBytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status CheckValue(std::string_view value, uint32_t max_value_bytes) {
  if (value.size() > max_value_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("value of ", value.size(),
                                                   " bytes is over the limit of ",
                                                   max_value_bytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status ClosedError() { return absl::FailedPreconditionError("the DB is closed"); }

}  // namespace

// ===== DB =====

struct DB::Rep {
  std::unique_ptr<kv::Engine> engine;
  IndexMode index_mode = IndexMode::kHash;
  // Fixed by the store's geometry at Open; read on every write.
  uint32_t max_value_bytes = 0;
  uint64_t max_batch_bytes = 0;
  // Taken as Close() begins, for GetStats() afterwards: the engine promises nothing after its
  // Close() but kFailedPrecondition, which Stats() cannot return.
  Stats stats_at_close;
  // Set by Close(). Close() runs alone (see db.h), so later calls see it; atomic only so that
  // a caller breaking that rule gets a clean error more often than a data race on this flag.
  std::atomic<bool> closed{false};

  bool is_closed() const { return closed.load(std::memory_order_acquire); }
};

DB::DB(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}

// Destroying the engine closes it (flush, stop threads, release the lock) when Close() did not.
DB::~DB() = default;

absl::StatusOr<std::unique_ptr<DB>> DB::Open(const Options& options, const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("empty store path");
  absl::StatusOr<std::unique_ptr<kv::Engine>> engine = kv::Engine::Open(path, options);
  if (!engine.ok()) return engine.status();
  auto rep = std::make_unique<Rep>();
  rep->engine = std::move(*engine);
  rep->index_mode = rep->engine->index_mode();
  rep->max_value_bytes = rep->engine->max_value_bytes();
  rep->max_batch_bytes = rep->engine->max_batch_bytes();
  return std::unique_ptr<DB>(new DB(std::move(rep)));
}

absl::Status DB::Put(std::string_view key, std::string_view value,
                     const WriteOptions& options) {
  if (rep_->is_closed()) return ClosedError();
  if (absl::Status status = CheckKey(key); !status.ok()) return status;
  if (absl::Status status = CheckValue(value, max_value_bytes()); !status.ok()) return status;
  const kv::WriteOp op{.is_delete = false, .key = key, .value = value};
  return rep_->engine->Write({&op, 1}, options.durable);
}

absl::Status DB::Delete(std::string_view key, const WriteOptions& options) {
  if (rep_->is_closed()) return ClosedError();
  if (absl::Status status = CheckKey(key); !status.ok()) return status;
  const kv::WriteOp op{.is_delete = true, .key = key, .value = {}};
  return rep_->engine->Write({&op, 1}, options.durable);
}

absl::Status DB::Write(const WriteBatch& batch, const WriteOptions& options) {
  if (rep_->is_closed()) return ClosedError();
  if (batch.entries_.empty()) return absl::OkStatus();
  std::vector<kv::WriteOp> ops;
  if (absl::Status status = BatchOps(batch, &ops); !status.ok()) return status;
  return rep_->engine->Write(ops, options.durable);
}

absl::Status DB::PutAsync(std::string_view key, std::string_view value,
                          std::function<void(absl::Status)> done, const WriteOptions& options) {
  if (rep_->is_closed()) return ClosedError();
  if (absl::Status status = CheckKey(key); !status.ok()) return status;
  if (absl::Status status = CheckValue(value, max_value_bytes()); !status.ok()) return status;
  if (!done) return absl::InvalidArgumentError("PutAsync: empty callback");
  const kv::WriteOp op{.is_delete = false, .key = key, .value = value};
  return rep_->engine->WriteAsync({&op, 1}, options.durable, std::move(done));
}

absl::Status DB::DeleteAsync(std::string_view key, std::function<void(absl::Status)> done,
                             const WriteOptions& options) {
  if (rep_->is_closed()) return ClosedError();
  if (absl::Status status = CheckKey(key); !status.ok()) return status;
  if (!done) return absl::InvalidArgumentError("DeleteAsync: empty callback");
  const kv::WriteOp op{.is_delete = true, .key = key, .value = {}};
  return rep_->engine->WriteAsync({&op, 1}, options.durable, std::move(done));
}

absl::Status DB::WriteAsync(const WriteBatch& batch, std::function<void(absl::Status)> done,
                            const WriteOptions& options) {
  if (rep_->is_closed()) return ClosedError();
  if (!done) return absl::InvalidArgumentError("WriteAsync: empty callback");
  std::vector<kv::WriteOp> ops;
  if (absl::Status status = BatchOps(batch, &ops); !status.ok()) return status;
  return rep_->engine->WriteAsync(ops, options.durable, std::move(done));
}

absl::Status DB::BatchOps(const WriteBatch& batch, std::vector<kv::WriteOp>* ops) const {
  const uint32_t max_value = max_value_bytes();
  ops->reserve(batch.entries_.size());
  std::string_view bytes = batch.bytes_;
  for (size_t i = 0; i < batch.entries_.size(); ++i) {
    const WriteBatch::Entry& entry = batch.entries_[i];
    kv::WriteOp op;
    op.is_delete = entry.is_delete;
    op.key = bytes.substr(0, entry.key_bytes);
    op.value = bytes.substr(entry.key_bytes, entry.value_bytes);
    bytes.remove_prefix(entry.key_bytes + entry.value_bytes);
    absl::Status status = CheckKey(op.key);
    if (status.ok()) status = CheckValue(op.value, max_value);
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("WriteBatch entry ", i, ": ", status.message()));
    }
    ops->push_back(op);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> DB::Get(std::string_view key) {
  if (rep_->is_closed()) return ClosedError();
  if (absl::Status status = CheckKey(key); !status.ok()) return status;
  return rep_->engine->Get(key);
}

std::vector<absl::StatusOr<std::string>> DB::MultiGet(std::span<const std::string_view> keys) {
  std::vector<absl::StatusOr<std::string>> results;
  if (rep_->is_closed()) {
    results.assign(keys.size(), ClosedError());
    return results;
  }
  // Bad keys are answered here; the rest go to the engine in one call. valid_at[j] is the
  // position in `keys` of valid_keys[j].
  std::vector<std::string_view> valid_keys;
  std::vector<size_t> valid_at;
  valid_keys.reserve(keys.size());
  valid_at.reserve(keys.size());
  results.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    absl::Status status = CheckKey(keys[i]);
    if (status.ok()) {
      valid_keys.push_back(keys[i]);
      valid_at.push_back(i);
      results.emplace_back(std::string());  // a placeholder, overwritten below
    } else {
      results.emplace_back(std::move(status));
    }
  }
  if (valid_keys.empty()) return results;
  std::vector<absl::StatusOr<std::string>> found;
  rep_->engine->MultiGet(valid_keys, &found);
  for (size_t j = 0; j < valid_keys.size(); ++j) {
    results[valid_at[j]] =
        j < found.size() ? std::move(found[j])
                         : absl::InternalError("MultiGet: the engine returned too few results");
  }
  return results;
}

absl::Status DB::GetAsync(std::string_view key,
                          std::function<void(absl::StatusOr<std::string>)> done) {
  if (rep_->is_closed()) return ClosedError();
  if (absl::Status status = CheckKey(key); !status.ok()) return status;
  if (!done) return absl::InvalidArgumentError("GetAsync: empty callback");
  return rep_->engine->GetAsync(key, std::move(done));
}

absl::StatusOr<uint32_t> DB::Poll(uint32_t min_complete) {
  if (rep_->is_closed()) return ClosedError();
  // Waiting for more than is pending would never return.
  return rep_->engine->Poll(std::min(
      min_complete, rep_->engine->pending_reads() + rep_->engine->pending_writes()));
}

uint32_t DB::PendingReads() {
  if (rep_->is_closed()) return 0;
  return rep_->engine->pending_reads();
}

uint32_t DB::PendingWrites() {
  if (rep_->is_closed()) return 0;
  return rep_->engine->pending_writes();
}

absl::Status DB::Scan(std::string_view start, std::string_view end, size_t limit,
                      std::vector<std::pair<std::string, std::string>>* out) {
  out->clear();
  if (rep_->is_closed()) return ClosedError();
  if (rep_->index_mode != IndexMode::kOrdered) {
    return absl::FailedPreconditionError(
        "Scan and iterators need a store opened with IndexMode::kOrdered");
  }
  if (limit == 0) return absl::OkStatus();
  return rep_->engine->Scan(start, end, limit, out);
}

absl::Status DB::Flush() {
  if (rep_->is_closed()) return ClosedError();
  return rep_->engine->Flush();
}

absl::Status DB::Checkpoint() {
  if (rep_->is_closed()) return ClosedError();
  if (IsVisiting(this)) return InsideVisitError("Checkpoint");
  return rep_->engine->Checkpoint();
}

absl::Status DB::CompactAll() {
  if (rep_->is_closed()) return ClosedError();
  if (IsVisiting(this)) return InsideVisitError("CompactAll");
  return rep_->engine->CompactAll();
}

absl::StatusOr<CheckReport> DB::Check(const ProgressCallback& progress) {
  if (rep_->is_closed()) return ClosedError();
  if (IsVisiting(this)) return InsideVisitError("Check");
  return rep_->engine->Check(progress);
}

absl::Status DB::ForEachLive(
    const std::function<absl::Status(std::string_view key, std::string_view value)>& visit,
    const ProgressCallback& progress) {
  if (rep_->is_closed()) return ClosedError();
  if (IsVisiting(this)) return InsideVisitError("ForEachLive");
  if (!visit) return absl::InvalidArgumentError("ForEachLive: empty visitor");
  return rep_->engine->ForEachLive(
      [this, &visit](std::string_view key, std::string_view value) {
        tls_visiting_dbs.push_back(this);
        absl::Status visited = visit(key, value);
        tls_visiting_dbs.pop_back();
        return visited;
      },
      progress);
}

absl::StatusOr<DeviceStats> DB::InspectDevice(const std::string& path) {
  return kv::Engine::InspectDevice(path);
}

Stats DB::GetStats() {
  if (rep_->is_closed()) return rep_->stats_at_close;
  return rep_->engine->Stats();
}

absl::Status DB::Close() {
  if (rep_->is_closed()) return ClosedError();
  rep_->stats_at_close = rep_->engine->Stats();
  rep_->closed.store(true, std::memory_order_release);
  // The engine object stays alive (refusing calls) until the DB is destroyed.
  return rep_->engine->Close();
}

uint32_t DB::max_value_bytes() const { return rep_->max_value_bytes; }

uint64_t DB::max_batch_bytes() const { return rep_->max_batch_bytes; }

// ===== Iterator =====

// Walks the store in batches of DB::Scan. Invariants:
//   - valid: batch[position] is the current pair;
//   - !valid && status.ok(): before the first Seek, or past the last key;
//   - !valid && !status.ok(): a Scan failed (or the store is in hash mode).
struct Iterator::Rep {
  DB* db = nullptr;  // borrowed; outlives the iterator (db.h)
  bool ordered = false;
  absl::Status status;
  std::vector<std::pair<std::string, std::string>> batch;
  size_t position = 0;
  bool valid = false;

  // Reads the next batch, starting at `start`. With `skip_start`, a pair whose key equals
  // `start` is skipped: it is the key the previous batch ended on. Asking for one pair more
  // keeps the batch size at kBatchKeys new pairs. The walk ends when a batch brings nothing new
  // (not merely when it is short), so an engine that returns fewer pairs than asked for is no
  // reason to stop early.
  void Fill(const std::string& start, bool skip_start) {
    valid = false;
    position = 0;
    status = db->Scan(start, "", kBatchKeys + (skip_start ? 1 : 0), &batch);
    if (!status.ok()) {
      batch.clear();
      return;
    }
    if (skip_start && !batch.empty() && batch.front().first == start) position = 1;
    valid = position < batch.size();
  }
};

Iterator::Iterator(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}

Iterator::~Iterator() = default;

bool Iterator::Valid() const { return rep_->valid; }

void Iterator::SeekToFirst() { Seek(""); }

void Iterator::Seek(std::string_view target) {
  if (!rep_->ordered) return;  // status() stays kFailedPrecondition
  rep_->Fill(std::string(target), /*skip_start=*/false);
}

void Iterator::Next() {
  if (!rep_->valid) return;  // REQUIRES: Valid(); a no-op rather than undefined
  ++rep_->position;
  if (rep_->position < rep_->batch.size()) return;
  std::string last = std::move(rep_->batch.back().first);
  rep_->Fill(last, /*skip_start=*/true);
}

std::string_view Iterator::key() const { return rep_->batch[rep_->position].first; }

std::string_view Iterator::value() const { return rep_->batch[rep_->position].second; }

absl::Status Iterator::status() const { return rep_->status; }

std::unique_ptr<Iterator> DB::NewIterator() {
  auto rep = std::make_unique<Iterator::Rep>();
  rep->db = this;
  rep->ordered = rep_->index_mode == IndexMode::kOrdered;
  if (!rep->ordered) {
    rep->status = absl::FailedPreconditionError(
        "iterators need a store opened with IndexMode::kOrdered");
  }
  return std::unique_ptr<Iterator>(new Iterator(std::move(rep)));
}

}  // namespace nvkv
