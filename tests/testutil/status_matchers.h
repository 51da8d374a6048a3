// gMock matchers for absl::Status and absl::StatusOr (Debian 12's Abseil has none).
//   EXPECT_THAT(db->Put("k", "v"), IsOk());
//   EXPECT_THAT(device->Enqueue(&r), StatusIs(absl::StatusCode::kOutOfRange));
#ifndef NVKV_TESTS_TESTUTIL_STATUS_MATCHERS_H_
#define NVKV_TESTS_TESTUTIL_STATUS_MATCHERS_H_

#include <gmock/gmock.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace nvkv::testing {

inline const absl::Status& GetStatus(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

MATCHER(IsOk, "is OK") {
  const absl::Status& status = GetStatus(arg);
  if (!status.ok()) *result_listener << "status is " << status.ToString();
  return status.ok();
}

MATCHER_P(StatusIs, code, "has status code " + absl::StatusCodeToString(code)) {
  const absl::Status& status = GetStatus(arg);
  *result_listener << "status is " << status.ToString();
  return status.code() == code;
}

MATCHER_P2(StatusIs, code, message_part,
           "has status code " + absl::StatusCodeToString(code) + " and a message containing \"" +
               std::string(message_part) + "\"") {
  const absl::Status& status = GetStatus(arg);
  *result_listener << "status is " << status.ToString();
  return status.code() == code &&
         status.message().find(message_part) != absl::string_view::npos;
}

}  // namespace nvkv::testing

#define NVKV_ASSERT_OK(expr) ASSERT_THAT((expr), ::nvkv::testing::IsOk())
#define NVKV_EXPECT_OK(expr) EXPECT_THAT((expr), ::nvkv::testing::IsOk())

#endif  // NVKV_TESTS_TESTUTIL_STATUS_MATCHERS_H_
