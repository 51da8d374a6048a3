// The commands that read and write pairs: put, get, del, scan, load, dump.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "nvkv/db.h"
#include "nvkv/iterator.h"
#include "nvkv/write_batch.h"
#include "tools/cli/cli.h"
#include "tools/cli/dump_format.h"
#include "tools/cli/progress.h"
#include "util/json_writer.h"

namespace nvkv::cli {
namespace {

// Pairs per WriteBatch when loading.
constexpr size_t kLoadBatchPairs = 1024;

// A key as it is shown in a message: in the encoding of the command line, cut when long.
std::string ShowKey(const Context& context, std::string_view key) {
  constexpr size_t kShownBytes = 64;
  std::string shown = Encode(key.substr(0, kShownBytes), context.encodings.key, /*is_key=*/false);
  if (key.size() > kShownBytes) absl::StrAppend(&shown, "... (", key.size(), " bytes)");
  return shown;
}

// Everything on stdin.
absl::StatusOr<std::string> ReadStdin() {
  std::string data;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = read(STDIN_FILENO, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::ErrnoToStatus(errno, "reading stdin");
    if (n == 0) return data;
    data.append(buffer, static_cast<size_t>(n));
  }
}

// Decodes a key operand; an empty key is refused here, with the store's own words.
absl::StatusOr<std::string> KeyArgument(const Context& context, std::string_view text) {
  absl::StatusOr<std::string> key = context.DecodeKey(text);
  if (!key.ok()) return absl::InvalidArgumentError(absl::StrCat("KEY: ", key.status().message()));
  if (key->empty()) return absl::InvalidArgumentError("KEY: empty key");
  return key;
}

Outcome CloseDb(DB& db) { return FromStatus(db.Close()); }

}  // namespace

// ----- put, get, del -----

Outcome RunPut(const Context& context) {
  absl::StatusOr<std::string> key = KeyArgument(context, context.args[0]);
  if (!key.ok()) return Usage(std::string(key.status().message()));
  absl::StatusOr<std::string> value;
  if (context.args[1] == "-") {
    absl::StatusOr<std::string> input = ReadStdin();
    if (!input.ok()) return FromStatus(input.status());
    value = context.encodings.value == Encoding::kHex ? FromHex(*input, /*skip_space=*/true)
                                                      : std::move(*input);
  } else {
    value = context.DecodeValue(context.args[1]);
  }
  if (!value.ok()) return Usage(absl::StrCat("VALUE: ", value.status().message()));
  absl::StatusOr<std::unique_ptr<DB>> db = context.Open(Context::Use::kWrite);
  if (!db.ok()) return FromStatus(db.status());
  if (absl::Status put = (*db)->Put(*key, *value); !put.ok()) return FromStatus(put);
  return CloseDb(**db);
}

// `bytes` as field `name` of a JSON object: a string when it is UTF-8 text (and not `hex`: its
// field's --hex, --key-hex or --value-hex), else field `name`_hex in hex, so that no byte is
// lost.
void AddBytesField(util::JsonObject& json, const std::string& name, std::string_view bytes,
                   bool hex) {
  if (hex || !util::IsWellFormedUtf8(bytes)) {
    json.Add(name + "_hex", ToHex(bytes));
  } else {
    json.Add(name, bytes);
  }
}

Outcome RunGet(const Context& context) {
  absl::StatusOr<std::string> key = KeyArgument(context, context.args[0]);
  if (!key.ok()) return Usage(std::string(key.status().message()));
  absl::StatusOr<std::unique_ptr<DB>> db = context.Open(Context::Use::kRead);
  if (!db.ok()) return FromStatus(db.status());
  absl::StatusOr<std::string> value = (*db)->Get(*key);
  if (absl::IsNotFound(value.status())) {
    return NotFound(absl::StrCat("key not found: ", ShowKey(context, *key)));
  }
  if (!value.ok()) return FromStatus(value.status());
  // A failed write shows in FinishStdout (the stream's error flag).
  if (context.Has("--json")) {
    util::JsonObject json;
    AddBytesField(json, "key", *key, context.encodings.key == Encoding::kHex);
    AddBytesField(json, "value", *value, context.encodings.value == Encoding::kHex);
    (void)WriteOut(json.Finish() + "\n");
  } else {
    (void)WriteOut(context.encodings.value == Encoding::kHex ? ToHex(*value) + "\n" : *value);
  }
  if (Outcome out = FinishStdout(); out.exit_code != kExitOk) return out;
  return CloseDb(**db);
}

Outcome RunDel(const Context& context) {
  absl::StatusOr<std::string> key = KeyArgument(context, context.args[0]);
  if (!key.ok()) return Usage(std::string(key.status().message()));
  absl::StatusOr<std::unique_ptr<DB>> db = context.Open(Context::Use::kWrite);
  if (!db.ok()) return FromStatus(db.status());
  // A key that is absent is absent afterwards too: success, as in the API (and RocksDB's ldb).
  if (absl::Status deleted = (*db)->Delete(*key); !deleted.ok()) return FromStatus(deleted);
  return CloseDb(**db);
}

// ----- scan -----

Outcome RunScan(const Context& context) {
  if (context.index_mode == IndexMode::kHash) {
    return Usage("scan needs the ordered index, and --hash asks for the other one");
  }
  std::string from, to;
  if (context.Has("--from")) {
    absl::StatusOr<std::string> decoded = context.DecodeKey(context.Get("--from"));
    if (!decoded.ok()) return Usage(absl::StrCat("--from: ", decoded.status().message()));
    from = std::move(*decoded);
  }
  if (context.Has("--to")) {
    absl::StatusOr<std::string> decoded = context.DecodeKey(context.Get("--to"));
    if (!decoded.ok()) return Usage(absl::StrCat("--to: ", decoded.status().message()));
    to = std::move(*decoded);
  }
  uint64_t limit = UINT64_MAX;
  if (context.Has("--limit")) {
    absl::StatusOr<uint64_t> parsed = ParseCount(context.Get("--limit"));
    if (!parsed.ok()) return Usage(absl::StrCat("--limit: ", parsed.status().message()));
    limit = *parsed;
  }
  const bool keys_only = context.Has("--keys-only");
  absl::StatusOr<std::unique_ptr<DB>> db = context.Open(Context::Use::kRead);
  if (!db.ok()) return FromStatus(db.status());
  if ((*db)->GetStats().index_mode != IndexMode::kOrdered) {
    (void)(*db)->Close();
    return Usage(absl::StrCat("scan needs the ordered index: ", context.db_path,
                              " was formatted with the hash index; add --ordered to open it "
                              "with the ordered one (rebuilt from the log)"));
  }
  std::unique_ptr<Iterator> it = (*db)->NewIterator();
  uint64_t count = 0;
  for (it->Seek(from); it->Valid() && count < limit; it->Next()) {
    if (!to.empty() && it->key() >= to) break;
    const std::string line =
        keys_only ? Encode(it->key(), context.encodings.key, /*is_key=*/true) + "\n"
                  : DumpPairLine(it->key(), it->value(), context.encodings);
    if (!WriteOut(line)) return FinishStdout();
    ++count;
  }
  if (!it->status().ok()) return FromStatus(it->status());
  it.reset();
  if (Outcome out = FinishStdout(); out.exit_code != kExitOk) return out;
  return CloseDb(**db);
}

// ----- dump -----

Outcome RunDump(const Context& context) {
  absl::StatusOr<std::unique_ptr<DB>> db = context.Open(Context::Use::kRead);
  if (!db.ok()) return FromStatus(db.status());
  if (!WriteOut(DumpHeaderLine(context.encodings))) return FinishStdout();
  bool out_failed = false;
  if ((*db)->GetStats().index_mode == IndexMode::kOrdered) {
    // Key order: the same store dumps to the same text.
    Progress progress("dump", "pairs");
    const uint64_t total = (*db)->GetStats().live_keys;
    uint64_t done = 0;
    std::unique_ptr<Iterator> it = (*db)->NewIterator();
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      if (!WriteOut(DumpPairLine(it->key(), it->value(), context.encodings))) {
        out_failed = true;
        break;
      }
      progress.Update(++done, total);
    }
    progress.Finish();
    if (!it->status().ok()) return FromStatus(it->status());
  } else {
    Progress progress("dump", "segments");
    absl::Status walked = (*db)->ForEachLive(
        [&](std::string_view key, std::string_view value) {
          if (!WriteOut(DumpPairLine(key, value, context.encodings))) {
            out_failed = true;
            return absl::CancelledError("stdout failed");
          }
          return absl::OkStatus();
        },
        [&progress](uint64_t done, uint64_t total) { progress.Update(done, total); });
    progress.Finish();
    if (!walked.ok() && !out_failed) return FromStatus(walked);
  }
  if (Outcome out = FinishStdout(); out.exit_code != kExitOk || out_failed) {
    return out.exit_code != kExitOk ? out : Failure("writing to stdout failed");
  }
  return CloseDb(**db);
}

// ----- load -----

namespace {

// Reads pair lines, and writes them in batches.
class Loader {
 public:
  Loader(const Context& context, DB& db) : db_(db), encodings_(context.encodings) {
    // A batch takes only records that fit a page (a larger value is written by itself), and at
    // most max_batch_bytes() of them. Half a page is a bound on "fits" that needs no knowledge
    // of the page header.
    solo_bytes_ = db.GetStats().page_bytes / 2;
    batch_bytes_ = db.max_batch_bytes();
  }

  // Takes one line (without its line feed). Errors name the line.
  absl::Status Line(std::string_view line) {
    ++line_number_;
    DumpLine parsed;
    if (absl::Status status = ParseDumpLine(line, &encodings_, &parsed); !status.ok()) {
      return Error(status.message());
    }
    if (!parsed.is_pair) return absl::OkStatus();
    const std::string& key = parsed.key;
    const std::string& value = parsed.value;
    if (key.size() > DB::kMaxKeyBytes) {
      return Error(absl::StrCat("key of ", key.size(), " bytes is over the limit of ",
                                DB::kMaxKeyBytes));
    }
    if (value.size() > db_.max_value_bytes()) {
      return Error(absl::StrCat("value of ", value.size(), " bytes is over the limit of ",
                                db_.max_value_bytes()));
    }
    const size_t bytes = key.size() + value.size() + WriteBatch::kEntryOverheadBytes;
    if (bytes >= solo_bytes_) {
      if (absl::Status flushed = WriteBatchOut(); !flushed.ok()) return flushed;
      ++pairs_;
      return Written(db_.Put(key, value, WriteOptions{.durable = false}));
    }
    if (batch_.Count() >= kLoadBatchPairs || batch_.ApproximateSize() + bytes > batch_bytes_) {
      if (absl::Status flushed = WriteBatchOut(); !flushed.ok()) return flushed;
    }
    batch_.Put(key, value);
    ++pairs_;
    return absl::OkStatus();
  }

  // Writes what is left and makes it all durable.
  absl::Status Finish() {
    if (absl::Status flushed = WriteBatchOut(); !flushed.ok()) return flushed;
    return db_.Flush();
  }

  uint64_t pairs() const { return pairs_; }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("line ", line_number_, ": ", what));
  }
  absl::Status Written(const absl::Status& status) const {
    if (status.ok()) return status;
    return absl::Status(status.code(), absl::StrCat("line ", line_number_, ": ", status.message()));
  }
  absl::Status WriteBatchOut() {
    if (batch_.Count() == 0) return absl::OkStatus();
    absl::Status status = db_.Write(batch_, WriteOptions{.durable = false});
    batch_.Clear();
    return Written(status);
  }

  DB& db_;
  FieldEncodings encodings_;
  size_t solo_bytes_ = 0;
  uint64_t batch_bytes_ = 0;
  WriteBatch batch_;
  uint64_t line_number_ = 0;
  uint64_t pairs_ = 0;
};

}  // namespace

Outcome RunLoad(const Context& context) {
  const std::string& source = context.args[0];
  FILE* input = source == "-" ? stdin : std::fopen(source.c_str(), "rb");
  if (input == nullptr) return Failure(absl::StrCat(source, ": ", std::strerror(errno)));
  struct Closer {
    FILE* file;
    ~Closer() {
      if (file != stdin) std::fclose(file);
    }
  } closer{input};
  uint64_t total_bytes = 0;
  struct stat st;
  if (fstat(fileno(input), &st) == 0 && S_ISREG(st.st_mode)) {
    total_bytes = static_cast<uint64_t>(st.st_size);
  }
  absl::StatusOr<std::unique_ptr<DB>> db = context.Open(Context::Use::kWrite);
  if (!db.ok()) return FromStatus(db.status());
  Loader loader(context, **db);
  Progress progress("load", total_bytes != 0 ? "bytes" : "bytes read");
  char* line = nullptr;
  size_t capacity = 0;
  uint64_t read_bytes = 0;
  absl::Status status;
  for (;;) {
    errno = 0;
    const ssize_t length = getline(&line, &capacity, input);
    if (length < 0) {
      if (std::ferror(input)) status = absl::ErrnoToStatus(errno, absl::StrCat("reading ", source));
      break;
    }
    read_bytes += static_cast<uint64_t>(length);
    std::string_view text(line, static_cast<size_t>(length));
    if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
    status = loader.Line(text);
    if (!status.ok()) break;
    progress.Update(read_bytes, total_bytes);
  }
  std::free(line);
  if (status.ok()) status = loader.Finish();
  progress.Finish();
  if (!status.ok()) {
    // The pairs before the bad line are written and made durable, as the help promises.
    (void)loader.Finish();
    Outcome out = FromStatus(status);
    out.exit_code = absl::IsInvalidArgument(status) ? kExitFailure : out.exit_code;
    return out;
  }
  if (progress.enabled()) std::fprintf(stderr, "loaded %llu pairs\n",
                                       static_cast<unsigned long long>(loader.pairs()));
  return CloseDb(**db);
}

}  // namespace nvkv::cli
