// LMDB as a YCSB peer (store.h), from Debian's liblmdb-dev: one B+-tree in a memory map of
// `capacity_bytes`, read through the page cache (it has no cache of its own: a memory limit on
// the process is its cache budget). Each put is its own write transaction; the map is opened
// with MDB_NOSYNC and a durable put syncs it after its commit (mdb_env_sync), which is what a
// synced commit costs. MDB_NORDAHEAD: random point reads, no read-ahead.
#include <lmdb.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "bench/ycsb/store.h"

namespace nvkv::ycsb {
namespace {

absl::Status FromMdb(int rc, const std::string& what) {
  if (rc == 0) return absl::OkStatus();
  if (rc == MDB_NOTFOUND) return absl::NotFoundError(absl::StrCat(what, ": not found"));
  if (rc == MDB_MAP_FULL) {
    return absl::ResourceExhaustedError(absl::StrCat("lmdb ", what, ": ", mdb_strerror(rc)));
  }
  return absl::InternalError(absl::StrCat("lmdb ", what, ": ", mdb_strerror(rc)));
}

MDB_val Val(std::string_view bytes) {
  return MDB_val{bytes.size(), const_cast<char*>(bytes.data())};
}

class LmdbStore final : public Store {
 public:
  LmdbStore(MDB_env* env, MDB_dbi dbi) : env_(env), dbi_(dbi) {}
  ~LmdbStore() override {
    if (env_ != nullptr) mdb_env_close(env_);
  }

  absl::Status Put(std::string_view key, std::string_view value, bool durable) override {
    MDB_txn* txn = nullptr;
    if (int rc = mdb_txn_begin(env_, nullptr, 0, &txn); rc != 0) return FromMdb(rc, "begin");
    MDB_val k = Val(key), v = Val(value);
    if (int rc = mdb_put(txn, dbi_, &k, &v, 0); rc != 0) {
      mdb_txn_abort(txn);
      return FromMdb(rc, "put");
    }
    if (int rc = mdb_txn_commit(txn); rc != 0) return FromMdb(rc, "commit");
    return durable ? FromMdb(mdb_env_sync(env_, 1), "sync") : absl::OkStatus();
  }
  absl::Status PutAsync(std::string_view key, std::string_view value, bool durable,
                        WriteCallback callback) override {
    completions_.AddWrite(std::move(callback), Put(key, value, durable));
    return absl::OkStatus();
  }
  absl::Status GetAsync(std::string_view key, ReadCallback callback) override {
    absl::StatusOr<std::string> result = Get(key);
    completions_.AddRead(std::move(callback), std::move(result));
    return absl::OkStatus();
  }
  absl::StatusOr<uint32_t> Poll(uint32_t) override { return completions_.RunReady(); }
  absl::Status Scan(std::string_view start, size_t limit,
                    std::vector<std::pair<std::string, std::string>>* out) override {
    out->clear();
    MDB_txn* txn = nullptr;
    if (int rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &txn); rc != 0) {
      return FromMdb(rc, "begin");
    }
    MDB_cursor* cursor = nullptr;
    int rc = mdb_cursor_open(txn, dbi_, &cursor);
    MDB_val k = Val(start), v;
    for (MDB_cursor_op op = MDB_SET_RANGE; rc == 0 && out->size() < limit; op = MDB_NEXT) {
      rc = mdb_cursor_get(cursor, &k, &v, op);
      if (rc == 0) {
        out->emplace_back(std::string(static_cast<const char*>(k.mv_data), k.mv_size),
                          std::string(static_cast<const char*>(v.mv_data), v.mv_size));
      }
    }
    if (cursor != nullptr) mdb_cursor_close(cursor);
    mdb_txn_abort(txn);
    return rc == 0 || rc == MDB_NOTFOUND ? absl::OkStatus() : FromMdb(rc, "scan");
  }
  absl::Status Flush() override { return FromMdb(mdb_env_sync(env_, 1), "sync"); }
  Stats GetStats() override { return Stats(); }
  absl::Status Close() override {
    mdb_env_close(env_);
    env_ = nullptr;
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<std::string> Get(std::string_view key) {
    MDB_txn* txn = nullptr;
    if (int rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &txn); rc != 0) {
      return FromMdb(rc, "begin");
    }
    MDB_val k = Val(key), v;
    const int rc = mdb_get(txn, dbi_, &k, &v);
    absl::StatusOr<std::string> result =
        rc == 0 ? absl::StatusOr<std::string>(
                      std::string(static_cast<const char*>(v.mv_data), v.mv_size))
                : absl::StatusOr<std::string>(FromMdb(rc, "get"));
    mdb_txn_abort(txn);
    return result;
  }

  MDB_env* env_;
  const MDB_dbi dbi_;
  SynchronousCompletions completions_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> OpenLmdb(const PeerOptions& peer, const std::string& dir) {
  MDB_env* env = nullptr;
  if (int rc = mdb_env_create(&env); rc != 0) return FromMdb(rc, "create");
  auto fail = [&](int rc, const std::string& what) {
    mdb_env_close(env);
    return FromMdb(rc, what);
  };
  if (int rc = mdb_env_set_mapsize(env, peer.capacity_bytes); rc != 0) {
    return fail(rc, "map size");
  }
  if (int rc = mdb_env_set_maxreaders(env, 1024); rc != 0) return fail(rc, "max readers");
  // MDB_NOTLS: read transactions are not tied to threads' slots (client threads come and go).
  if (int rc = mdb_env_open(env, dir.c_str(), MDB_NOSYNC | MDB_NORDAHEAD | MDB_NOTLS, 0644);
      rc != 0) {
    return fail(rc, absl::StrCat("open ", dir));
  }
  MDB_txn* txn = nullptr;
  if (int rc = mdb_txn_begin(env, nullptr, 0, &txn); rc != 0) return fail(rc, "begin");
  MDB_dbi dbi = 0;
  if (int rc = mdb_dbi_open(txn, nullptr, 0, &dbi); rc != 0) {
    mdb_txn_abort(txn);
    return fail(rc, "open the database");
  }
  if (int rc = mdb_txn_commit(txn); rc != 0) return fail(rc, "commit");
  return std::make_unique<LmdbStore>(env, dbi);
}

}  // namespace nvkv::ycsb
