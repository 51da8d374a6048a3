/* A tiny command-line program over the C API, one store operation per process, for the
   session script tests/nvme-vm/session.sh (which runs nvkv-cli the same way when it is built):
     c_api_session format PATH        creates a store on an empty device or a missing file
                                      (a 64 MiB file); refuses anything that holds data
     c_api_session put PATH KEY VALUE durable
     c_api_session get PATH KEY       prints the value and a newline
     c_api_session delete PATH KEY    durable
     c_api_session check PATH         opens the store (recovery reads every segment and checks
                                      every page's checksum) and prints its statistics
   Every command but format opens the store without create_if_missing, so a store that was not
   there (or not found) fails instead of being made afresh.
   Exit status: 0 done, 1 key not found (get), 2 usage, 3 any error (printed as "CODE: message"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvkv/nvkv_c.h"

enum { kExitNotFound = 1, kExitUsage = 2, kExitError = 3 };

static int Usage(void) {
  fprintf(stderr,
          "usage: c_api_session format|check PATH\n"
          "       c_api_session get|delete PATH KEY\n"
          "       c_api_session put PATH KEY VALUE\n");
  return kExitUsage;
}

static int Fail(const char* what, char* err) {
  fprintf(stderr, "c_api_session: %s: %s\n", what, err);
  nvkv_free(err);
  return kExitError;
}

static nvkv_t* Open(const char* path, int format, char** err) {
  nvkv_options_t* options = nvkv_options_create();
  nvkv_options_set_create_if_missing(options, format ? 1 : 0);
  nvkv_options_set_error_if_exists(options, format ? 1 : 0);
  nvkv_options_set_capacity_bytes(options, 64u << 20);
  nvkv_t* db = nvkv_open(options, path, err);
  nvkv_options_destroy(options);
  return db;
}

/* Runs `command` on the open store; returns the exit status. */
static int Run(nvkv_t* db, const char* command, int argc, char** argv) {
  char* err = NULL;
  if (strcmp(command, "format") == 0 || strcmp(command, "check") == 0) {
    char* stats = nvkv_stats(db, 0);
    fputs(stats, stdout);
    nvkv_free(stats);
    return 0;
  }
  if (strcmp(command, "put") == 0 && argc == 5) {
    nvkv_put(db, NULL, argv[3], strlen(argv[3]), argv[4], strlen(argv[4]), &err);
    return err != NULL ? Fail("put", err) : 0;
  }
  if (strcmp(command, "delete") == 0 && argc == 4) {
    nvkv_delete(db, NULL, argv[3], strlen(argv[3]), &err);
    return err != NULL ? Fail("delete", err) : 0;
  }
  if (strcmp(command, "get") == 0 && argc == 4) {
    size_t length = 0;
    char* value = nvkv_get(db, argv[3], strlen(argv[3]), &length, &err);
    if (err != NULL) return Fail("get", err);
    if (value == NULL) {
      fprintf(stderr, "c_api_session: %s: not found\n", argv[3]);
      return kExitNotFound;
    }
    fwrite(value, 1, length, stdout);
    fputc('\n', stdout);
    nvkv_free(value);
    return 0;
  }
  return Usage();
}

int main(int argc, char** argv) {
  if (argc < 3) return Usage();
  const char* command = argv[1];
  char* err = NULL;
  nvkv_t* db = Open(argv[2], strcmp(command, "format") == 0, &err);
  if (db == NULL) return Fail(argv[2], err);
  int status = Run(db, command, argc, argv);
  nvkv_close(db, &err);
  if (err != NULL) {
    const int closed = Fail("close", err);
    if (status == 0) status = closed;
  }
  return status;
}
