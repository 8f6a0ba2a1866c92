// A failed check's one way out (see check.h): the test handler if one is installed, else the
// message once on stderr, prefixed with the rank the runtime told the logger, then the abort
// hook (every rank) and std::abort() (this process) behind it. No MPI here: the mesh runtime
// supplies both the rank and the hook.
#include "maxctx/core/check.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "maxctx/core/log.h"

namespace maxctx {
namespace {

CheckHandler& check_handler() {
  static CheckHandler handler;
  return handler;
}

AbortHook& abort_hook() {
  static AbortHook hook;
  return hook;
}

}  // namespace

void set_check_handler(CheckHandler handler) { check_handler() = std::move(handler); }

AbortHook set_abort_hook(AbortHook hook) { return std::exchange(abort_hook(), std::move(hook)); }

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      out += fmt::format("\\x{:02x}", byte);
    } else {
      out += c;
    }
  }
  return out;
}

void check_failed(const char* file, int line, const std::string& what) {
  const std::string message = printable(fmt::format("{}:{}: {}", file, line, what));
  if (check_handler()) {
    check_handler()(message);
  }
  std::fprintf(stderr, "[rank %d] %s\n", log::rank(), message.c_str());
  std::fflush(stderr);
  end_job();
}

void abort_job(const std::string& message) {
  std::fprintf(stderr, "maxctx: error: [rank %d] %s\n", log::rank(), printable(message).c_str());
  std::fflush(stderr);
  end_job();
}

void end_job() {
  if (abort_hook()) {
    abort_hook()();
  }
  std::abort();
}

}  // namespace maxctx
