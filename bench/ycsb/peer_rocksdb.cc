// RocksDB as a YCSB peer (store.h), from Debian's librocksdb-dev. Options a RocksDB user would
// start from for point lookups of 1 KB records: an LRU block cache of the given size (the
// comparison's cache budget), no compression (YCSB's values are random bytes), bloom filters,
// the WAL on, and a durable write synced with it (WriteOptions::sync).
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>

#include "absl/strings/str_cat.h"
#include "bench/ycsb/store.h"

namespace nvkv::ycsb {
namespace {

absl::Status FromRocks(const rocksdb::Status& status, const std::string& what) {
  if (status.ok()) return absl::OkStatus();
  if (status.IsNotFound()) return absl::NotFoundError(absl::StrCat(what, ": not found"));
  return absl::InternalError(absl::StrCat("rocksdb ", what, ": ", status.ToString()));
}

class RocksDbStore final : public Store {
 public:
  explicit RocksDbStore(std::unique_ptr<rocksdb::DB> db) : db_(std::move(db)) {}

  absl::Status Put(std::string_view key, std::string_view value, bool durable) override {
    rocksdb::WriteOptions options;
    options.sync = durable;
    return FromRocks(db_->Put(options, rocksdb::Slice(key.data(), key.size()),
                              rocksdb::Slice(value.data(), value.size())),
                     "put");
  }
  absl::Status PutAsync(std::string_view key, std::string_view value, bool durable,
                        WriteCallback callback) override {
    completions_.AddWrite(std::move(callback), Put(key, value, durable));
    return absl::OkStatus();
  }
  absl::Status GetAsync(std::string_view key, ReadCallback callback) override {
    std::string value;
    const rocksdb::Status status =
        db_->Get(rocksdb::ReadOptions(), rocksdb::Slice(key.data(), key.size()), &value);
    if (status.ok()) {
      completions_.AddRead(std::move(callback), std::move(value));
    } else {
      completions_.AddRead(std::move(callback), FromRocks(status, "get"));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<uint32_t> Poll(uint32_t) override { return completions_.RunReady(); }
  absl::Status Scan(std::string_view start, size_t limit,
                    std::vector<std::pair<std::string, std::string>>* out) override {
    out->clear();
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    for (it->Seek(rocksdb::Slice(start.data(), start.size())); it->Valid() && out->size() < limit;
         it->Next()) {
      out->emplace_back(it->key().ToString(), it->value().ToString());
    }
    return FromRocks(it->status(), "scan");
  }
  absl::Status Flush() override { return FromRocks(db_->SyncWAL(), "sync WAL"); }
  Stats GetStats() override { return Stats(); }
  absl::Status Close() override { return FromRocks(db_->Close(), "close"); }

 private:
  std::unique_ptr<rocksdb::DB> db_;
  SynchronousCompletions completions_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> OpenRocksDb(const PeerOptions& peer,
                                                   const std::string& dir) {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.compression = rocksdb::kNoCompression;
  options.IncreaseParallelism(2);
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(peer.cache_bytes);
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  rocksdb::DB* db = nullptr;
  const rocksdb::Status status = rocksdb::DB::Open(options, dir, &db);
  if (!status.ok()) return FromRocks(status, absl::StrCat("open ", dir));
  return std::make_unique<RocksDbStore>(std::unique_ptr<rocksdb::DB>(db));
}

}  // namespace nvkv::ycsb
