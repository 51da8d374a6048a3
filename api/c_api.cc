// The C API (nvkv/nvkv_c.h): each function converts its arguments, calls nvkv::DB, and converts
// the result back, following the numbered conventions of the header. No logic of its own.
#include "nvkv/nvkv_c.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nvkv/db.h"

#ifndef NVKV_VERSION_STRING
#error "the build defines NVKV_VERSION_STRING (project version)"
#endif

struct nvkv_t {
  std::unique_ptr<nvkv::DB> db;
};
struct nvkv_options_t {
  nvkv::Options options;
};
struct nvkv_writeoptions_t {
  nvkv::WriteOptions options;
};
struct nvkv_writebatch_t {
  nvkv::WriteBatch batch;
  // An op nvkv_writebatch_put/delete could not add (no memory): nvkv_write refuses the batch
  // until nvkv_writebatch_clear, so that a partial batch is never written.
  bool incomplete = false;
};
struct nvkv_iterator_t {
  std::unique_ptr<nvkv::Iterator> iterator;
  absl::Status failure;  // an exception caught in a move of the iterator (then it is invalid)
};

namespace {

// The C constants are the C++ ones; a change on either side fails here.
static_assert(NVKV_MAX_KEY_BYTES == nvkv::DB::kMaxKeyBytes);
static_assert(NVKV_INDEX_HASH == static_cast<int>(nvkv::IndexMode::kHash));
static_assert(NVKV_INDEX_ORDERED == static_cast<int>(nvkv::IndexMode::kOrdered));
static_assert(NVKV_INDEX_AS_FORMATTED == static_cast<int>(nvkv::IndexMode::kAsFormatted));
static_assert(NVKV_COMPACTION_COST_BENEFIT ==
              static_cast<int>(nvkv::CompactionPolicy::kCostBenefit));
static_assert(NVKV_COMPACTION_GREEDY == static_cast<int>(nvkv::CompactionPolicy::kGreedy));
static_assert(NVKV_DURABLE_WRITES_AUTO == static_cast<int>(nvkv::DurableWrites::kAuto));
static_assert(NVKV_DURABLE_WRITES_FUA == static_cast<int>(nvkv::DurableWrites::kFua));
static_assert(NVKV_DURABLE_WRITES_FLUSH == static_cast<int>(nvkv::DurableWrites::kFlush));
static_assert(NVKV_BACKEND_AUTO == static_cast<int>(nvkv::Backend::kAuto));
static_assert(NVKV_BACKEND_NVME_PASSTHROUGH ==
              static_cast<int>(nvkv::Backend::kNvmePassthrough));
static_assert(NVKV_BACKEND_DIRECT_FILE == static_cast<int>(nvkv::Backend::kDirectFile));
static_assert(NVKV_BACKEND_SYNC_FILE == static_cast<int>(nvkv::Backend::kSyncFile));
static_assert(NVKV_NOT_FOUND == static_cast<int>(absl::StatusCode::kNotFound));
static_assert(NVKV_FAILED_PRECONDITION == static_cast<int>(absl::StatusCode::kFailedPrecondition));
static_assert(NVKV_DATA_LOSS == static_cast<int>(absl::StatusCode::kDataLoss));
static_assert(NVKV_UNAUTHENTICATED == static_cast<int>(absl::StatusCode::kUnauthenticated));

// Convention (5): a malloc'd copy with a NUL after the bytes. NULL when out of memory.
char* CopyBytes(std::string_view bytes) {
  char* copy = static_cast<char*>(std::malloc(bytes.size() + 1));
  if (copy == nullptr) return nullptr;
  if (!bytes.empty()) std::memcpy(copy, bytes.data(), bytes.size());
  copy[bytes.size()] = '\0';
  return copy;
}

std::string ErrorText(const absl::Status& status) {
  return absl::StrCat(absl::StatusCodeToString(status.code()), ": ", status.message());
}

// Convention (2): replaces *errptr on failure, leaves it alone on success. Returns status.ok().
bool SaveError(const absl::Status& status, char** errptr) {
  if (status.ok()) return true;
  std::free(*errptr);
  *errptr = CopyBytes(ErrorText(status));
  return false;
}

// Convention (9): no exception leaves the library. The library throws none of its own, but the
// standard library's allocations may (std::bad_alloc). Guard runs an entry point's body and turns
// an exception into kResourceExhausted (bad_alloc) or kInternal, saved through errptr when there
// is one, and returns `on_exception`.
absl::Status StatusOfCurrentException() noexcept {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory");
  } catch (...) {
    return absl::InternalError("unexpected C++ exception");
  }
}

// Saves `status` without allocating more than the message itself (no std::string): memory may
// be what ran out.
void SaveErrorNoThrow(const absl::Status& status, char** errptr) noexcept {
  if (errptr == nullptr) return;
  const std::string_view code = status.code() == absl::StatusCode::kResourceExhausted
                                    ? std::string_view("RESOURCE_EXHAUSTED")
                                    : std::string_view("INTERNAL");
  const absl::string_view message = status.message();
  char* text = static_cast<char*>(std::malloc(code.size() + 2 + message.size() + 1));
  if (text == nullptr) return;  // *errptr keeps what it had
  std::memcpy(text, code.data(), code.size());
  std::memcpy(text + code.size(), ": ", 2);
  std::memcpy(text + code.size() + 2, message.data(), message.size());
  text[code.size() + 2 + message.size()] = '\0';
  std::free(*errptr);
  *errptr = text;
}

template <typename Result, typename Body>
Result Guard(char** errptr, Result on_exception, Body&& body) noexcept {
  try {
    return body();
  } catch (...) {
    SaveErrorNoThrow(StatusOfCurrentException(), errptr);
    return on_exception;
  }
}

template <typename Body>
void Guard(char** errptr, Body&& body) noexcept {
  try {
    body();
  } catch (...) {
    SaveErrorNoThrow(StatusOfCurrentException(), errptr);
  }
}

std::string_view View(const char* data, size_t length) {
  return length == 0 ? std::string_view() : std::string_view(data, length);
}

// The C enums arrive as int. A value the C++ enum does not have (255 stands for every value
// that does not fit its uint8_t) makes DB::Open fail with kInvalidArgument.
template <typename Enum>
Enum EnumFromC(int value) {
  return static_cast<Enum>(value < 0 || value > 255 ? 255 : value);
}

nvkv::WriteOptions WriteOptionsOf(const nvkv_writeoptions_t* options) {
  return options == nullptr ? nvkv::WriteOptions{} : options->options;
}

// An op that cannot be added (no memory) marks the batch incomplete: nvkv_write refuses it.
template <typename Add>
void AddToBatch(nvkv_writebatch_t* batch, Add add) noexcept {
  try {
    add();
  } catch (...) {
    batch->incomplete = true;
  }
}

// A move that throws leaves the iterator invalid, with the error for nvkv_iter_get_error.
template <typename Move>
void MoveIterator(nvkv_iterator_t* iter, Move move) noexcept {
  try {
    move();
  } catch (...) {
    iter->failure = StatusOfCurrentException();
  }
}

// A C write callback as the C++ API's: the error text lives for the call only.
std::function<void(absl::Status)> WriteCallbackOf(nvkv_write_callback done, void* arg) {
  return [done, arg](absl::Status status) {
    if (status.ok()) {
      done(arg, nullptr);
      return;
    }
    std::string err;
    try {
      err = ErrorText(status);
    } catch (...) {
      done(arg, "RESOURCE_EXHAUSTED: out of memory");
      return;
    }
    done(arg, err.c_str());
  };
}

// An asynchronous call without a callback would crash when its outcome is due: refused at once
// (true when `missing`).
bool RefuseNullCallback(bool missing, char** errptr) {
  if (!missing) return false;
  Guard(errptr, [&] { SaveError(absl::InvalidArgumentError("no callback (done is NULL)"), errptr); });
  return true;
}

// A batch missing an op (nvkv_writebatch_t::incomplete) is never written: true when refused.
bool RefuseIncompleteBatch(const nvkv_writebatch_t& batch, char** errptr) {
  if (!batch.incomplete) return false;
  SaveErrorNoThrow(absl::ResourceExhaustedError(
                       "out of memory: an op could not be added to this batch, so none of it "
                       "is written (nvkv_writebatch_clear to start again)"),
                   errptr);
  return true;
}

}  // namespace

extern "C" {

int nvkv_errcode(const char* err) {
  if (err == nullptr) return NVKV_OK;
  return Guard(nullptr, int{NVKV_UNKNOWN}, [&] {
  const std::string_view text(err);
  for (int code = NVKV_CANCELLED; code <= NVKV_UNAUTHENTICATED; ++code) {
    const std::string prefix =
        absl::StrCat(absl::StatusCodeToString(static_cast<absl::StatusCode>(code)), ":");
    if (text.substr(0, prefix.size()) == prefix) return code;
  }
  return int{NVKV_UNKNOWN};
  });
}

void nvkv_free(void* ptr) { std::free(ptr); }

const char* nvkv_version(void) { return NVKV_VERSION_STRING; }

// ----- Options -----

nvkv_options_t* nvkv_options_create(void) { return new (std::nothrow) nvkv_options_t; }
void nvkv_options_destroy(nvkv_options_t* options) { delete options; }

void nvkv_options_set_create_if_missing(nvkv_options_t* o, uint8_t v) {
  o->options.create_if_missing = v != 0;
}
void nvkv_options_set_error_if_exists(nvkv_options_t* o, uint8_t v) {
  o->options.error_if_exists = v != 0;
}
void nvkv_options_set_force_format(nvkv_options_t* o, uint8_t v) {
  o->options.force_format = v != 0;
}
void nvkv_options_set_read_only(nvkv_options_t* o, uint8_t v) { o->options.read_only = v != 0; }
void nvkv_options_set_grow_store(nvkv_options_t* o, uint8_t v) { o->options.grow_store = v != 0; }
void nvkv_options_set_open_degraded(nvkv_options_t* o, uint8_t v) {
  o->options.open_degraded = v != 0;
}
void nvkv_options_set_capacity_bytes(nvkv_options_t* o, uint64_t v) {
  o->options.capacity_bytes = v;
}
void nvkv_options_set_index_mode(nvkv_options_t* o, int v) {
  o->options.index_mode = EnumFromC<nvkv::IndexMode>(v);
}
void nvkv_options_set_max_write_delay_us(nvkv_options_t* o, uint32_t v) {
  o->options.max_write_delay_us = v;
}
void nvkv_options_set_background_compaction(nvkv_options_t* o, uint8_t v) {
  o->options.background_compaction = v != 0;
}
void nvkv_options_set_compaction_policy(nvkv_options_t* o, int v) {
  o->options.compaction_policy = EnumFromC<nvkv::CompactionPolicy>(v);
}
void nvkv_options_set_durable_writes(nvkv_options_t* o, int v) {
  o->options.durable_writes = EnumFromC<nvkv::DurableWrites>(v);
}
void nvkv_options_set_page_bytes(nvkv_options_t* o, uint32_t v) { o->options.page_bytes = v; }
void nvkv_options_set_segment_bytes(nvkv_options_t* o, uint32_t v) {
  o->options.segment_bytes = v;
}
void nvkv_options_set_shard_count(nvkv_options_t* o, uint32_t v) { o->options.shard_count = v; }
void nvkv_options_set_page_buffers_per_shard(nvkv_options_t* o, uint32_t v) {
  o->options.page_buffers_per_shard = v;
}
void nvkv_options_set_read_queue_depth(nvkv_options_t* o, uint32_t v) {
  o->options.read_queue_depth = v;
}
void nvkv_options_set_write_queue_depth(nvkv_options_t* o, uint32_t v) {
  o->options.write_queue_depth = v;
}
void nvkv_options_set_cache_bytes(nvkv_options_t* o, uint64_t v) { o->options.cache_bytes = v; }
void nvkv_options_set_recovery_memory_bytes(nvkv_options_t* o, uint64_t v) {
  o->options.recovery_memory_bytes = v;
}
void nvkv_options_set_checkpoint_log_ratio(nvkv_options_t* o, uint32_t v) {
  o->options.checkpoint_log_ratio = v;
}
void nvkv_options_set_checkpoint_min_log_bytes(nvkv_options_t* o, uint64_t v) {
  o->options.checkpoint_min_log_bytes = v;
}
void nvkv_options_set_lock_wait_ms(nvkv_options_t* o, uint32_t v) { o->options.lock_wait_ms = v; }
void nvkv_options_set_backend(nvkv_options_t* o, int v) {
  o->options.backend = EnumFromC<nvkv::Backend>(v);
}
void nvkv_options_set_allow_sync_fallback(nvkv_options_t* o, uint8_t v) {
  o->options.allow_sync_fallback = v != 0;
}
void nvkv_options_set_single_issuer(nvkv_options_t* o, uint8_t v) {
  o->options.single_issuer = v != 0;
}
void nvkv_options_set_register_ring_fd(nvkv_options_t* o, uint8_t v) {
  o->options.register_ring_fd = v != 0;
}
void nvkv_options_set_register_file(nvkv_options_t* o, uint8_t v) {
  o->options.register_file = v != 0;
}
void nvkv_options_set_fixed_buffers(nvkv_options_t* o, uint8_t v) {
  o->options.fixed_buffers = v != 0;
}
void nvkv_options_set_sqpoll(nvkv_options_t* o, uint8_t v) { o->options.sqpoll = v != 0; }
void nvkv_options_set_sqpoll_idle_ms(nvkv_options_t* o, uint32_t v) {
  o->options.sqpoll_idle_ms = v;
}
void nvkv_options_set_iopoll(nvkv_options_t* o, uint8_t v) { o->options.iopoll = v != 0; }

nvkv_writeoptions_t* nvkv_writeoptions_create(void) {
  return new (std::nothrow) nvkv_writeoptions_t;
}
void nvkv_writeoptions_destroy(nvkv_writeoptions_t* options) { delete options; }
void nvkv_writeoptions_set_durable(nvkv_writeoptions_t* o, uint8_t v) {
  o->options.durable = v != 0;
}

// ----- Open and close -----

nvkv_t* nvkv_open(const nvkv_options_t* options, const char* path, char** errptr) {
  return Guard(errptr, static_cast<nvkv_t*>(nullptr), [&]() -> nvkv_t* {
    absl::StatusOr<std::unique_ptr<nvkv::DB>> db = nvkv::DB::Open(options->options, path);
    if (!SaveError(db.status(), errptr)) return nullptr;
    return new nvkv_t{std::move(*db)};
  });
}

void nvkv_close(nvkv_t* db, char** errptr) {
  Guard(errptr, [&] { SaveError(db->db->Close(), errptr); });
  delete db;
}

// ----- Writes -----

void nvkv_put(nvkv_t* db, const nvkv_writeoptions_t* options, const char* key, size_t keylen,
              const char* val, size_t vallen, char** errptr) {
  Guard(errptr, [&] {
    SaveError(db->db->Put(View(key, keylen), View(val, vallen), WriteOptionsOf(options)), errptr);
  });
}

void nvkv_delete(nvkv_t* db, const nvkv_writeoptions_t* options, const char* key, size_t keylen,
                 char** errptr) {
  Guard(errptr, [&] {
    SaveError(db->db->Delete(View(key, keylen), WriteOptionsOf(options)), errptr);
  });
}

nvkv_writebatch_t* nvkv_writebatch_create(void) { return new (std::nothrow) nvkv_writebatch_t; }
void nvkv_writebatch_destroy(nvkv_writebatch_t* batch) { delete batch; }
void nvkv_writebatch_clear(nvkv_writebatch_t* batch) {
  batch->batch.Clear();
  batch->incomplete = false;
}
size_t nvkv_writebatch_count(const nvkv_writebatch_t* batch) { return batch->batch.Count(); }
void nvkv_writebatch_put(nvkv_writebatch_t* batch, const char* key, size_t keylen,
                         const char* val, size_t vallen) {
  AddToBatch(batch, [&] { batch->batch.Put(View(key, keylen), View(val, vallen)); });
}
void nvkv_writebatch_delete(nvkv_writebatch_t* batch, const char* key, size_t keylen) {
  AddToBatch(batch, [&] { batch->batch.Delete(View(key, keylen)); });
}

void nvkv_write(nvkv_t* db, const nvkv_writeoptions_t* options, const nvkv_writebatch_t* batch,
                char** errptr) {
  if (RefuseIncompleteBatch(*batch, errptr)) return;
  Guard(errptr, [&] { SaveError(db->db->Write(batch->batch, WriteOptionsOf(options)), errptr); });
}

void nvkv_put_async(nvkv_t* db, const nvkv_writeoptions_t* options, const char* key,
                    size_t keylen, const char* val, size_t vallen, nvkv_write_callback done,
                    void* arg, char** errptr) {
  if (RefuseNullCallback(done == nullptr, errptr)) return;
  Guard(errptr, [&] {
    SaveError(db->db->PutAsync(View(key, keylen), View(val, vallen), WriteCallbackOf(done, arg),
                               WriteOptionsOf(options)),
              errptr);
  });
}

void nvkv_delete_async(nvkv_t* db, const nvkv_writeoptions_t* options, const char* key,
                       size_t keylen, nvkv_write_callback done, void* arg, char** errptr) {
  if (RefuseNullCallback(done == nullptr, errptr)) return;
  Guard(errptr, [&] {
    SaveError(
        db->db->DeleteAsync(View(key, keylen), WriteCallbackOf(done, arg), WriteOptionsOf(options)),
        errptr);
  });
}

void nvkv_write_async(nvkv_t* db, const nvkv_writeoptions_t* options,
                      const nvkv_writebatch_t* batch, nvkv_write_callback done, void* arg,
                      char** errptr) {
  if (RefuseNullCallback(done == nullptr, errptr)) return;
  if (RefuseIncompleteBatch(*batch, errptr)) return;
  Guard(errptr, [&] {
    SaveError(db->db->WriteAsync(batch->batch, WriteCallbackOf(done, arg), WriteOptionsOf(options)),
              errptr);
  });
}

uint32_t nvkv_pending_writes(nvkv_t* db) { return db->db->PendingWrites(); }

void nvkv_flush(nvkv_t* db, char** errptr) {
  Guard(errptr, [&] { SaveError(db->db->Flush(), errptr); });
}

void nvkv_checkpoint(nvkv_t* db, char** errptr) {
  Guard(errptr, [&] { SaveError(db->db->Checkpoint(), errptr); });
}

void nvkv_compact_all(nvkv_t* db, char** errptr) {
  Guard(errptr, [&] { SaveError(db->db->CompactAll(), errptr); });
}

// ----- Reads -----

char* nvkv_get(nvkv_t* db, const char* key, size_t keylen, size_t* vallen, char** errptr) {
  *vallen = 0;
  return Guard(errptr, static_cast<char*>(nullptr), [&]() -> char* {
    absl::StatusOr<std::string> value = db->db->Get(View(key, keylen));
    if (absl::IsNotFound(value.status())) return nullptr;
    if (!SaveError(value.status(), errptr)) return nullptr;
    char* copy = CopyBytes(*value);
    if (copy == nullptr) {
      SaveError(absl::ResourceExhaustedError("out of memory copying the value"), errptr);
      return nullptr;
    }
    *vallen = value->size();
    return copy;
  });
}

void nvkv_multiget(nvkv_t* db, size_t num_keys, const char* const* keys, const size_t* keylens,
                   char** values, size_t* vallens, char** errs) {
  for (size_t i = 0; i < num_keys; ++i) {
    values[i] = nullptr;
    vallens[i] = 0;
    errs[i] = nullptr;
  }
  try {
    std::vector<std::string_view> views(num_keys);
    for (size_t i = 0; i < num_keys; ++i) views[i] = View(keys[i], keylens[i]);
    std::vector<absl::StatusOr<std::string>> results = db->db->MultiGet(views);
    for (size_t i = 0; i < num_keys; ++i) {
      if (absl::IsNotFound(results[i].status())) continue;
      if (!SaveError(results[i].status(), &errs[i])) continue;
      values[i] = CopyBytes(*results[i]);
      if (values[i] == nullptr) {
        SaveError(absl::ResourceExhaustedError("out of memory copying the value"), &errs[i]);
        continue;
      }
      vallens[i] = results[i]->size();
    }
  } catch (...) {
    // Every key gets the error; values already copied are freed.
    const absl::Status status = StatusOfCurrentException();
    for (size_t i = 0; i < num_keys; ++i) {
      std::free(values[i]);
      values[i] = nullptr;
      vallens[i] = 0;
      SaveErrorNoThrow(status, &errs[i]);
    }
  }
}

void nvkv_get_async(nvkv_t* db, const char* key, size_t keylen, nvkv_get_callback done,
                    void* arg, char** errptr) {
  if (RefuseNullCallback(done == nullptr, errptr)) return;
  auto on_done = [done, arg](absl::StatusOr<std::string> value) {
    if (value.ok()) {
      done(arg, 1, value->data(), value->size(), nullptr);
    } else if (absl::IsNotFound(value.status())) {
      done(arg, 0, nullptr, 0, nullptr);
    } else {
      std::string err;
      try {
        err = ErrorText(value.status());
      } catch (...) {
        done(arg, 0, nullptr, 0, "RESOURCE_EXHAUSTED: out of memory");
        return;
      }
      done(arg, 0, nullptr, 0, err.c_str());
    }
  };
  Guard(errptr, [&] {
    SaveError(db->db->GetAsync(View(key, keylen), std::move(on_done)), errptr);
  });
}

uint32_t nvkv_poll(nvkv_t* db, uint32_t min_complete, char** errptr) {
  return Guard(errptr, uint32_t{0}, [&]() -> uint32_t {
    absl::StatusOr<uint32_t> completed = db->db->Poll(min_complete);
    if (!SaveError(completed.status(), errptr)) return 0;
    return *completed;
  });
}

uint32_t nvkv_pending_reads(nvkv_t* db) { return db->db->PendingReads(); }

// ----- Iteration -----

void nvkv_walk(nvkv_t* db, nvkv_pair_callback visit, void* arg, char** errptr) {
  Guard(errptr, [&] {
    // A visitor that stops ends the walk with an error status, which `stopped` says is no
    // error of the walk's: it is not reported.
    bool stopped = false;
    const absl::Status status =
        db->db->ForEachLive([&](std::string_view key, std::string_view value) -> absl::Status {
          if (visit(arg, key.data(), key.size(), value.data(), value.size()) == 0) {
            return absl::OkStatus();
          }
          stopped = true;
          return absl::CancelledError("the visitor stopped the walk");
        });
    if (!stopped) SaveError(status, errptr);
  });
}

void nvkv_scan(nvkv_t* db, const char* start, size_t startlen, const char* end, size_t endlen,
               size_t limit, nvkv_pair_callback visit, void* arg, char** errptr) {
  Guard(errptr, [&] {
    const std::string_view last = View(end, endlen);
    std::unique_ptr<nvkv::Iterator> it = db->db->NewIterator();
    size_t visited = 0;
    for (it->Seek(View(start, startlen)); it->Valid(); it->Next()) {
      if ((limit != 0 && visited == limit) || (!last.empty() && it->key() >= last)) return;
      ++visited;
      if (visit(arg, it->key().data(), it->key().size(), it->value().data(),
                it->value().size()) != 0) {
        return;
      }
    }
    SaveError(it->status(), errptr);
  });
}

nvkv_iterator_t* nvkv_create_iterator(nvkv_t* db) {
  return Guard(nullptr, static_cast<nvkv_iterator_t*>(nullptr),
               [&] { return new nvkv_iterator_t{db->db->NewIterator(), absl::OkStatus()}; });
}
void nvkv_iter_destroy(nvkv_iterator_t* iter) { delete iter; }
uint8_t nvkv_iter_valid(const nvkv_iterator_t* iter) {
  return iter->failure.ok() && iter->iterator->Valid() ? 1 : 0;
}
void nvkv_iter_seek_to_first(nvkv_iterator_t* iter) {
  MoveIterator(iter, [&] { iter->iterator->SeekToFirst(); });
}
void nvkv_iter_seek(nvkv_iterator_t* iter, const char* key, size_t keylen) {
  MoveIterator(iter, [&] { iter->iterator->Seek(View(key, keylen)); });
}
void nvkv_iter_next(nvkv_iterator_t* iter) {
  MoveIterator(iter, [&] { iter->iterator->Next(); });
}
const char* nvkv_iter_key(const nvkv_iterator_t* iter, size_t* keylen) {
  const std::string_view key = iter->iterator->key();
  *keylen = key.size();
  return key.data();
}
const char* nvkv_iter_value(const nvkv_iterator_t* iter, size_t* vallen) {
  const std::string_view value = iter->iterator->value();
  *vallen = value.size();
  return value.data();
}
void nvkv_iter_get_error(const nvkv_iterator_t* iter, char** errptr) {
  if (!iter->failure.ok()) {
    SaveErrorNoThrow(iter->failure, errptr);
    return;
  }
  Guard(errptr, [&] { SaveError(iter->iterator->status(), errptr); });
}

// ----- Limits and statistics -----

uint32_t nvkv_max_value_bytes(nvkv_t* db) { return db->db->max_value_bytes(); }

char* nvkv_stats(nvkv_t* db, uint8_t json) {
  return Guard(nullptr, static_cast<char*>(nullptr), [&] {
    const nvkv::Stats stats = db->db->GetStats();
    return CopyBytes(json != 0 ? stats.ToJson() : stats.ToString());
  });
}

}  // extern "C"
