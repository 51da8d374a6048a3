// A first program with nvkv: open (creating) a store, write, read, batch, iterate, close.
//   hello STORE_FILE
#include <cstdio>
#include <memory>

#include "nvkv/db.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s STORE_FILE\n", argv[0]);
    return 2;
  }
  nvkv::Options options;
  options.capacity_bytes = 64 << 20;  // a 64 MiB store file
  options.index_mode = nvkv::IndexMode::kOrdered;  // for the iterator below
  auto db = nvkv::DB::Open(options, argv[1]);
  if (!db.ok()) {
    std::fprintf(stderr, "open: %s\n", db.status().ToString().c_str());
    return 1;
  }

  absl::Status status = (*db)->Put("hello", "world");  // durable when it returns OK
  auto value = (*db)->Get("hello");
  if (!status.ok() || !value.ok() || *value != "world") {
    std::fprintf(stderr, "put/get failed: %s\n", status.ToString().c_str());
    return 1;
  }

  nvkv::WriteBatch batch;  // all or nothing
  batch.Put("apple", "red");
  batch.Put("banana", "yellow");
  batch.Delete("hello");
  status = (*db)->Write(batch);

  std::unique_ptr<nvkv::Iterator> it = (*db)->NewIterator();
  for (it->SeekToFirst(); it->Valid(); it->Next()) {  // apple, banana
    std::printf("%.*s = %.*s\n", int(it->key().size()), it->key().data(),
                int(it->value().size()), it->value().data());
  }
  if (status.ok()) status = it->status();
  it.reset();  // iterators go before the DB closes
  const absl::Status closed = (*db)->Close();
  if (status.ok()) status = closed;
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
