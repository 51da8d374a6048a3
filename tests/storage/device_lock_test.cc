// The device claim (storage/device_lock.h): which nodes make up an NVMe namespace, found through
// a sysfs and /dev laid out in a temporary directory, and the O_EXCL claim on a block device,
// on a loop device (root only; skipped where loop devices cannot be set up). The claim across
// the two nodes of a real namespace is tested in QEMU (tests/kv/engine_device_test.cc,
// NamespaceTest).
#include "storage/device_lock.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "storage/device.h"
#include "tests/testutil/status_matchers.h"
#include "tests/testutil/temp_dir.h"

namespace nvkv::storage {
namespace {

namespace fs = std::filesystem;
using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

// A sysfs and a /dev under a temporary directory, with the kernel's layout for NVMe nodes:
// /sys/dev/{char,block}/M:m -> ../../devices/.../<name>, /sys/class/{nvme-generic,block}/<name>
// with a `dev` file, and /dev/<name> device nodes (mknod, root only).
class FakeSystem {
 public:
  FakeSystem() {
    for (const char* dir : {"sys/dev/char", "sys/dev/block", "sys/class/nvme-generic",
                            "sys/class/block", "sys/devices/nvme0", "dev"}) {
      fs::create_directories(Path(dir));
    }
  }
  std::string Path(const std::string& relative) const { return dir_.File(relative); }
  std::string sys() const { return Path("sys"); }
  std::string dev() const { return Path("dev"); }

  // Adds the kernel's view of node `name`; with `dev_node`, also /dev/<name> (of `dev_rdev`,
  // when given, else the node's own number). False when mknod is refused.
  bool AddNode(const std::string& name, bool block, dev_t rdev, bool dev_node = true,
               dev_t dev_rdev = 0) {
    const std::string number = absl::StrCat(major(rdev), ":", minor(rdev));
    const std::string device = Path("sys/devices/nvme0/" + name);
    fs::create_directories(device);
    std::ofstream(device + "/dev") << number << "\n";
    fs::create_directory_symlink(
        device, Path(absl::StrCat("sys/dev/", block ? "block/" : "char/", number)));
    fs::create_directory_symlink(
        device, Path(absl::StrCat("sys/class/", block ? "block/" : "nvme-generic/", name)));
    if (!dev_node) return true;
    const mode_t type = block ? S_IFBLK : S_IFCHR;
    return mknod(Path("dev/" + name).c_str(), type | 0600, dev_rdev != 0 ? dev_rdev : rdev) == 0;
  }

  struct stat StatOf(const std::string& name) const {
    struct stat st {};
    EXPECT_EQ(lstat(Path("dev/" + name).c_str(), &st), 0) << name;
    return st;
  }

 private:
  nvkv::testing::TempDir dir_;
};

const dev_t kGeneric = makedev(240, 0);
const dev_t kBlock = makedev(259, 0);

TEST(NamespaceNodesTest, GenericNodeFindsItsBlockNode) {
  FakeSystem system;
  if (!system.AddNode("ng0n1", false, kGeneric)) GTEST_SKIP() << "mknod: " << strerror(errno);
  ASSERT_TRUE(system.AddNode("nvme0n1", true, kBlock));
  std::vector<std::string> notes;
  const NamespaceNodes nodes = FindNamespaceNodes("/some/link/to/ng", system.StatOf("ng0n1"),
                                                  &notes, system.sys(), system.dev());
  EXPECT_EQ(nodes.generic, "/some/link/to/ng");
  EXPECT_EQ(nodes.block, system.dev() + "/nvme0n1");
  EXPECT_THAT(notes, IsEmpty());
}

TEST(NamespaceNodesTest, BlockNodeFindsItsGenericNode) {
  FakeSystem system;
  if (!system.AddNode("ng3n12", false, kGeneric)) GTEST_SKIP() << "mknod: " << strerror(errno);
  ASSERT_TRUE(system.AddNode("nvme3n12", true, kBlock));
  std::vector<std::string> notes;
  const NamespaceNodes nodes = FindNamespaceNodes("/dev/disk/by-id/x", system.StatOf("nvme3n12"),
                                                  &notes, system.sys(), system.dev());
  EXPECT_EQ(nodes.generic, system.dev() + "/ng3n12");
  EXPECT_EQ(nodes.block, "/dev/disk/by-id/x");
  EXPECT_THAT(notes, IsEmpty());
}

TEST(NamespaceNodesTest, PartitionHasNoPairedNode) {
  FakeSystem system;
  if (!system.AddNode("ng0n1", false, kGeneric)) GTEST_SKIP() << "mknod: " << strerror(errno);
  ASSERT_TRUE(system.AddNode("nvme0n1p1", true, makedev(259, 1)));
  std::vector<std::string> notes;
  const NamespaceNodes nodes = FindNamespaceNodes("/dev/part", system.StatOf("nvme0n1p1"), &notes,
                                                  system.sys(), system.dev());
  EXPECT_EQ(nodes.generic, "");
  EXPECT_EQ(nodes.block, "/dev/part");
  EXPECT_THAT(notes, IsEmpty());
}

TEST(NamespaceNodesTest, PairedNodeMissingFromDevIsANote) {
  FakeSystem system;
  if (!system.AddNode("ng0n1", false, kGeneric)) GTEST_SKIP() << "mknod: " << strerror(errno);
  ASSERT_TRUE(system.AddNode("nvme0n1", true, kBlock, /*dev_node=*/false));
  std::vector<std::string> notes;
  const NamespaceNodes nodes =
      FindNamespaceNodes("/x", system.StatOf("ng0n1"), &notes, system.sys(), system.dev());
  EXPECT_EQ(nodes.block, "");
  ASSERT_THAT(notes, SizeIs(1));
  EXPECT_THAT(notes[0], HasSubstr("nvme0n1"));
}

TEST(NamespaceNodesTest, DevNodeOfAnotherDeviceIsNotThePair) {
  FakeSystem system;
  if (!system.AddNode("ng0n1", false, kGeneric)) GTEST_SKIP() << "mknod: " << strerror(errno);
  ASSERT_TRUE(system.AddNode("nvme0n1", true, kBlock, true, /*dev_rdev=*/makedev(8, 16)));
  std::vector<std::string> notes;
  const NamespaceNodes nodes =
      FindNamespaceNodes("/x", system.StatOf("ng0n1"), &notes, system.sys(), system.dev());
  EXPECT_EQ(nodes.block, "");
  EXPECT_THAT(notes, SizeIs(1));
}

TEST(NamespaceNodesTest, RegularFileHasNoNodes) {
  nvkv::testing::TempDir dir;
  std::ofstream(dir.File("f")) << "x";
  struct stat st {};
  ASSERT_EQ(stat(dir.File("f").c_str(), &st), 0);
  std::vector<std::string> notes;
  const NamespaceNodes nodes = FindNamespaceNodes(dir.File("f"), st, &notes);
  EXPECT_EQ(nodes.generic, "");
  EXPECT_EQ(nodes.block, "");
}

// A loop device over a file of `bytes`, detached again on destruction (empty path when loop
// devices cannot be set up here).
class LoopDevice {
 public:
  LoopDevice(const std::string& backing, uint64_t bytes) {
    { std::ofstream file(backing); }
    if (truncate(backing.c_str(), static_cast<off_t>(bytes)) != 0) return;
    const int control = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    if (control < 0) return;
    const int number = ioctl(control, LOOP_CTL_GET_FREE);
    close(control);
    if (number < 0) return;
    const std::string path = absl::StrCat("/dev/loop", number);
    const int backing_fd = open(backing.c_str(), O_RDWR | O_CLOEXEC);
    fd_ = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (backing_fd < 0 || fd_ < 0 || ioctl(fd_, LOOP_SET_FD, backing_fd) != 0) {
      if (backing_fd >= 0) close(backing_fd);
      if (fd_ >= 0) close(fd_);
      fd_ = -1;
      return;
    }
    close(backing_fd);
    path_ = path;
  }
  ~LoopDevice() {
    if (fd_ < 0) return;
    ioctl(fd_, LOOP_CLR_FD, 0);
    close(fd_);
  }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

DeviceOptions Options() {
  DeviceOptions options;
  options.lock_device = true;
  options.lock_wait_ms = 50;
  return options;
}

TEST(BlockClaimTest, BlockDeviceClaimedByAnotherIsInUse) {
  nvkv::testing::TempDir dir;
  LoopDevice loop(dir.File("backing"), 8 << 20);
  if (loop.path().empty()) GTEST_SKIP() << "no loop device here (needs root and loop support)";
  // Someone else's exclusive claim, as mkfs or a mounted file system holds it.
  const int other = open(loop.path().c_str(), O_RDONLY | O_EXCL | O_CLOEXEC);
  ASSERT_GE(other, 0) << strerror(errno);
  auto refused = OpenDevice(loop.path(), Options());
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kFailedPrecondition));
  if (!refused.ok()) {
    EXPECT_THAT(refused.status().message(), HasSubstr("in use"));
  }
  close(other);
  auto device = OpenDevice(loop.path(), Options());
  ASSERT_THAT(device, IsOk());
}

TEST(BlockClaimTest, OpenBlockDeviceKeepsOthersClaimOff) {
  nvkv::testing::TempDir dir;
  LoopDevice loop(dir.File("backing"), 8 << 20);
  if (loop.path().empty()) GTEST_SKIP() << "no loop device here (needs root and loop support)";
  {
    auto device = OpenDevice(loop.path(), Options());
    ASSERT_THAT(device, IsOk());
    const int other = open(loop.path().c_str(), O_RDONLY | O_EXCL | O_CLOEXEC);
    EXPECT_LT(other, 0) << "mkfs could claim a block device nvkv has open";
    EXPECT_EQ(errno, EBUSY);
    if (other >= 0) close(other);
  }
  // Released with the device: the claim was on a file no ring holds.
  const int after = open(loop.path().c_str(), O_RDONLY | O_EXCL | O_CLOEXEC);
  EXPECT_GE(after, 0) << strerror(errno);
  if (after >= 0) close(after);
}

DeviceOptions ReaderOptions() {
  DeviceOptions options = Options();
  options.read_only = true;
  return options;
}

// Readers share a device and keep a writer off; a writer keeps readers off. A read-only device
// refuses writes and flushes. On a regular file and, where loop devices can be set up, on a
// block device (whose readers take no O_EXCL claim, which would keep each other off).
void ExpectReadersShareAndKeepTheWriterOff(const std::string& path) {
  {
    auto first = OpenDevice(path, ReaderOptions());
    ASSERT_THAT(first, IsOk());
    EXPECT_TRUE((*first)->info().read_only);
    auto second = OpenDevice(path, ReaderOptions());
    ASSERT_THAT(second, IsOk());
    EXPECT_THAT(OpenDevice(path, Options()), StatusIs(absl::StatusCode::kFailedPrecondition,
                                                      "locked by a writer or by readers"));
    Device& device = **first;
    Buffer page = device.buffers().GetPage();
    ASSERT_TRUE(page.valid());
    EXPECT_THAT(ReadBlocks(device, 0, 4096 / device.info().lba_bytes, page), IsOk());
    EXPECT_THAT(WriteBlocks(device, 0, 4096 / device.info().lba_bytes, page),
                StatusIs(absl::StatusCode::kFailedPrecondition, "opened read-only"));
    EXPECT_THAT(FlushDevice(device), StatusIs(absl::StatusCode::kFailedPrecondition));
    device.buffers().PutPage(page);
  }
  auto writer = OpenDevice(path, Options());
  ASSERT_THAT(writer, IsOk());
  EXPECT_FALSE((*writer)->info().read_only);
  EXPECT_THAT(OpenDevice(path, ReaderOptions()),
              StatusIs(absl::StatusCode::kFailedPrecondition, "locked by a writer"));
}

TEST(SharedClaimTest, ReadersOfAFileShareItAndKeepTheWriterOff) {
  nvkv::testing::TempDir dir;
  const std::string path = dir.File("store");
  {
    DeviceOptions create = Options();
    create.create_bytes = 1 << 20;
    ASSERT_THAT(OpenDevice(path, create), IsOk());
  }
  ExpectReadersShareAndKeepTheWriterOff(path);
  DeviceOptions create_read_only = ReaderOptions();
  create_read_only.create_bytes = 1 << 20;
  EXPECT_THAT(OpenDevice(dir.File("new"), create_read_only),
              StatusIs(absl::StatusCode::kInvalidArgument, "creates no file"));
  EXPECT_NE(access(dir.File("new").c_str(), F_OK), 0);
}

TEST(SharedClaimTest, ReadersOfABlockDeviceShareItAndKeepTheWriterOff) {
  nvkv::testing::TempDir dir;
  LoopDevice loop(dir.File("backing"), 8 << 20);
  if (loop.path().empty()) GTEST_SKIP() << "no loop device here (needs root and loop support)";
  ExpectReadersShareAndKeepTheWriterOff(loop.path());
}

}  // namespace
}  // namespace nvkv::storage
