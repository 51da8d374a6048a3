#include "bench/ycsb/workload.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace nvkv::ycsb {
namespace {

absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

absl::Status Bad(std::string_view name, std::string_view value, std::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("property ", Av(name), "=", Av(value), ": ", Av(why)));
}

absl::StatusOr<LengthDistribution> ParseLength(const Properties& p, std::string_view name,
                                               std::string_view fallback) {
  const std::string value = p.GetString(name, fallback);
  if (value == "constant") return LengthDistribution::kConstant;
  if (value == "uniform") return LengthDistribution::kUniform;
  if (value == "zipfian") return LengthDistribution::kZipfian;
  return Bad(name, value, "expected constant, uniform or zipfian");
}

void AppendU32(uint32_t value, std::string* out) {
  char bytes[4];
  for (int i = 0; i < 4; ++i) bytes[i] = static_cast<char>((value >> (8 * i)) & 0xff);
  out->append(bytes, 4);
}

bool TakeU32(std::string_view* in, uint32_t* value) {
  if (in->size() < 4) return false;
  *value = 0;
  for (int i = 0; i < 4; ++i) *value |= uint32_t{static_cast<uint8_t>((*in)[i])} << (8 * i);
  in->remove_prefix(4);
  return true;
}

}  // namespace

const char* OpName(OpType type) {
  switch (type) {
    case OpType::kRead: return "READ";
    case OpType::kUpdate: return "UPDATE";
    case OpType::kInsert: return "INSERT";
    case OpType::kScan: return "SCAN";
    case OpType::kReadModifyWrite: return "READ-MODIFY-WRITE";
  }
  return "UNKNOWN";
}

absl::StatusOr<WorkloadConfig> WorkloadConfig::FromProperties(const Properties& p) {
  WorkloadConfig c;
#define NVKV_ASSIGN(lhs, expr)            \
  do {                                    \
    auto assigned = (expr);               \
    if (!assigned.ok()) return assigned.status(); \
    lhs = *assigned;                      \
  } while (0)
  const std::string workload = p.GetString("workload", "site.ycsb.workloads.CoreWorkload");
  if (workload != "site.ycsb.workloads.CoreWorkload" &&
      workload != "com.yahoo.ycsb.workloads.CoreWorkload") {
    return Bad("workload", workload, "only the core workload is implemented");
  }
  NVKV_ASSIGN(c.record_count, p.GetUint("recordcount", 0));
  if (c.record_count == 0) return absl::InvalidArgumentError("recordcount must be given and > 0");
  NVKV_ASSIGN(c.operation_count, p.GetUint("operationcount", 0));
  NVKV_ASSIGN(c.warmup_operation_count, p.GetUint("warmupoperationcount", 0));
  NVKV_ASSIGN(c.insert_start, p.GetUint("insertstart", 0));
  if (c.insert_start >= c.record_count) {
    return Bad("insertstart", p.GetString("insertstart", ""), "must be below recordcount");
  }
  NVKV_ASSIGN(c.insert_count, p.GetUint("insertcount", c.record_count - c.insert_start));
  if (c.insert_count == 0 || c.insert_start + c.insert_count > c.record_count) {
    return Bad("insertcount", p.GetString("insertcount", ""),
               "must be > 0 and insertstart + insertcount <= recordcount");
  }
  uint64_t value = 0;
  NVKV_ASSIGN(value, p.GetUint("fieldcount", 10));
  if (value == 0 || value > 1000) {
    return Bad("fieldcount", p.GetString("fieldcount", ""), "1..1000");
  }
  c.field_count = static_cast<uint32_t>(value);
  NVKV_ASSIGN(value, p.GetUint("fieldlength", 100));
  if (value == 0 || value > (1u << 20)) {
    return Bad("fieldlength", p.GetString("fieldlength", ""), "1..1048576");
  }
  c.field_length = static_cast<uint32_t>(value);
  NVKV_ASSIGN(value, p.GetUint("minfieldlength", 1));
  if (value == 0 || value > c.field_length) {
    return Bad("minfieldlength", p.GetString("minfieldlength", ""), "1..fieldlength");
  }
  c.min_field_length = static_cast<uint32_t>(value);
  NVKV_ASSIGN(c.field_length_distribution, ParseLength(p, "fieldlengthdistribution", "constant"));
  c.field_name_prefix = p.GetString("fieldnameprefix", "field");
  NVKV_ASSIGN(c.read_all_fields, p.GetBool("readallfields", true));
  NVKV_ASSIGN(c.write_all_fields, p.GetBool("writeallfields", false));
  NVKV_ASSIGN(c.read_proportion, p.GetDouble("readproportion", 0.95));
  NVKV_ASSIGN(c.update_proportion, p.GetDouble("updateproportion", 0.05));
  NVKV_ASSIGN(c.insert_proportion, p.GetDouble("insertproportion", 0));
  NVKV_ASSIGN(c.scan_proportion, p.GetDouble("scanproportion", 0));
  NVKV_ASSIGN(c.read_modify_write_proportion, p.GetDouble("readmodifywriteproportion", 0));
  for (double proportion : {c.read_proportion, c.update_proportion, c.insert_proportion,
                            c.scan_proportion, c.read_modify_write_proportion}) {
    if (proportion < 0) return absl::InvalidArgumentError("operation proportions must be >= 0");
  }
  if (c.read_proportion + c.update_proportion + c.insert_proportion + c.scan_proportion +
          c.read_modify_write_proportion <= 0) {
    return absl::InvalidArgumentError("every operation proportion is 0");
  }
  const std::string distribution = p.GetString("requestdistribution", "uniform");
  if (distribution == "uniform") {
    c.request_distribution = KeyDistribution::kUniform;
  } else if (distribution == "zipfian") {
    c.request_distribution = KeyDistribution::kZipfian;
  } else if (distribution == "latest") {
    c.request_distribution = KeyDistribution::kLatest;
  } else {
    return Bad("requestdistribution", distribution, "expected uniform, zipfian or latest");
  }
  NVKV_ASSIGN(c.zipfian_constant, p.GetDouble("zipfianconstant", ZipfianGenerator::kDefaultTheta));
  if (!(c.zipfian_constant > 0 && c.zipfian_constant < 1)) {
    return Bad("zipfianconstant", p.GetString("zipfianconstant", ""), "expected 0 < theta < 1");
  }
  NVKV_ASSIGN(value, p.GetUint("minscanlength", 1));
  c.min_scan_length = static_cast<uint32_t>(value);
  NVKV_ASSIGN(value, p.GetUint("maxscanlength", 1000));
  c.max_scan_length = static_cast<uint32_t>(value);
  if (c.min_scan_length == 0 || c.min_scan_length > c.max_scan_length) {
    return absl::InvalidArgumentError("scan lengths: need 1 <= minscanlength <= maxscanlength");
  }
  NVKV_ASSIGN(c.scan_length_distribution, ParseLength(p, "scanlengthdistribution", "uniform"));
  if (c.scan_length_distribution == LengthDistribution::kConstant) {
    return Bad("scanlengthdistribution", "constant", "expected uniform or zipfian");
  }
  const std::string order = p.GetString("insertorder", "hashed");
  if (order != "hashed" && order != "ordered") {
    return Bad("insertorder", order, "expected hashed or ordered");
  }
  c.ordered_inserts = order == "ordered";
  NVKV_ASSIGN(value, p.GetUint("zeropadding", 1));
  c.zero_padding = static_cast<uint32_t>(std::min<uint64_t>(value, 64));
  NVKV_ASSIGN(c.data_integrity, p.GetBool("dataintegrity", false));
  if (c.data_integrity && c.field_length_distribution != LengthDistribution::kConstant) {
    return absl::InvalidArgumentError(
        "dataintegrity needs fieldlengthdistribution=constant (as in YCSB)");
  }
  NVKV_ASSIGN(c.max_execution_s, p.GetUint("maxexecutiontime", 0));
  NVKV_ASSIGN(c.seed, p.GetUint("nvkv.seed", 0));
#undef NVKV_ASSIGN
  return c;
}

uint64_t WorkloadConfig::ApproxRecordBytes() const {
  const uint64_t field = 8 + field_name_prefix.size() + 4 + field_length;
  return 4 + 20 + zero_padding + field_count * field;
}

std::string KeyName(const WorkloadConfig& config, uint64_t key_number) {
  if (!config.ordered_inserts) key_number = Fnv64(key_number);
  const std::string digits = absl::StrCat(key_number);
  std::string key = "user";
  if (digits.size() < config.zero_padding) key.append(config.zero_padding - digits.size(), '0');
  key += digits;
  return key;
}

void AppendField(std::string_view name, std::string_view value, std::string* out) {
  AppendU32(static_cast<uint32_t>(name.size()), out);
  out->append(name);
  AppendU32(static_cast<uint32_t>(value.size()), out);
  out->append(value);
}

bool DecodeFields(std::string_view record,
                  std::vector<std::pair<std::string_view, std::string_view>>* fields) {
  fields->clear();
  while (!record.empty()) {
    uint32_t name_bytes = 0, value_bytes = 0;
    if (!TakeU32(&record, &name_bytes) || record.size() < name_bytes) return false;
    const std::string_view name = record.substr(0, name_bytes);
    record.remove_prefix(name_bytes);
    if (!TakeU32(&record, &value_bytes) || record.size() < value_bytes) return false;
    fields->emplace_back(name, record.substr(0, value_bytes));
    record.remove_prefix(value_bytes);
  }
  return true;
}

// --- OperationChooser ---

OperationChooser::OperationChooser(const WorkloadConfig& config, SharedCounters* counters,
                                   uint64_t seed)
    : config_(config), counters_(counters), random_(seed) {
  operations_.Add(static_cast<int>(OpType::kRead), config.read_proportion);
  operations_.Add(static_cast<int>(OpType::kUpdate), config.update_proportion);
  operations_.Add(static_cast<int>(OpType::kInsert), config.insert_proportion);
  operations_.Add(static_cast<int>(OpType::kScan), config.scan_proportion);
  operations_.Add(static_cast<int>(OpType::kReadModifyWrite),
                  config.read_modify_write_proportion);
  const uint64_t first = config.insert_start;
  switch (config.request_distribution) {
    case KeyDistribution::kUniform:
      uniform_keys_.emplace(first, first + config.insert_count - 1);
      break;
    case KeyDistribution::kZipfian: {
      // Room for the keys the run will insert (YCSB: twice the expected count, a fudge factor).
      // The warm-up draws from the same key space as the run it precedes.
      const uint64_t expected_new = static_cast<uint64_t>(
          static_cast<double>(config.operation_count + config.warmup_operation_count) *
          config.insert_proportion * 2.0);
      zipfian_keys_.emplace(first, first + config.insert_count + expected_new,
                            config.zipfian_constant);
      break;
    }
    case KeyDistribution::kLatest:
      latest_keys_.emplace(&counters->insert_sequence);
      break;
  }
  if (config.scan_length_distribution == LengthDistribution::kZipfian) {
    zipfian_scan_.emplace(config.min_scan_length, config.max_scan_length);
  } else {
    uniform_scan_.emplace(config.min_scan_length, config.max_scan_length);
  }
  if (config.field_length_distribution == LengthDistribution::kUniform) {
    uniform_field_length_.emplace(config.min_field_length, config.field_length);
  } else if (config.field_length_distribution == LengthDistribution::kZipfian) {
    zipfian_field_length_.emplace(config.min_field_length, config.field_length);
  }
  for (uint32_t i = 0; i < config.field_count; ++i) {
    field_names_.push_back(absl::StrCat(config.field_name_prefix, i));
  }
}

uint64_t OperationChooser::NextKeyNumber() {
  const uint64_t limit = counters_->insert_sequence.last_value();
  for (;;) {
    uint64_t key;
    if (uniform_keys_) {
      key = uniform_keys_->Next(random_);
    } else if (zipfian_keys_) {
      key = zipfian_keys_->Next(random_);
    } else {
      key = latest_keys_->Next(random_);
    }
    if (key <= limit) return key;
  }
}

uint32_t OperationChooser::NextScanLength() {
  return static_cast<uint32_t>(zipfian_scan_ ? zipfian_scan_->Next(random_)
                                             : uniform_scan_->Next(random_));
}

uint32_t OperationChooser::NextFieldLength() {
  if (uniform_field_length_) return static_cast<uint32_t>(uniform_field_length_->Next(random_));
  if (zipfian_field_length_) return static_cast<uint32_t>(zipfian_field_length_->Next(random_));
  return config_.field_length;
}

// Printable ASCII ' '..'?', 5 random bits per byte as YCSB's RandomByteIterator makes them,
// eight bytes per PRNG step: mask every byte of a random word to 0..31 and add ' ' (0x20) to
// each (no carry: 31 + 32 < 256).
void OperationChooser::FillRandom(size_t bytes, std::string* out) {
  constexpr uint64_t kLow5 = 0x1f1f1f1f1f1f1f1full;
  constexpr uint64_t kSpaces = 0x2020202020202020ull;
  const size_t start = out->size();
  out->resize(start + bytes);
  char* p = out->data() + start;
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    const uint64_t word = (random_.Next() & kLow5) + kSpaces;
    std::memcpy(p + i, &word, 8);
  }
  if (i < bytes) {
    const uint64_t word = (random_.Next() & kLow5) + kSpaces;
    std::memcpy(p + i, &word, bytes - i);
  }
}

// A value that depends only on (key, field): readers can check it (YCSB's
// buildDeterministicValue, with a different but equally deterministic filler).
void OperationChooser::FillDeterministic(std::string_view key, std::string_view field,
                                         size_t bytes, std::string* out) {
  uint64_t seed = 0;
  for (char c : key) seed = Fnv64(seed ^ static_cast<uint8_t>(c));
  for (char c : field) seed = Fnv64(seed ^ static_cast<uint8_t>(c));
  Random random(seed);
  const size_t start = out->size();
  out->resize(start + bytes);
  for (size_t i = 0; i < bytes; ++i) {
    (*out)[start + i] = static_cast<char>(' ' + random.Below(95));
  }
}

void OperationChooser::BuildFieldValue(std::string_view key, uint32_t field, std::string* out) {
  out->clear();
  const uint32_t length = NextFieldLength();
  if (config_.data_integrity) {
    FillDeterministic(key, field_names_[field], length, out);
  } else {
    FillRandom(length, out);
  }
}

void OperationChooser::BuildRecord(std::string_view key, std::string* out) {
  out->clear();
  std::string value;
  for (uint32_t i = 0; i < config_.field_count; ++i) {
    BuildFieldValue(key, i, &value);
    AppendField(field_names_[i], value, out);
  }
}

bool OperationChooser::UpdateField(std::string_view key, uint32_t field, std::string* record) {
  std::vector<std::pair<std::string_view, std::string_view>> fields;
  if (!DecodeFields(*record, &fields) || field >= fields.size()) return false;
  std::string value;
  BuildFieldValue(key, field, &value);
  std::string updated;
  updated.reserve(record->size() + value.size());
  for (uint32_t i = 0; i < fields.size(); ++i) {
    AppendField(fields[i].first, i == field ? std::string_view(value) : fields[i].second,
                &updated);
  }
  *record = std::move(updated);
  return true;
}

bool OperationChooser::CheckRecord(std::string_view key, std::string_view record) {
  std::vector<std::pair<std::string_view, std::string_view>>& fields = scratch_fields_;
  if (!DecodeFields(record, &fields) || fields.size() != config_.field_count) return false;
  std::string expected;
  for (uint32_t i = 0; i < fields.size(); ++i) {
    if (fields[i].first != field_names_[i]) return false;
    if (!config_.data_integrity) continue;
    expected.clear();
    FillDeterministic(key, field_names_[i], config_.field_length, &expected);
    if (fields[i].second != expected) return false;
  }
  return true;
}

}  // namespace nvkv::ycsb
