/* C API of nvkv: a thin wrapper over nvkv::DB (nvkv/db.h), for C programs and for languages
   that bind to C. The C++ header's comments define what each call does; this header adds only
   how C sees it.

   Conventions:
   (1) Every handle is opaque and made by a nvkv_*_create or nvkv_open call; destroy it with
       the matching nvkv_*_destroy (nvkv_close for nvkv_t). Pointer arguments must be non-NULL
       unless a function says otherwise.
   (2) A function that can fail takes `char** errptr` as its last argument; errptr itself must
       be non-NULL and *errptr must be NULL or an error string from an earlier call. On success
       *errptr is left unchanged. On failure the earlier string is freed and *errptr is set to
       a new one, "CODE: message" (e.g. "NOT_FOUND: ..."); free it with nvkv_free(). So a
       caller may set err = NULL once, make several calls and check err at the end.
   (3) nvkv_errcode() maps an error string to its code, one of the NVKV_* codes below (the
       codes of absl::StatusCode). Absence is not an error: nvkv_get returns NULL and leaves
       *errptr unchanged for a key that is not there.
   (4) Keys and values are byte arrays with explicit lengths; they may hold any bytes, zero
       included, and need no terminator. The library copies what it keeps; the caller's
       buffers may be reused as soon as a call returns.
   (5) Memory returned by the library (values, error strings, stats text) is allocated with
       malloc and owned by the caller, who frees it with nvkv_free(). Returned values carry a
       terminating NUL byte after the `*vallen` bytes, for convenience; *vallen excludes it.
   (6) Pointers returned by an iterator (nvkv_iter_key, nvkv_iter_value) stay owned by the
       iterator and valid until it is moved or destroyed.
   (7) Booleans are uint8_t: 0 is false, anything else true.
   (8) Threads: an nvkv_t may be used from many threads at once (as nvkv::DB), except that
       nvkv_close must run alone. Options, write options, batches and iterators are used by one
       thread at a time. Asynchronous reads belong to the thread that started them.
   (9) No C++ exception leaves the library. Running out of memory is an error with code
       NVKV_RESOURCE_EXHAUSTED: through errptr; for calls without one, a NULL (or 0) result,
       the iterator becoming invalid (nvkv_iter_get_error says why), or, for
       nvkv_writebatch_put and _delete, the batch refusing to be written until cleared.
*/
#ifndef NVKV_NVKV_C_H_
#define NVKV_NVKV_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ----- Handles ----- */
typedef struct nvkv_t nvkv_t;
typedef struct nvkv_options_t nvkv_options_t;
typedef struct nvkv_writeoptions_t nvkv_writeoptions_t;
typedef struct nvkv_writebatch_t nvkv_writebatch_t;
typedef struct nvkv_iterator_t nvkv_iterator_t;

/* ----- Error codes (absl::StatusCode values; never renumbered) ----- */
enum {
  NVKV_OK = 0,
  NVKV_CANCELLED = 1,
  NVKV_UNKNOWN = 2,
  NVKV_INVALID_ARGUMENT = 3,
  NVKV_DEADLINE_EXCEEDED = 4,
  NVKV_NOT_FOUND = 5,
  NVKV_ALREADY_EXISTS = 6,
  NVKV_PERMISSION_DENIED = 7,
  NVKV_RESOURCE_EXHAUSTED = 8,
  NVKV_FAILED_PRECONDITION = 9,
  NVKV_ABORTED = 10,
  NVKV_OUT_OF_RANGE = 11,
  NVKV_UNIMPLEMENTED = 12,
  NVKV_INTERNAL = 13,
  NVKV_UNAVAILABLE = 14,
  NVKV_DATA_LOSS = 15,
  NVKV_UNAUTHENTICATED = 16
};

/* The code of an error string from this library; NVKV_OK for NULL, NVKV_UNKNOWN for a string
   that does not start with a known code. */
extern int nvkv_errcode(const char* err);

/* Frees memory returned by this library (values, error strings, stats text). NULL is fine. */
extern void nvkv_free(void* ptr);

/* The library's version, "MAJOR.MINOR.PATCH"; a static string, not to be freed. */
extern const char* nvkv_version(void);

/* Longest key in bytes (nvkv::DB::kMaxKeyBytes). */
#define NVKV_MAX_KEY_BYTES 1024

/* ----- Options (see nvkv/options.h for meaning, units and defaults) ----- */
enum { NVKV_INDEX_HASH = 0, NVKV_INDEX_ORDERED = 1, NVKV_INDEX_AS_FORMATTED = 2 };
enum { NVKV_COMPACTION_COST_BENEFIT = 0, NVKV_COMPACTION_GREEDY = 1 };
enum { NVKV_DURABLE_WRITES_AUTO = 0, NVKV_DURABLE_WRITES_FUA = 1, NVKV_DURABLE_WRITES_FLUSH = 2 };
enum {
  NVKV_BACKEND_AUTO = 0,
  NVKV_BACKEND_NVME_PASSTHROUGH = 1,
  NVKV_BACKEND_DIRECT_FILE = 2,
  NVKV_BACKEND_SYNC_FILE = 3
};

/* The defaults of nvkv::Options. */
extern nvkv_options_t* nvkv_options_create(void);
extern void nvkv_options_destroy(nvkv_options_t* options);
extern void nvkv_options_set_create_if_missing(nvkv_options_t* options, uint8_t value);
extern void nvkv_options_set_error_if_exists(nvkv_options_t* options, uint8_t value);
extern void nvkv_options_set_force_format(nvkv_options_t* options, uint8_t value);
/* Options::read_only: a shared lock, nothing written; writes fail with NVKV_FAILED_PRECONDITION. */
extern void nvkv_options_set_read_only(nvkv_options_t* options, uint8_t value);
/* Options::lock_wait_ms: how long nvkv_open waits for a store another opener holds. */
extern void nvkv_options_set_lock_wait_ms(nvkv_options_t* options, uint32_t value);
extern void nvkv_options_set_capacity_bytes(nvkv_options_t* options, uint64_t value);
/* Options::grow_store: grow the store to capacity_bytes (a file) or to its device. */
extern void nvkv_options_set_grow_store(nvkv_options_t* options, uint8_t value);
/* Options::open_degraded: open without the records of log pages the device cannot read. */
extern void nvkv_options_set_open_degraded(nvkv_options_t* options, uint8_t value);
/* NVKV_INDEX_HASH, NVKV_INDEX_ORDERED, or NVKV_INDEX_AS_FORMATTED (the default: the mode the
 * store was formatted with, hash for a new one); anything else makes nvkv_open fail. */
extern void nvkv_options_set_index_mode(nvkv_options_t* options, int value);
extern void nvkv_options_set_max_write_delay_us(nvkv_options_t* options, uint32_t value);
extern void nvkv_options_set_background_compaction(nvkv_options_t* options, uint8_t value);
/* NVKV_COMPACTION_*; anything else makes nvkv_open fail. */
extern void nvkv_options_set_compaction_policy(nvkv_options_t* options, int value);
/* NVKV_DURABLE_WRITES_*; anything else makes nvkv_open fail. */
extern void nvkv_options_set_durable_writes(nvkv_options_t* options, int value);
extern void nvkv_options_set_page_bytes(nvkv_options_t* options, uint32_t value);
extern void nvkv_options_set_segment_bytes(nvkv_options_t* options, uint32_t value);
extern void nvkv_options_set_shard_count(nvkv_options_t* options, uint32_t value);
extern void nvkv_options_set_page_buffers_per_shard(nvkv_options_t* options, uint32_t value);
extern void nvkv_options_set_read_queue_depth(nvkv_options_t* options, uint32_t value);
extern void nvkv_options_set_write_queue_depth(nvkv_options_t* options, uint32_t value);
/* Options::cache_bytes: bytes for the record cache; 0 turns it off. */
extern void nvkv_options_set_cache_bytes(nvkv_options_t* options, uint64_t value);
/* Options::recovery_memory_bytes: the most memory recovery from the log may use beside the
   index; 0: a sixteenth of the index over a checkpoint, what memory allows without one; with
   the index and key filters, within the process's memory limits either way. */
extern void nvkv_options_set_recovery_memory_bytes(nvkv_options_t* options, uint64_t value);
/* Options::checkpoint_log_ratio and checkpoint_min_log_bytes: when the engine writes a
   checkpoint while it runs (ratio 0: never). */
extern void nvkv_options_set_checkpoint_log_ratio(nvkv_options_t* options, uint32_t value);
extern void nvkv_options_set_checkpoint_min_log_bytes(nvkv_options_t* options, uint64_t value);
/* NVKV_BACKEND_*; anything else makes nvkv_open fail. */
extern void nvkv_options_set_backend(nvkv_options_t* options, int value);
extern void nvkv_options_set_allow_sync_fallback(nvkv_options_t* options, uint8_t value);
extern void nvkv_options_set_single_issuer(nvkv_options_t* options, uint8_t value);
extern void nvkv_options_set_register_ring_fd(nvkv_options_t* options, uint8_t value);
extern void nvkv_options_set_register_file(nvkv_options_t* options, uint8_t value);
extern void nvkv_options_set_fixed_buffers(nvkv_options_t* options, uint8_t value);
extern void nvkv_options_set_sqpoll(nvkv_options_t* options, uint8_t value);
extern void nvkv_options_set_sqpoll_idle_ms(nvkv_options_t* options, uint32_t value);
extern void nvkv_options_set_iopoll(nvkv_options_t* options, uint8_t value);

/* Write options: durable by default (see nvkv::WriteOptions for what a crash may lose). */
extern nvkv_writeoptions_t* nvkv_writeoptions_create(void);
extern void nvkv_writeoptions_destroy(nvkv_writeoptions_t* options);
extern void nvkv_writeoptions_set_durable(nvkv_writeoptions_t* options, uint8_t value);

/* ----- Open and close ----- */

/* NULL on failure (*errptr set). The options are copied; destroy them whenever convenient. */
extern nvkv_t* nvkv_open(const nvkv_options_t* options, const char* path, char** errptr);

/* Closes the store (flushing every write) and frees the handle, also on failure; an error
   means the last writes may not be durable. REQUIRES: no other call on `db` in progress, every
   iterator destroyed, no asynchronous read pending. */
extern void nvkv_close(nvkv_t* db, char** errptr);

/* ----- Writes; `options` may be NULL for the defaults (durable) ----- */
extern void nvkv_put(nvkv_t* db, const nvkv_writeoptions_t* options, const char* key,
                     size_t keylen, const char* val, size_t vallen, char** errptr);
/* Deleting an absent key succeeds. */
extern void nvkv_delete(nvkv_t* db, const nvkv_writeoptions_t* options, const char* key,
                        size_t keylen, char** errptr);

extern nvkv_writebatch_t* nvkv_writebatch_create(void);
extern void nvkv_writebatch_destroy(nvkv_writebatch_t* batch);
extern void nvkv_writebatch_clear(nvkv_writebatch_t* batch);
extern size_t nvkv_writebatch_count(const nvkv_writebatch_t* batch);
extern void nvkv_writebatch_put(nvkv_writebatch_t* batch, const char* key, size_t keylen,
                                const char* val, size_t vallen);
extern void nvkv_writebatch_delete(nvkv_writebatch_t* batch, const char* key, size_t keylen);
/* Applies the batch atomically. */
extern void nvkv_write(nvkv_t* db, const nvkv_writeoptions_t* options,
                       const nvkv_writebatch_t* batch, char** errptr);

/* Called once per asynchronous write, on the thread that started it, inside nvkv_poll, when
   the write is as durable as its options ask. err == NULL: done. err != NULL: its durability
   is unknown (see nvkv::DB::PutAsync); `err` is valid during the call only (do not free it). */
typedef void (*nvkv_write_callback)(void* arg, const char* err);
/* Asynchronous nvkv_put, nvkv_delete and nvkv_write (see nvkv::DB::PutAsync): applied when the
   call returns; `done(arg, ...)` runs in a later nvkv_poll on this thread. On failure (*errptr
   set; NVKV_INVALID_ARGUMENT for a NULL `done`) nothing is written and `done` never runs. */
extern void nvkv_put_async(nvkv_t* db, const nvkv_writeoptions_t* options, const char* key,
                           size_t keylen, const char* val, size_t vallen,
                           nvkv_write_callback done, void* arg, char** errptr);
extern void nvkv_delete_async(nvkv_t* db, const nvkv_writeoptions_t* options, const char* key,
                              size_t keylen, nvkv_write_callback done, void* arg, char** errptr);
extern void nvkv_write_async(nvkv_t* db, const nvkv_writeoptions_t* options,
                             const nvkv_writebatch_t* batch, nvkv_write_callback done, void* arg,
                             char** errptr);
/* Asynchronous writes started on this thread whose callbacks have not run. */
extern uint32_t nvkv_pending_writes(nvkv_t* db);

/* Makes every earlier write durable. */
extern void nvkv_flush(nvkv_t* db, char** errptr);
/* Writes a checkpoint now (DB::Checkpoint): Open after a crash reads it and the log after it.
   Makes every earlier write durable first, even when it then fails (no room for it). */
extern void nvkv_checkpoint(nvkv_t* db, char** errptr);
/* Cleans every segment holding dead records, now. */
extern void nvkv_compact_all(nvkv_t* db, char** errptr);

/* ----- Reads ----- */

/* The value of `key`, malloc'd (free with nvkv_free), its length in *vallen. NULL with *vallen
   = 0 when the key is absent (*errptr unchanged) or on error (*errptr set). */
extern char* nvkv_get(nvkv_t* db, const char* key, size_t keylen, size_t* vallen,
                      char** errptr);

/* Reads `num_keys` keys at once. For each i: values[i] is the malloc'd value and vallens[i] its
   length, or values[i] = NULL (vallens[i] = 0) when the key is absent or failed; errs[i] is
   NULL, or a malloc'd error string for that key (absence is not an error). The caller frees
   every non-NULL values[i] and errs[i] with nvkv_free. */
extern void nvkv_multiget(nvkv_t* db, size_t num_keys, const char* const* keys,
                          const size_t* keylens, char** values, size_t* vallens, char** errs);

/* Called once per asynchronous read, on the thread that started it, inside nvkv_poll.
   found = 1: `val`/`vallen` hold the value (owned by the library, valid during the call).
   found = 0 and err == NULL: the key is absent. err != NULL: the read failed; `err` is valid
   during the call only (do not free it). */
typedef void (*nvkv_get_callback)(void* arg, uint8_t found, const char* val, size_t vallen,
                                  const char* err);
/* Starts reading `key` (see nvkv::DB::GetAsync); `done(arg, ...)` runs in a later nvkv_poll on
   this thread. On failure (*errptr set; NVKV_INVALID_ARGUMENT for a NULL `done`) `done` never
   runs. */
extern void nvkv_get_async(nvkv_t* db, const char* key, size_t keylen, nvkv_get_callback done,
                           void* arg, char** errptr);
/* Waits until at least `min_complete` of this thread's asynchronous reads and writes finished
   (0: never waits), runs their callbacks, and returns how many ran (0 on error). */
extern uint32_t nvkv_poll(nvkv_t* db, uint32_t min_complete, char** errptr);
/* Reads started on this thread whose callbacks have not run. */
extern uint32_t nvkv_pending_reads(nvkv_t* db);

/* ----- Walks and scans: a callback per pair ----- */

/* Called once per pair by nvkv_walk and nvkv_scan, on the calling thread. `key` and `val` are
   owned by the library and valid during the call only (copy what you keep). Return 0 to go on,
   anything else to stop there (not an error). */
typedef int (*nvkv_pair_callback)(void* arg, const char* key, size_t keylen, const char* val,
                                  size_t vallen);
/* Every live pair, in either index mode (so a hash store can be listed), segment by segment in
   the order of the log, not in key order (see nvkv::DB::ForEachLive for what a concurrent write
   may see). `visit` may read and write `db` but must not call nvkv_walk, nvkv_compact_all,
   nvkv_checkpoint or nvkv_close. *errptr set on an error that stopped the walk. */
extern void nvkv_walk(nvkv_t* db, nvkv_pair_callback visit, void* arg, char** errptr);
/* The pairs with start <= key < end in key order (endlen 0: no upper bound; startlen 0: from
   the first key), at most `limit` of them (0: no limit), streamed to `visit` (nothing is
   collected in memory). Ordered index only: NVKV_FAILED_PRECONDITION with the hash index. */
extern void nvkv_scan(nvkv_t* db, const char* start, size_t startlen, const char* end,
                      size_t endlen, size_t limit, nvkv_pair_callback visit, void* arg,
                      char** errptr);

/* ----- Iteration (stores opened with NVKV_INDEX_ORDERED) ----- */

/* Unpositioned; call a seek first. With the hash index the iterator is never valid and
   nvkv_iter_get_error reports FAILED_PRECONDITION. Destroy before closing `db`. */
extern nvkv_iterator_t* nvkv_create_iterator(nvkv_t* db);
extern void nvkv_iter_destroy(nvkv_iterator_t* iter);
extern uint8_t nvkv_iter_valid(const nvkv_iterator_t* iter);
extern void nvkv_iter_seek_to_first(nvkv_iterator_t* iter);
extern void nvkv_iter_seek(nvkv_iterator_t* iter, const char* key, size_t keylen);
/* REQUIRES: nvkv_iter_valid. */
extern void nvkv_iter_next(nvkv_iterator_t* iter);
/* REQUIRES: nvkv_iter_valid. Not NUL-terminated; see convention (6). */
extern const char* nvkv_iter_key(const nvkv_iterator_t* iter, size_t* keylen);
extern const char* nvkv_iter_value(const nvkv_iterator_t* iter, size_t* vallen);
/* Sets *errptr when the iteration stopped on an error. */
extern void nvkv_iter_get_error(const nvkv_iterator_t* iter, char** errptr);

/* ----- Limits and statistics ----- */

/* Largest value of this store, in bytes. */
extern uint32_t nvkv_max_value_bytes(nvkv_t* db);
/* Counters and configuration as malloc'd text: several "name: value" lines when json is 0, one
   JSON object otherwise (nvkv::Stats::ToString, ToJson). Free with nvkv_free. */
extern char* nvkv_stats(nvkv_t* db, uint8_t json);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NVKV_NVKV_C_H_ */
