// Status propagation helpers. Debian 12's Abseil (20220623) ships no status_macros.h, so nvkv
// keeps its own two macros here.
#ifndef NVKV_STORAGE_BASE_STATUS_MACROS_H_
#define NVKV_STORAGE_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define NVKV_STATUS_CONCAT_INNER_(a, b) a##b
#define NVKV_STATUS_CONCAT_(a, b) NVKV_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status) and returns it from the enclosing function if not OK.
#define NVKV_RETURN_IF_ERROR(expr)                         \
  do {                                                     \
    ::absl::Status nvkv_status_ = (expr);                  \
    if (__builtin_expect(!nvkv_status_.ok(), 0)) {         \
      return nvkv_status_;                                 \
    }                                                      \
  } while (0)

// `NVKV_ASSIGN_OR_RETURN(auto x, Foo());` evaluates Foo() (an absl::StatusOr<T>), returns its
// status if not OK, and otherwise moves the value into the declaration on the left.
#define NVKV_ASSIGN_OR_RETURN(lhs, expr) \
  NVKV_ASSIGN_OR_RETURN_IMPL_(NVKV_STATUS_CONCAT_(nvkv_statusor_, __LINE__), lhs, expr)

#define NVKV_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                \
  if (__builtin_expect(!statusor.ok(), 0)) {             \
    return std::move(statusor).status();                 \
  }                                                      \
  lhs = std::move(*statusor)

#endif  // NVKV_STORAGE_BASE_STATUS_MACROS_H_
