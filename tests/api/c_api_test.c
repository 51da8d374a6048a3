/* The C API, from C (like leveldb's db/c_test.c): every call of nvkv_c.h on a store file in a
   fresh directory under the current directory. Prints each phase; on the first failure prints
   what failed and exits 1. */
#define _DEFAULT_SOURCE /* mkdtemp */

#include "nvkv/nvkv_c.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char* phase = "";
static char dir[64];

static void StartPhase(const char* name) {
  fprintf(stderr, "=== c_api_test: %s\n", name);
  phase = name;
}

#define CHECK(cond)                                                                         \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      fprintf(stderr, "c_api_test: %s:%d: phase %s: check failed: %s\n", __FILE__, __LINE__, \
              phase, #cond);                                                                \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)

#define CHECK_NO_ERROR(err)                                                                  \
  do {                                                                                       \
    if ((err) != NULL) {                                                                     \
      fprintf(stderr, "c_api_test: %s:%d: phase %s: unexpected error: %s\n", __FILE__,       \
              __LINE__, phase, (err));                                                       \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

/* Checks that `err` holds an error with `code`, then frees and clears it. */
#define CHECK_ERROR_CODE(err, code)                                                         \
  do {                                                                                      \
    if (nvkv_errcode(err) != (code)) {                                                      \
      fprintf(stderr, "c_api_test: %s:%d: phase %s: expected code %d, got \"%s\"\n",        \
              __FILE__, __LINE__, phase, (code), (err) != NULL ? (err) : "(no error)");     \
      exit(1);                                                                              \
    }                                                                                       \
    nvkv_free(err);                                                                         \
    (err) = NULL;                                                                           \
  } while (0)

/* Checks that `key` holds `expected` (NULL: absent). */
static void CheckGet(nvkv_t* db, const char* key, const char* expected) {
  char* err = NULL;
  size_t length = 123;
  char* value = nvkv_get(db, key, strlen(key), &length, &err);
  CHECK_NO_ERROR(err);
  if (expected == NULL) {
    CHECK(value == NULL);
    CHECK(length == 0);
    return;
  }
  CHECK(value != NULL);
  CHECK(length == strlen(expected));
  CHECK(memcmp(value, expected, length) == 0);
  CHECK(value[length] == '\0');
  nvkv_free(value);
}

/* What the asynchronous read's callback saw. */
struct AsyncResult {
  int calls;
  int found;
  char value[16];
  int err_code;
};

static void OnGetDone(void* arg, uint8_t found, const char* val, size_t vallen, const char* err) {
  struct AsyncResult* result = (struct AsyncResult*)arg;
  result->calls++;
  result->found = found;
  result->err_code = nvkv_errcode(err);
  if (found && vallen < sizeof(result->value)) {
    memcpy(result->value, val, vallen);
    result->value[vallen] = '\0';
  }
}

/* What an asynchronous write's callback saw. */
struct AsyncWrite {
  int calls;
  int err_code;
};

static void OnWriteDone(void* arg, const char* err) {
  struct AsyncWrite* result = (struct AsyncWrite*)arg;
  result->calls++;
  result->err_code = nvkv_errcode(err);
}

/* What nvkv_walk and nvkv_scan handed a visitor: the keys, each followed by '|', and each
   value checked against nvkv_get; the visitor stops after `stop_after` pairs (0: never). */
struct Visited {
  nvkv_t* db;
  char keys[256];
  size_t used;
  int pairs;
  int stop_after;
  int values_wrong;
};

static int Visit(void* arg, const char* key, size_t keylen, const char* val, size_t vallen) {
  struct Visited* visited = (struct Visited*)arg;
  if (visited->used + keylen + 1 < sizeof(visited->keys)) {
    memcpy(visited->keys + visited->used, key, keylen);
    visited->used += keylen;
    visited->keys[visited->used++] = '|';
    visited->keys[visited->used] = '\0';
  }
  char* err = NULL;
  size_t stored_len = 0;
  char* stored = nvkv_get(visited->db, key, keylen, &stored_len, &err);
  if (err != NULL || stored == NULL || stored_len != vallen || memcmp(stored, val, vallen) != 0) {
    visited->values_wrong++;
  }
  nvkv_free(stored);
  nvkv_free(err);
  visited->pairs++;
  return visited->stop_after != 0 && visited->pairs == visited->stop_after;
}

static struct Visited NewVisited(nvkv_t* db, int stop_after) {
  struct Visited visited;
  memset(&visited, 0, sizeof(visited));
  visited.db = db;
  visited.stop_after = stop_after;
  return visited;
}

static nvkv_t* OpenStore(const char* path, int index_mode, char** err) {
  nvkv_options_t* options = nvkv_options_create();
  nvkv_options_set_capacity_bytes(options, 32u << 20);
  nvkv_options_set_index_mode(options, index_mode);
  nvkv_options_set_checkpoint_log_ratio(options, 16);
  nvkv_options_set_checkpoint_min_log_bytes(options, 8u << 20);
  /* Durable writes by flush: the puts below are durable all the same. */
  nvkv_options_set_durable_writes(options, NVKV_DURABLE_WRITES_FLUSH);
  nvkv_t* db = nvkv_open(options, path, err);
  nvkv_options_destroy(options);
  return db;
}

static void RemoveDir(const char* path) {
  DIR* d = opendir(path);
  if (d == NULL) return;
  struct dirent* entry;
  char file[512];
  while ((entry = readdir(d)) != NULL) {
    if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0) continue;
    snprintf(file, sizeof(file), "%s/%s", path, entry->d_name);
    unlink(file);
  }
  closedir(d);
  rmdir(path);
}

static void Cleanup(void) { RemoveDir(dir); }

int main(void) {
  char* err = NULL;
  char path[128];
  char hash_path[128];

  snprintf(dir, sizeof(dir), "./nvkv-c-test-XXXXXX");
  if (mkdtemp(dir) == NULL) {
    perror("c_api_test: mkdtemp");
    return 1;
  }
  atexit(Cleanup);
  snprintf(path, sizeof(path), "%s/store", dir);
  snprintf(hash_path, sizeof(hash_path), "%s/hash-store", dir);

  StartPhase("version");
  CHECK(nvkv_version() != NULL);
  CHECK(strlen(nvkv_version()) >= 5);

  StartPhase("errcode");
  CHECK(nvkv_errcode(NULL) == NVKV_OK);
  CHECK(nvkv_errcode("NOT_FOUND: x") == NVKV_NOT_FOUND);
  CHECK(nvkv_errcode("FAILED_PRECONDITION: x") == NVKV_FAILED_PRECONDITION);
  CHECK(nvkv_errcode("something else") == NVKV_UNKNOWN);

  StartPhase("open_missing_without_create");
  {
    nvkv_options_t* options = nvkv_options_create();
    nvkv_options_set_create_if_missing(options, 0);
    nvkv_t* db = nvkv_open(options, path, &err);
    nvkv_options_destroy(options);
    CHECK(db == NULL);
    CHECK_ERROR_CODE(err, NVKV_NOT_FOUND);
  }

  StartPhase("open_bad_option");
  {
    nvkv_options_t* options = nvkv_options_create();
    nvkv_options_set_index_mode(options, 42);
    nvkv_t* db = nvkv_open(options, path, &err);
    nvkv_options_destroy(options);
    CHECK(db == NULL);
    CHECK_ERROR_CODE(err, NVKV_INVALID_ARGUMENT);
  }
  {
    nvkv_options_t* options = nvkv_options_create();
    nvkv_options_set_durable_writes(options, 7);
    nvkv_t* db = nvkv_open(options, path, &err);
    nvkv_options_destroy(options);
    CHECK(db == NULL);
    CHECK_ERROR_CODE(err, NVKV_INVALID_ARGUMENT);
  }

  StartPhase("open");
  nvkv_t* db = OpenStore(path, NVKV_INDEX_ORDERED, &err);
  CHECK_NO_ERROR(err);
  CHECK(db != NULL);

  StartPhase("put_get");
  nvkv_put(db, NULL, "foo", 3, "hello", 5, &err);
  CHECK_NO_ERROR(err);
  CheckGet(db, "foo", "hello");
  CheckGet(db, "absent", NULL);

  StartPhase("binary_key_and_value");
  {
    const char key[3] = {'k', '\0', 'x'};
    const char val[4] = {'\0', 'v', '\0', '\xff'};
    nvkv_writeoptions_t* woptions = nvkv_writeoptions_create();
    nvkv_writeoptions_set_durable(woptions, 0);
    nvkv_put(db, woptions, key, sizeof(key), val, sizeof(val), &err);
    nvkv_writeoptions_destroy(woptions);
    CHECK_NO_ERROR(err);
    size_t length = 0;
    char* read = nvkv_get(db, key, sizeof(key), &length, &err);
    CHECK_NO_ERROR(err);
    CHECK(read != NULL);
    CHECK(length == sizeof(val));
    CHECK(memcmp(read, val, sizeof(val)) == 0);
    nvkv_free(read);
    nvkv_delete(db, NULL, key, sizeof(key), &err);
    CHECK_NO_ERROR(err);
  }

  StartPhase("delete");
  nvkv_delete(db, NULL, "foo", 3, &err);
  CHECK_NO_ERROR(err);
  CheckGet(db, "foo", NULL);
  nvkv_delete(db, NULL, "never-written", 13, &err);
  CHECK_NO_ERROR(err);

  StartPhase("limits");
  {
    nvkv_put(db, NULL, "", 0, "v", 1, &err);
    CHECK_ERROR_CODE(err, NVKV_INVALID_ARGUMENT);
    char* long_key = malloc(NVKV_MAX_KEY_BYTES + 1);
    CHECK(long_key != NULL);
    memset(long_key, 'k', NVKV_MAX_KEY_BYTES + 1);
    nvkv_put(db, NULL, long_key, NVKV_MAX_KEY_BYTES + 1, "v", 1, &err);
    CHECK_ERROR_CODE(err, NVKV_INVALID_ARGUMENT);
    nvkv_put(db, NULL, long_key, NVKV_MAX_KEY_BYTES, "v", 1, &err);
    CHECK_NO_ERROR(err);
    nvkv_delete(db, NULL, long_key, NVKV_MAX_KEY_BYTES, &err);
    CHECK_NO_ERROR(err);
    free(long_key);

    const size_t too_long = (size_t)nvkv_max_value_bytes(db) + 1;
    char* big = calloc(too_long, 1);
    CHECK(big != NULL);
    nvkv_put(db, NULL, "big", 3, big, too_long, &err);
    CHECK_ERROR_CODE(err, NVKV_INVALID_ARGUMENT);
    free(big);
    CheckGet(db, "big", NULL);
  }

  StartPhase("errptr_replaces_an_earlier_error");
  {
    nvkv_put(db, NULL, "", 0, "v", 1, &err); /* err set */
    CHECK(err != NULL);
    nvkv_flush(db, &err); /* success leaves it alone */
    CHECK_ERROR_CODE(err, NVKV_INVALID_ARGUMENT);
    nvkv_put(db, NULL, "", 0, "v", 1, &err);
    nvkv_put(db, NULL, "", 0, "v", 1, &err); /* the first string is freed (ASan checks) */
    CHECK_ERROR_CODE(err, NVKV_INVALID_ARGUMENT);
  }

  StartPhase("writebatch");
  {
    nvkv_writebatch_t* batch = nvkv_writebatch_create();
    nvkv_writebatch_put(batch, "foo", 3, "a", 1);
    nvkv_writebatch_clear(batch);
    CHECK(nvkv_writebatch_count(batch) == 0);
    nvkv_writebatch_put(batch, "bar", 3, "b", 1);
    nvkv_writebatch_put(batch, "box", 3, "c", 1);
    nvkv_writebatch_put(batch, "baz", 3, "d", 1);
    nvkv_writebatch_delete(batch, "bar", 3);
    CHECK(nvkv_writebatch_count(batch) == 4);
    nvkv_write(db, NULL, batch, &err);
    CHECK_NO_ERROR(err);
    nvkv_writebatch_destroy(batch);
    CheckGet(db, "foo", NULL);
    CheckGet(db, "bar", NULL);
    CheckGet(db, "box", "c");
    CheckGet(db, "baz", "d");
  }

  StartPhase("multiget");
  {
    const char* keys[3] = {"box", "absent", ""};
    const size_t keylens[3] = {3, 6, 0};
    char* values[3];
    size_t vallens[3];
    char* errs[3];
    nvkv_multiget(db, 3, keys, keylens, values, vallens, errs);
    CHECK_NO_ERROR(errs[0]);
    CHECK(values[0] != NULL);
    CHECK(vallens[0] == 1);
    CHECK(values[0][0] == 'c');
    nvkv_free(values[0]);
    CHECK_NO_ERROR(errs[1]);
    CHECK(values[1] == NULL);
    CHECK(values[2] == NULL);
    CHECK_ERROR_CODE(errs[2], NVKV_INVALID_ARGUMENT);
  }

  StartPhase("get_async");
  {
    struct AsyncResult found = {0, 0, {0}, -1};
    struct AsyncResult absent = {0, 0, {0}, -1};
    nvkv_get_async(db, "baz", 3, OnGetDone, &found, &err);
    CHECK_NO_ERROR(err);
    nvkv_get_async(db, "absent", 6, OnGetDone, &absent, &err);
    CHECK_NO_ERROR(err);
    CHECK(found.calls == 0);
    CHECK(nvkv_pending_reads(db) == 2);
    uint32_t completed = 0;
    while (completed < 2) {
      completed += nvkv_poll(db, 2, &err);
      CHECK_NO_ERROR(err);
    }
    CHECK(nvkv_pending_reads(db) == 0);
    CHECK(found.calls == 1);
    CHECK(found.found == 1);
    CHECK(strcmp(found.value, "d") == 0);
    CHECK(found.err_code == NVKV_OK);
    CHECK(absent.calls == 1);
    CHECK(absent.found == 0);
    CHECK(absent.err_code == NVKV_OK);

    struct AsyncResult never = {0, 0, {0}, -1};
    nvkv_get_async(db, "", 0, OnGetDone, &never, &err);
    CHECK_ERROR_CODE(err, NVKV_INVALID_ARGUMENT);
    CHECK(nvkv_poll(db, 0, &err) == 0);
    CHECK_NO_ERROR(err);
    CHECK(never.calls == 0);
  }

  StartPhase("write_async");
  {
    /* Leaves the keys as it found them: the phases below count them. */
    struct AsyncWrite put = {0, -1}, batch_done = {0, -1}, never = {0, -1};
    nvkv_put_async(db, NULL, "async", 5, "A", 1, OnWriteDone, &put, &err);
    CHECK_NO_ERROR(err);
    nvkv_writebatch_t* batch = nvkv_writebatch_create();
    nvkv_writebatch_put(batch, "async2", 6, "B", 1);
    nvkv_write_async(db, NULL, batch, OnWriteDone, &batch_done, &err);
    CHECK_NO_ERROR(err);
    nvkv_writebatch_destroy(batch);
    nvkv_put_async(db, NULL, "", 0, "x", 1, OnWriteDone, &never, &err);
    CHECK_ERROR_CODE(err, NVKV_INVALID_ARGUMENT);
    nvkv_put_async(db, NULL, "async3", 6, "x", 1, NULL, NULL, &err);
    CHECK_ERROR_CODE(err, NVKV_INVALID_ARGUMENT);
    CheckGet(db, "async3", NULL);
    /* Applied already; the callbacks wait for nvkv_poll. */
    CheckGet(db, "async", "A");
    CheckGet(db, "async2", "B");
    CHECK(put.calls == 0);
    CHECK(nvkv_pending_writes(db) == 2);
    uint32_t completed = 0;
    while (completed < 2) {
      completed += nvkv_poll(db, 2, &err);
      CHECK_NO_ERROR(err);
    }
    CHECK(nvkv_pending_writes(db) == 0);
    CHECK(put.calls == 1 && put.err_code == NVKV_OK);
    CHECK(batch_done.calls == 1 && batch_done.err_code == NVKV_OK);
    CHECK(never.calls == 0);
    struct AsyncWrite del1 = {0, -1}, del2 = {0, -1};
    nvkv_delete_async(db, NULL, "async", 5, OnWriteDone, &del1, &err);
    CHECK_NO_ERROR(err);
    nvkv_delete_async(db, NULL, "async2", 6, OnWriteDone, &del2, &err);
    CHECK_NO_ERROR(err);
    CheckGet(db, "async", NULL);
    while (nvkv_pending_writes(db) > 0) {
      nvkv_poll(db, 1, &err);
      CHECK_NO_ERROR(err);
    }
    CHECK(del1.calls == 1 && del1.err_code == NVKV_OK);
    CHECK(del2.calls == 1 && del2.err_code == NVKV_OK);
  }

  StartPhase("iterator");
  {
    nvkv_iterator_t* iter = nvkv_create_iterator(db);
    CHECK(!nvkv_iter_valid(iter));
    nvkv_iter_seek_to_first(iter);
    CHECK(nvkv_iter_valid(iter));
    size_t length = 0;
    const char* key = nvkv_iter_key(iter, &length);
    CHECK(length == 3 && memcmp(key, "baz", 3) == 0);
    const char* val = nvkv_iter_value(iter, &length);
    CHECK(length == 1 && val[0] == 'd');
    nvkv_iter_next(iter);
    CHECK(nvkv_iter_valid(iter));
    key = nvkv_iter_key(iter, &length);
    CHECK(length == 3 && memcmp(key, "box", 3) == 0);
    nvkv_iter_next(iter);
    CHECK(!nvkv_iter_valid(iter));
    nvkv_iter_seek(iter, "bb", 2);
    CHECK(nvkv_iter_valid(iter));
    key = nvkv_iter_key(iter, &length);
    CHECK(length == 3 && memcmp(key, "box", 3) == 0);
    nvkv_iter_get_error(iter, &err);
    CHECK_NO_ERROR(err);
    nvkv_iter_destroy(iter);
  }

  StartPhase("scan");
  {
    struct Visited all = NewVisited(db, 0);
    nvkv_scan(db, NULL, 0, NULL, 0, 0, Visit, &all, &err);
    CHECK_NO_ERROR(err);
    CHECK(all.values_wrong == 0 && all.pairs >= 2);
    CHECK(strstr(all.keys, "baz|box|") != NULL); /* in key order, next to each other */
    struct Visited from_bb = NewVisited(db, 0);
    nvkv_scan(db, "bb", 2, "bz", 2, 0, Visit, &from_bb, &err);
    CHECK_NO_ERROR(err);
    CHECK(strcmp(from_bb.keys, "box|") == 0);
    struct Visited before_bo = NewVisited(db, 0);
    nvkv_scan(db, "b", 1, "bo", 2, 0, Visit, &before_bo, &err);
    CHECK_NO_ERROR(err);
    CHECK(strcmp(before_bo.keys, "baz|") == 0);
    struct Visited limited = NewVisited(db, 0);
    nvkv_scan(db, "baz", 3, NULL, 0, 1, Visit, &limited, &err);
    CHECK_NO_ERROR(err);
    CHECK(strcmp(limited.keys, "baz|") == 0);
    struct Visited stopped = NewVisited(db, 1);
    nvkv_scan(db, "b", 1, NULL, 0, 0, Visit, &stopped, &err);
    CHECK_NO_ERROR(err);
    CHECK(stopped.pairs == 1);

    StartPhase("walk");
    struct Visited walked = NewVisited(db, 0);
    nvkv_walk(db, Visit, &walked, &err);
    CHECK_NO_ERROR(err);
    CHECK(walked.pairs == all.pairs && walked.values_wrong == 0);
    struct Visited walk_stopped = NewVisited(db, 1);
    nvkv_walk(db, Visit, &walk_stopped, &err);
    CHECK_NO_ERROR(err); /* a visitor that stops is no error */
    CHECK(walk_stopped.pairs == 1);
  }

  StartPhase("flush_compact");
  nvkv_flush(db, &err);
  CHECK_NO_ERROR(err);
  nvkv_compact_all(db, &err);
  CHECK_NO_ERROR(err);
  nvkv_checkpoint(db, &err);
  CHECK_NO_ERROR(err);

  StartPhase("stats");
  {
    char* text = nvkv_stats(db, 0);
    CHECK(text != NULL);
    CHECK(strstr(text, "keys: 2 live") != NULL);
    nvkv_free(text);
    char* json = nvkv_stats(db, 1);
    CHECK(json != NULL);
    CHECK(json[0] == '{');
    CHECK(strstr(json, "\"live_keys\":2,") != NULL);
    CHECK(strstr(json, "\"index_mode\":\"ordered\"") != NULL);
    nvkv_free(json);
  }

  StartPhase("second_open_fails");
  {
    nvkv_t* again = OpenStore(path, NVKV_INDEX_ORDERED, &err);
    CHECK(again == NULL);
    CHECK_ERROR_CODE(err, NVKV_FAILED_PRECONDITION);
  }

  StartPhase("close_reopen");
  nvkv_close(db, &err);
  CHECK_NO_ERROR(err);
  db = OpenStore(path, NVKV_INDEX_ORDERED, &err);
  CHECK_NO_ERROR(err);
  CheckGet(db, "box", "c");
  CheckGet(db, "baz", "d");
  CheckGet(db, "bar", NULL);
  nvkv_close(db, &err);
  CHECK_NO_ERROR(err);

  StartPhase("hash_mode_iterator");
  db = OpenStore(hash_path, NVKV_INDEX_HASH, &err);
  CHECK_NO_ERROR(err);
  {
    nvkv_iterator_t* iter = nvkv_create_iterator(db);
    nvkv_iter_seek_to_first(iter);
    CHECK(!nvkv_iter_valid(iter));
    nvkv_iter_get_error(iter, &err);
    CHECK_ERROR_CODE(err, NVKV_FAILED_PRECONDITION);
    nvkv_iter_destroy(iter);
    /* A hash store is listed by a walk, not a scan. */
    nvkv_put(db, NULL, "one", 3, "1", 1, &err);
    nvkv_put(db, NULL, "two", 3, "2", 1, &err);
    CHECK_NO_ERROR(err);
    struct Visited walked = NewVisited(db, 0);
    nvkv_walk(db, Visit, &walked, &err);
    CHECK_NO_ERROR(err);
    CHECK(walked.values_wrong == 0 && strstr(walked.keys, "one|") != NULL &&
          strstr(walked.keys, "two|") != NULL);
    struct Visited scanned = NewVisited(db, 0);
    nvkv_scan(db, NULL, 0, NULL, 0, 0, Visit, &scanned, &err);
    CHECK_ERROR_CODE(err, NVKV_FAILED_PRECONDITION);
    CHECK(scanned.pairs == 0);
  }
  nvkv_close(db, &err);
  CHECK_NO_ERROR(err);

  StartPhase("read_only");
  {
    /* Two readers at once; a write on either fails; a writer waits for them. */
    nvkv_options_t* options = nvkv_options_create();
    nvkv_options_set_read_only(options, 1);
    nvkv_options_set_lock_wait_ms(options, 0);
    nvkv_options_set_open_degraded(options, 1); /* every page reads: as a plain open */
    nvkv_t* first = nvkv_open(options, hash_path, &err);
    CHECK_NO_ERROR(err);
    nvkv_t* second = nvkv_open(options, hash_path, &err);
    CHECK_NO_ERROR(err);
    CheckGet(first, "one", "1");
    CheckGet(second, "two", "2");
    nvkv_put(first, NULL, "three", 5, "3", 1, &err);
    CHECK_ERROR_CODE(err, NVKV_FAILED_PRECONDITION);
    nvkv_delete(second, NULL, "one", 3, &err);
    CHECK_ERROR_CODE(err, NVKV_FAILED_PRECONDITION);
    nvkv_options_set_read_only(options, 0);
    nvkv_t* writer = nvkv_open(options, hash_path, &err);
    CHECK(writer == NULL);
    CHECK_ERROR_CODE(err, NVKV_FAILED_PRECONDITION);
    nvkv_close(first, &err);
    CHECK_NO_ERROR(err);
    nvkv_close(second, &err);
    CHECK_NO_ERROR(err);
    writer = nvkv_open(options, hash_path, &err);
    CHECK_NO_ERROR(err);
    CheckGet(writer, "one", "1");
    nvkv_close(writer, &err);
    CHECK_NO_ERROR(err);
    nvkv_options_destroy(options);
  }

  fprintf(stderr, "c_api_test: PASS\n");
  return 0;
}
