// One-op writes for the engine's tests: a Put or a Delete as a batch of one WriteOp.
#ifndef NVKV_TESTS_KV_ENGINE_OPS_H_
#define NVKV_TESTS_KV_ENGINE_OPS_H_

#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "kv/engine.h"

namespace nvkv::kv {

inline absl::Status Put(Engine& engine, std::string_view key, std::string_view value,
                        bool durable = true) {
  WriteOp op{false, key, value};
  return engine.Write(std::span<const WriteOp>(&op, 1), durable);
}

inline absl::Status Delete(Engine& engine, std::string_view key, bool durable = true) {
  WriteOp op{true, key, {}};
  return engine.Write(std::span<const WriteOp>(&op, 1), durable);
}

}  // namespace nvkv::kv

#endif  // NVKV_TESTS_KV_ENGINE_OPS_H_
