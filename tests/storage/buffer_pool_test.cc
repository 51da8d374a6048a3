// BufferPool: carving, alignment, the 508 KiB registration limit and O(1) free lists.
#include "storage/buffer_pool.h"

#include <gtest/gtest.h>

#include <set>

#include "storage/base/align.h"
#include "tests/testutil/status_matchers.h"

namespace nvkv::storage {
namespace {

using ::nvkv::testing::IsOk;
using ::nvkv::testing::StatusIs;

TEST(BufferPoolTest, RegionsNeverExceed508KiB) {
  BufferPoolOptions options;
  options.buffer_bytes = 4096;
  options.buffer_count = 300;  // 127 + 127 + 46 pages
  options.chunk_count = 2;
  auto pool = BufferPool::Create(options);
  ASSERT_THAT(pool, IsOk());
  EXPECT_EQ((*pool)->chunk_bytes(), 508u * 1024);
  ASSERT_EQ((*pool)->regions().size(), 5u);
  for (const iovec& region : (*pool)->regions()) {
    EXPECT_LE(region.iov_len, kMaxRegisteredBytes);
    EXPECT_TRUE(IsAligned(reinterpret_cast<uintptr_t>(region.iov_base), 4096));
  }
  EXPECT_EQ((*pool)->regions().back().iov_len, 46u * 4096);
}

TEST(BufferPoolTest, EveryPageLiesInsideItsRegisteredRegion) {
  BufferPoolOptions options;
  options.buffer_count = 200;
  options.chunk_count = 1;
  auto pool = BufferPool::Create(options);
  ASSERT_THAT(pool, IsOk());
  (*pool)->set_registered(true);
  std::set<uint8_t*> seen;
  for (uint32_t i = 0; i < 200; ++i) {
    Buffer page = (*pool)->GetPage();
    ASSERT_TRUE(page.valid());
    EXPECT_TRUE(seen.insert(page.data).second) << "page handed out twice";
    ASSERT_GE(page.buf_index, 0);
    const iovec& region = (*pool)->regions()[page.buf_index];
    auto* base = static_cast<uint8_t*>(region.iov_base);
    EXPECT_GE(page.data, base);
    EXPECT_LE(page.data + page.bytes, base + region.iov_len);
  }
  EXPECT_FALSE((*pool)->GetPage().valid()) << "pool should be exhausted";
  Buffer chunk = (*pool)->GetChunk();
  ASSERT_TRUE(chunk.valid());
  EXPECT_EQ(chunk.buf_index, 0);
  EXPECT_EQ(chunk.bytes, (*pool)->chunk_bytes());
  EXPECT_FALSE((*pool)->GetChunk().valid());
}

TEST(BufferPoolTest, PutMakesBufferAvailableAgain) {
  BufferPoolOptions options;
  options.buffer_count = 2;
  options.chunk_count = 1;
  auto pool = BufferPool::Create(options);
  ASSERT_THAT(pool, IsOk());
  Buffer a = (*pool)->GetPage();
  Buffer b = (*pool)->GetPage();
  EXPECT_EQ((*pool)->free_pages(), 0u);
  (*pool)->PutPage(a);
  EXPECT_EQ((*pool)->free_pages(), 1u);
  Buffer c = (*pool)->GetPage();
  EXPECT_EQ(c.data, a.data);
  (*pool)->PutPage(b);
  (*pool)->PutPage(c);
  Buffer chunk = (*pool)->GetChunk();
  (*pool)->PutChunk(chunk);
  EXPECT_EQ((*pool)->free_chunks(), 1u);
}

TEST(BufferPoolTest, ALeaseGivesItsBufferBackWhenItEnds) {
  BufferPoolOptions options;
  options.buffer_count = 1;
  options.chunk_count = 1;
  auto pool = BufferPool::Create(options);
  ASSERT_THAT(pool, IsOk());
  {
    BufferLease chunk = BufferLease::Chunk(**pool);
    ASSERT_TRUE(chunk.valid());
    EXPECT_EQ((*pool)->free_chunks(), 0u);
    EXPECT_FALSE(BufferLease::Chunk(**pool).valid());  // none left
    BufferLease moved = std::move(chunk);
    EXPECT_FALSE(chunk.valid());
    EXPECT_TRUE(moved.valid());
    EXPECT_EQ((*pool)->free_chunks(), 0u);  // moving gives nothing back
  }
  EXPECT_EQ((*pool)->free_chunks(), 1u);
  BufferLease page = BufferLease::Page(**pool);
  ASSERT_TRUE(page.valid());
  EXPECT_EQ((*pool)->free_pages(), 0u);
  page = BufferLease::Chunk(**pool);  // the page goes back as the chunk comes
  EXPECT_EQ((*pool)->free_pages(), 1u);
  EXPECT_EQ((*pool)->free_chunks(), 0u);
  page.Release();
  EXPECT_EQ((*pool)->free_chunks(), 1u);
}

TEST(BufferPoolTest, ChunkOrPageTakesAPageWhenNoChunkIsFree) {
  BufferPoolOptions options;
  options.buffer_count = 1;
  options.chunk_count = 1;
  auto pool = BufferPool::Create(options);
  ASSERT_THAT(pool, IsOk());
  BufferLease chunk = BufferLease::ChunkOrPage(**pool);
  EXPECT_EQ(chunk->bytes, (*pool)->chunk_bytes());
  BufferLease page = BufferLease::ChunkOrPage(**pool);
  ASSERT_TRUE(page.valid());
  EXPECT_EQ(page->bytes, (*pool)->page_bytes());
  EXPECT_FALSE(BufferLease::ChunkOrPage(**pool).valid());
  page.Release();
  EXPECT_EQ((*pool)->free_pages(), 1u);  // back to the page list, not the chunk list
  EXPECT_EQ((*pool)->free_chunks(), 0u);
}

TEST(BufferPoolTest, AnAbandonedLeaseNeverGivesItsBufferBack) {
  BufferPoolOptions options;
  options.chunk_count = 1;
  auto pool = BufferPool::Create(options);
  ASSERT_THAT(pool, IsOk());
  {
    BufferLease chunk = BufferLease::Chunk(**pool);
    ASSERT_TRUE(chunk.valid());
    chunk.Abandon();
  }
  EXPECT_EQ((*pool)->free_chunks(), 0u);
}

// ChunkLeases takes what is free, up to its bound, distinct chunks in order, and gives them
// all back when it ends (none when abandoned).
TEST(BufferPoolTest, ChunkLeasesTakeWhatIsFreeAndGiveItAllBack) {
  BufferPoolOptions options;
  options.chunk_count = 4;
  auto pool = BufferPool::Create(options);
  ASSERT_THAT(pool, IsOk());
  {
    const ChunkLeases two = ChunkLeases::UpTo(**pool, 2);
    ASSERT_EQ(two.size(), 2u);
    EXPECT_NE(two[0].data, two[1].data);
    EXPECT_EQ(two.buffers().size(), 2u);
    EXPECT_EQ((*pool)->free_chunks(), 2u);
    const ChunkLeases rest = ChunkLeases::UpTo(**pool, 10);  // only two are free
    EXPECT_EQ(rest.size(), 2u);
    EXPECT_TRUE(ChunkLeases::UpTo(**pool, 1).empty());
    EXPECT_EQ((*pool)->free_chunks(), 0u);
  }
  EXPECT_EQ((*pool)->free_chunks(), 4u);
  {
    ChunkLeases abandoned = ChunkLeases::UpTo(**pool, 3);
    abandoned.Abandon();
  }
  EXPECT_EQ((*pool)->free_chunks(), 1u);
}

TEST(BufferPoolTest, UnregisteredPoolHandsOutNoBufferIndex) {
  auto pool = BufferPool::Create(BufferPoolOptions{});
  ASSERT_THAT(pool, IsOk());
  EXPECT_EQ((*pool)->GetPage().buf_index, -1);
}

TEST(BufferPoolTest, LargePagesShrinkTheChunkToWholePages) {
  BufferPoolOptions options;
  options.buffer_bytes = 64 * 1024;
  options.buffer_count = 8;
  options.chunk_count = 1;
  auto pool = BufferPool::Create(options);
  ASSERT_THAT(pool, IsOk());
  EXPECT_EQ((*pool)->chunk_bytes(), 7u * 64 * 1024);  // 448 KiB: 7 pages fit in 508 KiB
}

TEST(BufferPoolTest, BadSizesAreInvalidArgument) {
  BufferPoolOptions options;
  options.buffer_bytes = 3000;
  EXPECT_THAT(BufferPool::Create(options), StatusIs(absl::StatusCode::kInvalidArgument));
  options.buffer_bytes = 1 << 20;
  EXPECT_THAT(BufferPool::Create(options), StatusIs(absl::StatusCode::kInvalidArgument));
  options.buffer_bytes = 4096;
  options.buffer_count = 0;
  options.chunk_count = 0;
  EXPECT_THAT(BufferPool::Create(options), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace nvkv::storage
