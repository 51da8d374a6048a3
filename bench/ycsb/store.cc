// The stores nvkv-ycsb drives (store.h): nvkv itself, and the peers when built in.
#include "bench/ycsb/store.h"

#include "absl/strings/str_cat.h"

namespace nvkv::ycsb {
namespace {

class NvkvStore final : public Store {
 public:
  explicit NvkvStore(std::unique_ptr<DB> db) : db_(std::move(db)) {}
  absl::Status Put(std::string_view key, std::string_view value, bool durable) override {
    return db_->Put(key, value, WriteOptions{.durable = durable});
  }
  absl::Status PutAsync(std::string_view key, std::string_view value, bool durable,
                        WriteCallback callback) override {
    return db_->PutAsync(key, value, std::move(callback), WriteOptions{.durable = durable});
  }
  absl::Status GetAsync(std::string_view key, ReadCallback callback) override {
    return db_->GetAsync(key, std::move(callback));
  }
  absl::StatusOr<uint32_t> Poll(uint32_t min_complete) override {
    return db_->Poll(min_complete);
  }
  absl::Status Scan(std::string_view start, size_t limit,
                    std::vector<std::pair<std::string, std::string>>* out) override {
    return db_->Scan(start, "", limit, out);
  }
  absl::Status Flush() override { return db_->Flush(); }
  Stats GetStats() override { return db_->GetStats(); }
  absl::Status Close() override { return db_->Close(); }

 private:
  std::unique_ptr<DB> db_;
};

}  // namespace

// Defined in peer_rocksdb.cc and peer_lmdb.cc when the libraries were found.
#ifdef NVKV_YCSB_ROCKSDB
absl::StatusOr<std::unique_ptr<Store>> OpenRocksDb(const PeerOptions& options,
                                                   const std::string& dir);
#endif
#ifdef NVKV_YCSB_LMDB
absl::StatusOr<std::unique_ptr<Store>> OpenLmdb(const PeerOptions& options,
                                                const std::string& dir);
#endif

absl::StatusOr<Engine> ParseEngine(std::string_view name) {
  if (name == "nvkv") return Engine::kNvkv;
  if (name == "rocksdb") return Engine::kRocksDb;
  if (name == "lmdb") return Engine::kLmdb;
  return absl::InvalidArgumentError(
      absl::StrCat("--engine: expected nvkv, rocksdb or lmdb, not '", std::string(name), "'"));
}

const char* EngineName(Engine engine) {
  switch (engine) {
    case Engine::kNvkv:
      return "nvkv";
    case Engine::kRocksDb:
      return "rocksdb";
    case Engine::kLmdb:
      return "lmdb";
  }
  return "?";
}

bool EngineBuiltIn(Engine engine) {
  switch (engine) {
    case Engine::kNvkv:
      return true;
    case Engine::kRocksDb:
#ifdef NVKV_YCSB_ROCKSDB
      return true;
#else
      return false;
#endif
    case Engine::kLmdb:
#ifdef NVKV_YCSB_LMDB
      return true;
#else
      return false;
#endif
  }
  return false;
}

absl::StatusOr<std::unique_ptr<Store>> OpenNvkvStore(const Options& options,
                                                      const std::string& path) {
  absl::StatusOr<std::unique_ptr<DB>> db = DB::Open(options, path);
  if (!db.ok()) return db.status();
  return std::make_unique<NvkvStore>(std::move(*db));
}

absl::StatusOr<std::unique_ptr<Store>> OpenPeerStore(Engine engine, const PeerOptions& options,
                                                      const std::string& dir) {
  if (!EngineBuiltIn(engine)) {
    return absl::UnimplementedError(absl::StrCat(
        EngineName(engine), " is not built into this nvkv-ycsb (install Debian's lib",
        EngineName(engine), "-dev and configure the build again)"));
  }
#ifdef NVKV_YCSB_ROCKSDB
  if (engine == Engine::kRocksDb) return OpenRocksDb(options, dir);
#endif
#ifdef NVKV_YCSB_LMDB
  if (engine == Engine::kLmdb) return OpenLmdb(options, dir);
#endif
  (void)options;
  (void)dir;
  return absl::InvalidArgumentError("not a peer: nvkv");
}

SynchronousCompletions::Queues& SynchronousCompletions::ThisThread() {
  thread_local Queues queues;
  return queues;
}

void SynchronousCompletions::AddRead(ReadCallback callback, absl::StatusOr<std::string> result) {
  ThisThread().ready.push_back(Ready{std::move(callback), nullptr, std::move(result), {}});
}

void SynchronousCompletions::AddWrite(WriteCallback callback, absl::Status status) {
  ThisThread().ready.push_back(
      Ready{nullptr, std::move(callback), absl::UnknownError("no read"), std::move(status)});
}

uint32_t SynchronousCompletions::RunReady() {
  Queues& queues = ThisThread();
  // Callbacks may start new reads and writes: those land in `ready`, for the next Poll.
  queues.running.swap(queues.ready);
  for (Ready& r : queues.running) {
    if (r.read) {
      r.read(std::move(r.result));
    } else {
      r.write(std::move(r.status));
    }
  }
  const uint32_t ran = static_cast<uint32_t>(queues.running.size());
  queues.running.clear();  // keeps its capacity: no allocation per read
  return ran;
}

}  // namespace nvkv::ycsb
