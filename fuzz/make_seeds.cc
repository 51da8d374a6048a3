// Writes the generated seed corpora of the fuzz targets (fuzz/README.md):
//   build/fuzz/fuzz/fuzz_make_seeds fuzz/corpus
// superblock/, page_records/, segment_scan/ get valid inputs built with the encoders of
// kv/page_format.h (trailing zero bytes cut: the targets pad short inputs with zeros), and
// recovery/ flag and mutation inputs. Deterministic: run it again and the files are the same.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz/fuzz_pages.h"
#include "kv/page_format.h"

namespace nvkv::kv {
namespace {

std::filesystem::path root;

void Write(const std::string& target, const std::string& name, std::vector<uint8_t> bytes) {
  while (!bytes.empty() && bytes.back() == 0) bytes.pop_back();
  std::filesystem::create_directories(root / target);
  std::ofstream out(root / target / name, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

RecordHeader Header(RecordType type, uint8_t flags, std::string_view key, uint32_t value_bytes,
                    uint64_t sequence, uint32_t batch_remaining = 0) {
  RecordHeader h{};
  h.type = static_cast<uint8_t>(type);
  h.flags = flags;
  h.key_bytes = static_cast<uint16_t>(key.size());
  h.value_bytes = value_bytes;
  h.sequence = sequence;
  h.batch_remaining = batch_remaining;
  return h;
}

void Superblocks() {
  Superblock sb{};
  sb.format_version = kFormatVersion;
  sb.index_mode = kSuperblockIndexHash;
  sb.page_bytes = 4096;
  sb.pages_per_segment = 256;
  sb.lba_bytes = 4096;
  sb.segment_count = 63;
  std::memcpy(sb.store_id, fuzz::kStoreId, 16);
  sb.format_time_unix_s = 1700000000;
  std::vector<uint8_t> page(4096);
  EncodeSuperblock(sb, page.data(), 4096);
  Write("superblock", "valid", std::vector<uint8_t>(page.begin(), page.begin() + 72));
  // The same under a development version's magic: refused by name.
  std::vector<uint8_t> development(page.begin(), page.begin() + 72);
  std::memcpy(development.data() + offsetof(Superblock, magic), &kDevelopmentSuperblockMagic, 8);
  Write("superblock", "development", development);
  sb.copy = 1;
  sb.page_bytes = 65536;
  sb.pages_per_segment = 128;
  sb.segment_count = (uint64_t{1} << 60) / (uint64_t{65536} * 128);
  EncodeSuperblock(sb, page.data(), 4096);
  Write("superblock", "largest", std::vector<uint8_t>(page.begin(), page.begin() + 72));
  // A zoned store's (format version 2, kv/FORMAT.md "Zoned namespaces"): 4 MiB zones of 3 MiB.
  sb.copy = 0;
  sb.format_version = kZonedFormatVersion;
  sb.page_bytes = 4096;
  sb.lba_bytes = 4096;
  sb.layout = kSuperblockLayoutZoned;
  sb.zone_blocks = 1024;
  sb.capacity_blocks = 768;
  sb.pages_per_segment = 768;
  sb.segment_count = 30;
  EncodeSuperblock(sb, page.data(), 4096);
  Write("superblock", "zoned", std::vector<uint8_t>(page.begin(),
                                                    page.begin() + SuperblockBytes(2)));
}

// A data page of small records; a page with a large record's start; a continuation page.
void Pages() {
  Geometry g;
  g.page_bytes = 4096;
  g.pages_per_segment = 16;
  g.segment_count = 4;
  const uint64_t seed = fuzz::FuzzStoreSeed();
  std::vector<uint8_t> page(4096);
  PageBuilder b;
  b.Start(page.data(), g, PageType::kData, 7, 3, 100);
  b.AddRecord(Header(RecordType::kPut, 0, "alpha", 5, 10), "alpha", "first");
  b.AddRecord(Header(RecordType::kDelete, 0, "beta", 0, 11), "beta", "");
  b.AddRecord(Header(RecordType::kPut, kRecordInBatch, "gamma", 3, 12, 1), "gamma", "abc");
  b.AddRecord(Header(RecordType::kPut, kRecordInBatch, "alpha", 6, 13, 0), "alpha", "second");
  b.Finish(seed, 37);
  Write("page_records", "records", page);

  b.Start(page.data(), g, PageType::kData, 7, 4, 101);
  b.MarkContinuesBatch();
  b.AddRecord(Header(RecordType::kPut, kRecordInBatch, "k", 1, 20, 0), "k", "v");
  b.Finish(seed, 37);
  Write("page_records", "continues_batch", page);

  const std::string big(6000, 'x');
  b.Start(page.data(), g, PageType::kData, 7, 5, 102);
  b.StartLargeRecord(Header(RecordType::kPut, kRecordLarge, "big", 6000, 21), "big", big);
  b.Finish(seed, 37);
  Write("page_records", "large_start", page);

  b.Start(page.data(), g, PageType::kContinuation, 7, 6, 103);
  b.AddContinuation(big);
  b.Finish(seed, 37);
  Write("page_records", "continuation", page);

  EncodeFreePage(page.data(), g, 8, seed, 37);
  Write("page_records", "free", page);
}

// Segments of 8 pages of 512 bytes (segment_scan_fuzz.cc), segment 2.
class SegmentWriter {
 public:
  SegmentWriter() : bytes_(2 + 8 * 512, 0) {
    g_.page_bytes = 512;
    g_.pages_per_segment = 8;
    g_.segment_count = 4;
  }
  uint8_t* page(uint32_t i) { return bytes_.data() + 2 + size_t{i} * 512; }
  void Data(uint32_t i, uint64_t generation, uint64_t base,
            const std::vector<std::pair<RecordHeader, std::pair<std::string, std::string>>>& recs,
            bool continues = false) {
    PageBuilder b;
    b.Start(page(i), g_, PageType::kData, generation, i, base + i);
    if (continues) b.MarkContinuesBatch();
    for (const auto& [h, kv] : recs) b.AddRecord(h, kv.first, kv.second);
    b.Finish(fuzz::FuzzStoreSeed(), g_.FirstPageOf(2) + i);
  }
  // A large value from page i on; returns the pages it took.
  uint32_t Large(uint32_t i, uint64_t generation, uint64_t base, const std::string& key,
                 const std::string& value, uint64_t sequence) {
    PageBuilder b;
    b.Start(page(i), g_, PageType::kData, generation, i, base + i);
    size_t done = b.StartLargeRecord(
        Header(RecordType::kPut, kRecordLarge, key, static_cast<uint32_t>(value.size()),
               sequence),
        key, value);
    b.Finish(fuzz::FuzzStoreSeed(), g_.FirstPageOf(2) + i);
    uint32_t pages = 1;
    while (done < value.size()) {
      const uint32_t c = i + pages;
      b.Start(page(c), g_, PageType::kContinuation, generation, c, base + c);
      done += b.AddContinuation(std::string_view(value).substr(done));
      b.Finish(fuzz::FuzzStoreSeed(), g_.FirstPageOf(2) + c);
      ++pages;
    }
    return pages;
  }
  void Free(uint32_t i, uint64_t generation) {
    EncodeFreePage(page(i), g_, generation, fuzz::FuzzStoreSeed(), g_.FirstPageOf(2) + i, i);
  }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  Geometry g_;
  std::vector<uint8_t> bytes_;
};

void Segments() {
  using R = std::vector<std::pair<RecordHeader, std::pair<std::string, std::string>>>;
  auto put = [](const std::string& k, const std::string& v, uint64_t seq, uint8_t flags = 0,
                uint32_t remaining = 0) {
    return std::make_pair(Header(RecordType::kPut, flags, k, static_cast<uint32_t>(v.size()),
                                 seq, remaining),
                          std::make_pair(k, v));
  };
  {
    SegmentWriter w;
    w.Data(0, 5, 0, R{put("a", "1", 1), put("b", "22", 2)});
    w.Data(1, 5, 0, R{put("c", "333", 3, kRecordInBatch, 2), put("d", "4", 4, kRecordInBatch, 1)});
    w.Data(2, 5, 0, R{put("e", "55", 5, kRecordInBatch, 0), put("f", "6", 6)}, true);
    w.Large(3, 5, 0, "big", std::string(1500, 'L'), 7);
    Write("segment_scan", "log", w.bytes());
  }
  {
    SegmentWriter w;
    w.Data(0, 9, 40, R{put("x", "old", 50)});
    w.Data(1, 9, 40, R{put("y", "batch", 51, kRecordInBatch, 1)});
    w.Data(2, 9, 40, R{put("z", "tail", 52, kRecordInBatch, 0)}, true);
    w.Large(3, 9, 40, "huge", std::string(1300, 'H'), 53);
    w.bytes()[1] = 0x02;  // page 1 unreadable: a hole that cuts the batch
    Write("segment_scan", "hole", w.bytes());
  }
  {
    SegmentWriter w;
    w.Data(0, 3, 0, R{put("stale", "s", 1)});
    w.Free(7, 4);
    Write("segment_scan", "stale_after_free", w.bytes());
  }
  {
    SegmentWriter w;
    w.Free(0, 6);
    Write("segment_scan", "free", w.bytes());
  }
  {
    SegmentWriter w;
    w.Large(1, 12, 8, "lost-first-page", std::string(2000, 'Q'), 9);
    w.Data(6, 12, 8, R{put("after", "it", 10)});
    Write("segment_scan", "page0_lost", w.bytes());
  }
}

void Recovery() {
  // Flags only (kForge 1, kOrdered 2, kWrite 4, kCheck 8): the store as written.
  for (uint8_t flags : {0x00, 0x02, 0x04, 0x08, 0x0e}) {
    Write("recovery", "flags_" + std::to_string(flags), {flags, 0, 0, 0, 0});
  }
  // One mutation each: offset (24 bits, little-endian) and the byte XORed in.
  auto mutation = [](uint8_t flags, std::vector<std::pair<uint32_t, uint8_t>> edits) {
    std::vector<uint8_t> bytes{flags};
    for (auto [offset, x] : edits) {
      bytes.push_back(offset & 0xff);
      bytes.push_back((offset >> 8) & 0xff);
      bytes.push_back((offset >> 16) & 0xff);
      bytes.push_back(x);
    }
    return bytes;
  };
  auto save = [&](const std::string& name, std::vector<uint8_t> bytes) {
    // Write() cuts trailing zero bytes, which here are part of the last mutation.
    std::filesystem::create_directories(root / "recovery");
    std::ofstream out(root / "recovery" / name, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  };
  save("superblock0", mutation(0x04, {{20, 0x01}}));
  save("both_superblocks", mutation(0x00, {{20, 0x01}, {4096 + 20, 0x01}}));
  save("forged_geometry", mutation(0x05, {{28, 0x01}}));
  for (uint32_t page = 2; page < 130; page += 5) {
    save("page_" + std::to_string(page),
         mutation(page % 2 ? 0x0c : 0x06, {{page * 4096 + 300, 0x5a}}));
  }
  save("forged_header", mutation(0x0d, {{2 * 4096 + 20, 0x01}}));
  save("forged_record", mutation(0x07, {{2 * 4096 + 40 + 4, 0x80}}));
  save("forged_large", mutation(0x05, {{3 * 4096 + 40 + 4, 0x10}, {4 * 4096 + 16, 0x02}}));
}

}  // namespace
}  // namespace nvkv::kv

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  nvkv::kv::root = argv[1];
  nvkv::kv::Superblocks();
  nvkv::kv::Pages();
  nvkv::kv::Segments();
  nvkv::kv::Recovery();
  return 0;
}
