/* A preloaded library (LD_PRELOAD) that makes pread fail with EIO on a range of a file while the
   environment asks for it: a transient read error, as a controller reset or a path that comes
   back gives, for a real process on a real file without any hook in nvkv. nvkv-soak
   --transient-read-faults uses it through nvkv's kSyncFile backend, which reads with pread.

     NVKV_FAIL_PREAD=FIRST:BYTES   every pread that touches bytes [FIRST, FIRST + BYTES) of any
                                   file fails with EIO; unset or empty: none does.

   The variable is read at every call, so the process can set and unset it as it goes (it is the
   process's own environment: setenv before the reads, unsetenv after). Not installed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

typedef ssize_t (*pread_fn)(int, void*, size_t, off_t);

static int Fails(size_t count, off_t offset) {
  const char* range = getenv("NVKV_FAIL_PREAD");
  if (range == NULL || *range == '\0') return 0;
  char* end = NULL;
  const unsigned long long first = strtoull(range, &end, 10);
  if (end == NULL || *end != ':') return 0;
  const unsigned long long bytes = strtoull(end + 1, NULL, 10);
  const unsigned long long from = (unsigned long long)offset;
  return from < first + bytes && first < from + count;
}

static ssize_t Call(const char* name, int fd, void* buf, size_t count, off_t offset) {
  if (Fails(count, offset)) {
    errno = EIO;
    return -1;
  }
  pread_fn next = (pread_fn)dlsym(RTLD_NEXT, name);
  if (next == NULL) {
    errno = ENOSYS;
    return -1;
  }
  return next(fd, buf, count, offset);
}

ssize_t pread(int fd, void* buf, size_t count, off_t offset) {
  return Call("pread", fd, buf, count, offset);
}

ssize_t pread64(int fd, void* buf, size_t count, off_t offset) {
  return Call("pread64", fd, buf, count, offset);
}
