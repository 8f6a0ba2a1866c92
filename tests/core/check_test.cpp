#include "maxctx/core/check.h"

#include <gtest/gtest.h>

#include <string>

namespace maxctx {
namespace {

std::string message_of_failed_check(int a, int b) {
  std::string message;
  set_check_handler([&](const std::string& m) { throw Error(m); });
  try {
    MAXCTX_CHECK_EQ(a, b, "heads must divide evenly, allowed: multiples of {}", 4);
  } catch (const Error& e) {
    message = e.what();
  }
  set_check_handler({});
  return message;
}

TEST(Check, MessageNamesFileLineValuesAndWhatIsAllowed) {
  const std::string message = message_of_failed_check(3, 4);
  EXPECT_NE(message.find("check_test.cpp:"), std::string::npos) << message;
  EXPECT_NE(message.find("a == b (3 vs 4)"), std::string::npos) << message;
  EXPECT_NE(message.find("allowed: multiples of 4"), std::string::npos) << message;
  EXPECT_EQ(message_of_failed_check(2, 2), "");
}

TEST(Check, FailThrowsUserError) {
  try {
    fail("unknown key '{}'", "foo");
    FAIL() << "fail() returned";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "unknown key 'foo'");
  }
}

}  // namespace
}  // namespace maxctx
