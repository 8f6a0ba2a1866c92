// Always-on checks and the user-facing error type. Two kinds of failure, never mixed up:
//  - maxctx::Error: the user gave something wrong (config key, value, file, shape). Library code
//    throws it where every rank reaches the same verdict; the CLI prints the message once and
//    every rank exits non-zero. Its message is one line: what was wrong and what is allowed.
//  - MAXCTX_CHECK*: an invariant the code relies on. A failure prints
//    `[rank R] file:line: check failed: <expr> (<values>): <what is allowed>` once, from the
//    failing rank, and aborts every rank, so no rank is left waiting inside a collective.
// core/ knows no MPI: R is log::rank() and "every rank" is the abort hook, both set by the mesh
// runtime (mesh/runtime.cpp: MPI_Abort on MPI_COMM_WORLD).
#pragma once

#include <fmt/format.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace maxctx {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws maxctx::Error with a formatted one-line message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

// What a failed MAXCTX_CHECK does with its message. The default prints and aborts every rank;
// tests install a handler that throws so that they can assert a check fires.
using CheckHandler = std::function<void(const std::string& message)>;
void set_check_handler(CheckHandler handler);  // empty handler restores the default

// Ends the whole job once a failed check's message is out: the mesh runtime installs
// MPI_Abort(MPI_COMM_WORLD, 1) when MPI is up and removes it before MPI_Finalize. Should it
// return, or with no hook installed, the process ends with std::abort(). Returns the hook it
// replaces, so that a scope can put it back.
using AbortHook = std::function<void()>;
AbortHook set_abort_hook(AbortHook hook);  // empty hook: std::abort() of this process only

// `text` fit for one line on a terminal (issue #34 N9): control characters (newline, ESC, ...)
// and DEL as \xNN, so a name taken from a file cannot forge lines or send terminal codes. Every
// error line is printed through it.
std::string printable(std::string_view text);

// Ends the whole job from one rank for an error the other ranks may not share (an exception
// that is not a maxctx::Error, which may be this rank's alone): prints "maxctx: error: [rank R]
// message" on this rank, then the abort hook (MPI_Abort: every rank exits non-zero), then abort.
[[noreturn]] void abort_job(const std::string& message);

// The end of abort_job without its message, for a caller that printed its own: the abort hook,
// then std::abort().
[[noreturn]] void end_job();

// What MAXCTX_CHECK* calls: the handler if one is installed, else print, abort hook, abort.
[[noreturn]] void check_failed(const char* file, int line, const std::string& what);

namespace detail {
template <typename A, typename B>
std::string format_operands(const A& a, const B& b) {
  return fmt::format("{} vs {}", a, b);
}
}  // namespace detail

}  // namespace maxctx

#define MAXCTX_CHECK(cond, ...)                                                      \
  do {                                                                               \
    if (!(cond)) [[unlikely]] {                                                      \
      ::maxctx::check_failed(                                                        \
          __FILE__, __LINE__,                                                        \
          ::fmt::format("check failed: {}: {}", #cond, ::fmt::format(__VA_ARGS__))); \
    }                                                                                \
  } while (0)

#define MAXCTX_CHECK_OP_(op, a, b, ...)                                                      \
  do {                                                                                       \
    const auto& maxctx_check_a_ = (a);                                                       \
    const auto& maxctx_check_b_ = (b);                                                       \
    if (!(maxctx_check_a_ op maxctx_check_b_)) [[unlikely]] {                                \
      ::maxctx::check_failed(                                                                \
          __FILE__, __LINE__,                                                                \
          ::fmt::format("check failed: {} {} {} ({}): {}", #a, #op, #b,                      \
                        ::maxctx::detail::format_operands(maxctx_check_a_, maxctx_check_b_), \
                        ::fmt::format(__VA_ARGS__)));                                        \
    }                                                                                        \
  } while (0)

#define MAXCTX_CHECK_EQ(a, b, ...) MAXCTX_CHECK_OP_(==, a, b, __VA_ARGS__)
#define MAXCTX_CHECK_NE(a, b, ...) MAXCTX_CHECK_OP_(!=, a, b, __VA_ARGS__)
#define MAXCTX_CHECK_LT(a, b, ...) MAXCTX_CHECK_OP_(<, a, b, __VA_ARGS__)
#define MAXCTX_CHECK_LE(a, b, ...) MAXCTX_CHECK_OP_(<=, a, b, __VA_ARGS__)
#define MAXCTX_CHECK_GT(a, b, ...) MAXCTX_CHECK_OP_(>, a, b, __VA_ARGS__)
#define MAXCTX_CHECK_GE(a, b, ...) MAXCTX_CHECK_OP_(>=, a, b, __VA_ARGS__)
