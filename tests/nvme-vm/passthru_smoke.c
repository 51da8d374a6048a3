// passthru_smoke: harness self-check for NVMe passthrough through io_uring.
//
// Opens the NVMe generic char device (/dev/ngXnY), reads the namespace's LBA
// size with Identify Namespace, then issues one NVMe Write and one NVMe Read of
// the same LBAs through IORING_OP_URING_CMD (cmd_op NVME_URING_CMD_IO) and
// compares the data. Prints "passthru_smoke: OK ..." and exits 0 on success,
// prints the failing step and exits 1 otherwise, 77 when there is no device.
//
// This is not a test of nvkv: it proves that the guest kernel, the emulated
// controller and liburing 2.3 can do passthrough at all, so that a failing
// backend test is the backend's fault. liburing 2.3 has no
// io_uring_prep_uring_cmd, so the 128-byte SQE is filled by hand as in
// liburing-2.3 test/io_uring_passthrough.c.
//
// Usage: passthru_smoke [-d DEV] [-b BYTES] [-l SLBA] [-f]
//   -d DEV    char device (default $NVKV_TEST_NVME, else /dev/ng0n1)
//   -b BYTES  transfer size, a multiple of the LBA size (default 4096)
//   -l SLBA   first LBA (default 0)
//   -f        use a registered (fixed) buffer: IORING_URING_CMD_FIXED
// Built static by run.sh: gcc -static -O2 passthru_smoke.c -luring.

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <linux/nvme_ioctl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

enum {
  kNvmeOpWrite = 0x01,
  kNvmeOpRead = 0x02,
  kNvmeAdminIdentify = 0x06,
  kIdentifyBytes = 4096,
  kRingEntries = 4,
};

static int Fail(const char* what, int err) {
  fprintf(stderr, "passthru_smoke: FAIL %s: %s\n", what, strerror(err));
  return 1;
}

// Returns the LBA size in bytes of namespace `nsid`, or 0 on error.
static uint32_t LbaSizeBytes(int fd, uint32_t nsid, uint64_t* lba_count) {
  void* id = NULL;
  if (posix_memalign(&id, 4096, kIdentifyBytes) != 0) return 0;
  memset(id, 0, kIdentifyBytes);
  struct nvme_admin_cmd cmd = {
      .opcode = kNvmeAdminIdentify,
      .nsid = nsid,
      .addr = (uint64_t)(uintptr_t)id,
      .data_len = kIdentifyBytes,
      .cdw10 = 0,  // CNS 0: Identify Namespace.
  };
  uint32_t lba_bytes = 0;
  if (ioctl(fd, NVME_IOCTL_ADMIN_CMD, &cmd) == 0) {
    const uint8_t* ns = id;
    uint64_t nsze;
    memcpy(&nsze, ns, sizeof(nsze));  // Bytes 0..7: namespace size in LBAs.
    *lba_count = nsze;
    // FLBAS (byte 26) bits 3:0 (+ bits 6:5 as high bits) pick the LBA format;
    // the formats start at byte 128, 4 bytes each; LBADS (byte 2) is log2(size).
    unsigned index = (ns[26] & 0x0f) | ((ns[26] >> 5) & 0x3) << 4;
    lba_bytes = 1u << ns[128 + 4 * index + 2];
  }
  free(id);
  return lba_bytes;
}

// Fills `sqe` (128 bytes: the ring uses IORING_SETUP_SQE128) with one NVMe I/O
// command. A fixed buffer passes index 0 and IORING_URING_CMD_FIXED.
static void PrepNvmeIo(struct io_uring_sqe* sqe, int fd, uint32_t nsid, uint8_t opcode,
                       void* buf, uint32_t bytes, uint64_t slba, uint32_t lba_bytes,
                       int fixed) {
  memset(sqe, 0, 2 * sizeof(*sqe));
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = fd;
  sqe->cmd_op = NVME_URING_CMD_IO;
  if (fixed) {
    sqe->uring_cmd_flags = IORING_URING_CMD_FIXED;
    sqe->buf_index = 0;
  }
  struct nvme_uring_cmd* cmd = (struct nvme_uring_cmd*)sqe->cmd;
  cmd->opcode = opcode;
  cmd->nsid = nsid;
  cmd->addr = (uint64_t)(uintptr_t)buf;
  cmd->data_len = bytes;
  cmd->cdw10 = (uint32_t)slba;
  cmd->cdw11 = (uint32_t)(slba >> 32);
  cmd->cdw12 = bytes / lba_bytes - 1;  // NLB is zero-based.
}

// Submits one command and waits for it. Returns 0, or prints and returns 1.
static int RunOne(struct io_uring* ring, const char* what) {
  int ret = io_uring_submit(ring);
  if (ret != 1) return Fail("io_uring_submit", ret < 0 ? -ret : EIO);
  struct io_uring_cqe* cqe;
  ret = io_uring_wait_cqe(ring, &cqe);
  if (ret < 0) return Fail("io_uring_wait_cqe", -ret);
  int res = cqe->res;
  io_uring_cqe_seen(ring, cqe);
  if (res < 0) return Fail(what, -res);
  if (res > 0) {  // An NVMe status: SCT in bits 10:8, SC in bits 7:0.
    fprintf(stderr, "passthru_smoke: FAIL %s: NVMe status 0x%x (SCT %d SC 0x%02x)\n",
            what, res, (res >> 8) & 0x7, res & 0xff);
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  const char* dev = getenv("NVKV_TEST_NVME");
  if (dev == NULL || *dev == '\0') dev = "/dev/ng0n1";
  uint32_t bytes = 4096;
  uint64_t slba = 0;
  int fixed = 0;
  int opt;
  while ((opt = getopt(argc, argv, "d:b:l:f")) != -1) {
    switch (opt) {
      case 'd': dev = optarg; break;
      case 'b': bytes = (uint32_t)strtoul(optarg, NULL, 0); break;
      case 'l': slba = strtoull(optarg, NULL, 0); break;
      case 'f': fixed = 1; break;
      default:
        fprintf(stderr, "usage: %s [-d DEV] [-b BYTES] [-l SLBA] [-f]\n", argv[0]);
        return 2;
    }
  }

  int fd = open(dev, O_RDWR);
  if (fd < 0) {
    fprintf(stderr, "passthru_smoke: SKIP cannot open %s: %s\n", dev, strerror(errno));
    return 77;
  }
  int nsid = ioctl(fd, NVME_IOCTL_ID);
  if (nsid <= 0) return Fail("NVME_IOCTL_ID", errno);
  uint64_t lba_count = 0;
  uint32_t lba_bytes = LbaSizeBytes(fd, (uint32_t)nsid, &lba_count);
  if (lba_bytes == 0) return Fail("Identify Namespace", errno ? errno : EIO);
  if (bytes == 0 || bytes % lba_bytes != 0) {
    fprintf(stderr, "passthru_smoke: -b %u is not a multiple of the LBA size %u\n", bytes,
            lba_bytes);
    return 2;
  }

  void* wbuf = NULL;
  void* rbuf = NULL;
  if (posix_memalign(&wbuf, 4096, bytes) || posix_memalign(&rbuf, 4096, bytes))
    return Fail("posix_memalign", ENOMEM);
  // A pattern that differs per run and per byte, so stale data cannot pass.
  unsigned seed = (unsigned)getpid() * 2654435761u;
  for (uint32_t i = 0; i < bytes; i++) ((uint8_t*)wbuf)[i] = (uint8_t)((seed >> 7) ^ (i * 31u) ^ (i >> 9));

  struct io_uring ring;
  int ret = io_uring_queue_init(kRingEntries, &ring, IORING_SETUP_SQE128 | IORING_SETUP_CQE32);
  if (ret < 0) return Fail("io_uring_queue_init(SQE128|CQE32)", -ret);

  // With -f both transfers use registered buffer 0: write from it, then
  // clear it and read back into it.
  if (fixed) {
    struct iovec iov = {.iov_base = wbuf, .iov_len = bytes};
    ret = io_uring_register_buffers(&ring, &iov, 1);
    if (ret < 0) return Fail("io_uring_register_buffers", -ret);
  }
  PrepNvmeIo(io_uring_get_sqe(&ring), fd, (uint32_t)nsid, kNvmeOpWrite, wbuf, bytes, slba,
             lba_bytes, fixed);
  if (RunOne(&ring, "NVMe Write")) return 1;

  void* target = rbuf;
  if (fixed) {
    memcpy(rbuf, wbuf, bytes);  // Keep the expected data; reuse wbuf as the target.
    memset(wbuf, 0, bytes);
    target = wbuf;
  }
  PrepNvmeIo(io_uring_get_sqe(&ring), fd, (uint32_t)nsid, kNvmeOpRead, target, bytes, slba,
             lba_bytes, fixed);
  if (RunOne(&ring, "NVMe Read")) return 1;

  if (memcmp(wbuf, rbuf, bytes) != 0) {
    fprintf(stderr, "passthru_smoke: FAIL data read back differs from data written\n");
    return 1;
  }
  printf("passthru_smoke: OK %s nsid=%d lba_bytes=%u lba_count=%llu bytes=%u slba=%llu%s\n",
         dev, nsid, lba_bytes, (unsigned long long)lba_count, bytes, (unsigned long long)slba,
         fixed ? " fixed-buffer" : "");
  io_uring_queue_exit(&ring);
  close(fd);
  return 0;
}
