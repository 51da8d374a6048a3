// The YCSB core workload (site.ycsb.workloads.CoreWorkload): its properties, how it names keys,
// how it builds and encodes records, and the per-thread choosers that pick the next operation,
// key, field and scan length.
//
// Records: a key "user<number>" ("insertorder=hashed": the number is FNV-64 of the key number,
// so keys are inserted in no particular order; "ordered": the key number itself, zero-padded to
// "zeropadding" digits) and `fieldcount` fields "field0".."fieldN-1" of `fieldlength` random
// printable bytes. nvkv stores a record as one value holding every field, encoded like YCSB's
// RocksDB binding: per field, a 4-byte little-endian name length, the name, a 4-byte value
// length, the value (10 fields of 100 bytes: 1140 bytes).
//
// Thread contract: WorkloadConfig and SharedCounters are shared (counters are atomic); each
// client thread has its own OperationChooser.
#ifndef NVKV_BENCH_YCSB_WORKLOAD_H_
#define NVKV_BENCH_YCSB_WORKLOAD_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/ycsb/generators.h"
#include "bench/ycsb/properties.h"

namespace nvkv::ycsb {

// Operation types, in report order. The names are YCSB's.
enum class OpType : int { kRead, kUpdate, kInsert, kScan, kReadModifyWrite };
inline constexpr int kOpTypes = 5;
const char* OpName(OpType type);

enum class KeyDistribution { kUniform, kZipfian, kLatest };
enum class LengthDistribution { kConstant, kUniform, kZipfian };

struct WorkloadConfig {
  uint64_t record_count = 0;     // recordcount (required)
  uint64_t operation_count = 0;  // operationcount (required for a run phase)
  // warmupoperationcount (nvkv-ycsb's own, default 0): operations of the same mix run before the
  // run phase, unmeasured, so that caches reach the hit rate a long-running store has.
  uint64_t warmup_operation_count = 0;
  uint64_t insert_start = 0;     // insertstart
  uint64_t insert_count = 0;     // insertcount (default recordcount - insertstart)
  uint32_t field_count = 10;     // fieldcount
  uint32_t field_length = 100;   // fieldlength (max length for uniform/zipfian lengths)
  uint32_t min_field_length = 1; // minfieldlength
  LengthDistribution field_length_distribution = LengthDistribution::kConstant;
  std::string field_name_prefix = "field";  // fieldnameprefix
  bool read_all_fields = true;    // readallfields
  bool write_all_fields = false;  // writeallfields
  double read_proportion = 0.95;  // readproportion
  double update_proportion = 0.05;
  double insert_proportion = 0;
  double scan_proportion = 0;
  double read_modify_write_proportion = 0;
  KeyDistribution request_distribution = KeyDistribution::kUniform;  // requestdistribution
  double zipfian_constant = ZipfianGenerator::kDefaultTheta;         // zipfianconstant
  uint32_t min_scan_length = 1;      // minscanlength
  uint32_t max_scan_length = 1000;   // maxscanlength
  LengthDistribution scan_length_distribution = LengthDistribution::kUniform;
  bool ordered_inserts = false;  // insertorder=ordered (default hashed)
  uint32_t zero_padding = 1;     // zeropadding
  bool data_integrity = false;   // dataintegrity: deterministic values, checked on every read
  uint64_t max_execution_s = 0;  // maxexecutiontime (0: none)
  uint64_t seed = 0;             // nvkv.seed (0: from the clock)

  // Reads the core workload's properties; kInvalidArgument names a bad one.
  static absl::StatusOr<WorkloadConfig> FromProperties(const Properties& properties);

  // Bytes of one record's value (every field at its maximum length) plus its key, about.
  uint64_t ApproxRecordBytes() const;
};

// Counters shared by the client threads of one benchmark.
struct SharedCounters {
  explicit SharedCounters(const WorkloadConfig& config)
      : load_sequence(config.insert_start), insert_sequence(config.record_count) {}
  CounterGenerator load_sequence;       // YCSB's keysequence: key numbers the load inserts
  AcknowledgedCounter insert_sequence;  // transactioninsertkeysequence: run-phase inserts
};

// "user" + the (hashed) key number, zero-padded.
std::string KeyName(const WorkloadConfig& config, uint64_t key_number);

// Field encoding (see the file comment).
void AppendField(std::string_view name, std::string_view value, std::string* out);
// Splits an encoded record into (name, value) views; false when the bytes are malformed.
bool DecodeFields(std::string_view record,
                  std::vector<std::pair<std::string_view, std::string_view>>* fields);

// One client thread's view of the workload: its random state and generators.
class OperationChooser {
 public:
  // `config` and `counters` are borrowed and outlive the chooser.
  OperationChooser(const WorkloadConfig& config, SharedCounters* counters, uint64_t seed);

  OpType NextOperation() { return static_cast<OpType>(operations_.Next(random_)); }
  // A key number for a read, update, scan or read-modify-write: never one beyond the highest
  // acknowledged insert (YCSB's nextKeynum).
  uint64_t NextKeyNumber();
  uint32_t NextScanLength();
  uint32_t NextField() { return static_cast<uint32_t>(random_.Below(config_.field_count)); }

  // A whole record for `key` (YCSB's buildValues), encoded, into *out.
  void BuildRecord(std::string_view key, std::string* out);
  // One field's new value (YCSB's buildSingleValue).
  void BuildFieldValue(std::string_view key, uint32_t field, std::string* out);
  // Replaces field `field` of `record` with a new value, in place (read-modify-write).
  // False when the record cannot be decoded or lacks the field.
  bool UpdateField(std::string_view key, uint32_t field, std::string* record);
  // Whether a record read for `key` is well formed (all fields) and, with dataintegrity, holds
  // exactly the values it was written with.
  bool CheckRecord(std::string_view key, std::string_view record);

  const std::string& field_name(uint32_t field) const { return field_names_[field]; }
  Random& random() { return random_; }

 private:
  uint32_t NextFieldLength();
  void FillRandom(size_t bytes, std::string* out);
  static void FillDeterministic(std::string_view key, std::string_view field, size_t bytes,
                                std::string* out);

  const WorkloadConfig& config_;
  SharedCounters* counters_;
  Random random_;
  DiscreteGenerator operations_;
  std::optional<UniformGenerator> uniform_keys_;
  std::optional<ScrambledZipfianGenerator> zipfian_keys_;
  std::optional<SkewedLatestGenerator> latest_keys_;
  std::optional<UniformGenerator> uniform_scan_;
  std::optional<ZipfianGenerator> zipfian_scan_;
  std::optional<UniformGenerator> uniform_field_length_;
  std::optional<ZipfianGenerator> zipfian_field_length_;
  std::vector<std::string> field_names_;
  std::vector<std::pair<std::string_view, std::string_view>> scratch_fields_;  // CheckRecord
};

}  // namespace nvkv::ycsb

#endif  // NVKV_BENCH_YCSB_WORKLOAD_H_
