// ZeroedBlock: zeroed memory of the size asked, small blocks from the heap and large ones
// mapped on a 2 MiB boundary (where huge pages can back them), resident no further than filled
// when asked for small pages, freed exactly once.
#include "kv/zeroed_block.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <vector>
#include <utility>

namespace nvkv::kv {
namespace {

bool AllZero(const ZeroedBlock& block) {
  const auto* bytes = static_cast<const uint8_t*>(block.data());
  for (uint64_t i = 0; i < block.bytes(); ++i) {
    if (bytes[i] != 0) return false;
  }
  return true;
}

TEST(ZeroedBlockTest, GivesZeroedWritableMemoryOfEverySize) {
  for (const uint64_t bytes :
       {uint64_t{8}, ZeroedBlock::kMapBytes - 8, ZeroedBlock::kMapBytes, uint64_t{3} << 20,
        (uint64_t{5} << 20) + 24}) {
    ZeroedBlock block = ZeroedBlock::Allocate(bytes);
    ASSERT_NE(block.data(), nullptr) << bytes;
    EXPECT_EQ(block.bytes(), bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(block.data()) % 16, 0u) << bytes;
    EXPECT_TRUE(AllZero(block)) << bytes;
    std::memset(block.data(), 0xab, bytes);  // every byte is ours to write
  }
}

TEST(ZeroedBlockTest, ABlockOfAHugePageOrMoreStartsOnAHugePageBoundary) {
  for (const uint64_t bytes : {uint64_t{2} << 20, (uint64_t{9} << 20) + 8}) {
    const ZeroedBlock block = ZeroedBlock::Allocate(bytes);
    ASSERT_NE(block.data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(block.data()) % (uint64_t{2} << 20), 0u) << bytes;
  }
}

TEST(ZeroedBlockTest, AMovedBlockHasOneOwner) {
  ZeroedBlock first = ZeroedBlock::Allocate(uint64_t{4} << 20);
  void* const data = first.data();
  ASSERT_NE(data, nullptr);
  ZeroedBlock second = std::move(first);
  EXPECT_EQ(second.data(), data);
  EXPECT_EQ(second.bytes(), uint64_t{4} << 20);
  ZeroedBlock third = ZeroedBlock::Allocate(64);
  third = std::move(second);  // third's small block goes to second, which frees it
  EXPECT_EQ(third.data(), data);
  static_cast<uint8_t*>(third.data())[(uint64_t{4} << 20) - 1] = 1;
}

// A block of small pages is resident as far as it is populated or written, no further.
TEST(ZeroedBlockTest, ASmallPagesBlockIsResidentOnlyWhereItIsFilled) {
  constexpr uint64_t kBytes = uint64_t{4} << 20, kPage = 4096;
  ZeroedBlock block = ZeroedBlock::Allocate(kBytes, ZeroedBlock::Pages::kSmall);
  ASSERT_NE(block.data(), nullptr);
  constexpr uint64_t kPopulated = uint64_t{256} << 10;
  block.Populate(0, kPopulated);
  block.Populate(kBytes - kPage, 10 * kPage);  // clamped to the block's end
  std::vector<unsigned char> resident(kBytes / kPage);
  ASSERT_EQ(mincore(block.data(), kBytes, resident.data()), 0);
  for (uint64_t page = 0; page < resident.size(); ++page) {
    const bool filled = page < kPopulated / kPage || page == resident.size() - 1;
    // (Populate is a hint: a kernel before 5.14 leaves the populated pages to be faulted in.)
    if (!filled) {
      ASSERT_EQ(resident[page] & 1, 0) << "page " << page << " resident unasked";
    }
  }
  const auto* bytes = static_cast<const uint8_t*>(block.data());
  for (uint64_t i = 0; i < kPopulated; i += 64) ASSERT_EQ(bytes[i], 0) << i;
  std::memset(block.data(), 0x11, kPopulated + 1);  // populated or not, every byte is writable
}

TEST(ZeroedBlockTest, NothingAskedIsAnEmptyBlock) {
  const ZeroedBlock block = ZeroedBlock::Allocate(0);
  EXPECT_EQ(block.data(), nullptr);
  EXPECT_EQ(block.bytes(), 0u);
}

}  // namespace
}  // namespace nvkv::kv
