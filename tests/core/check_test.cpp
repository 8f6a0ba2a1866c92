// MAXCTX_CHECK and fail(): the message a failed check carries, and the way out of a failed check
// with no test handler (one "[rank R] file:line: ..." line on stderr, then the abort hook). The
// hook is swapped for one that throws, so the process survives to assert on it.
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

TEST(Check, FailedCheckPrintsOneRankLineThenCallsTheAbortHook) {
  int aborts = 0;
  const AbortHook saved = set_abort_hook([&] {
    ++aborts;
    throw Error("abort hook");
  });
  testing::internal::CaptureStderr();
  try {
    MAXCTX_CHECK(aborts > 0, "nothing is allowed");
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "abort hook");
  }
  const std::string printed = testing::internal::GetCapturedStderr();
  set_abort_hook(saved);
  EXPECT_EQ(aborts, 1);
  EXPECT_EQ(printed.rfind("[rank 0] ", 0), 0u) << printed;  // core_test runs as one process
  EXPECT_NE(printed.find("check_test.cpp:"), std::string::npos) << printed;
  EXPECT_NE(printed.find("check failed: aborts > 0: nothing is allowed"), std::string::npos)
      << printed;
  EXPECT_EQ(printed.find('\n'), printed.size() - 1) << "one line: " << printed;
}

TEST(Check, FailThrowsUserError) {
  try {
    fail("unknown key '{}'", "foo");
    FAIL() << "fail() returned";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "unknown key 'foo'");
  }
}

// Error lines are printed through printable(): a name from a file with a newline or an escape
// sequence cannot forge a line or reach the terminal (issue #34 N9); other text is kept.
TEST(Check, PrintableEscapesControlCharacters) {
  EXPECT_EQ(printable("tensor 'a\nmaxctx: error: fake\x1b[2J' \x7f"),
            "tensor 'a\\x0amaxctx: error: fake\\x1b[2J' \\x7f");
  EXPECT_EQ(printable("caf\xc3\xa9 [0, 12] \\x"), "caf\xc3\xa9 [0, 12] \\x");
}

}  // namespace
}  // namespace maxctx
