#include "maxctx/core/fault_injection.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <new>
#include <string_view>
#include <thread>

#include "maxctx/core/check.h"
#include "maxctx/core/log.h"

namespace maxctx {
namespace {

int64_t parse_number(std::string_view value, std::string_view key, const std::string& text) {
  int64_t out = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), out);
  if (error != std::errc() || end != value.data() + value.size() || out < 0) {
    fail("MAXCTX_FAULT = '{}': {} = '{}' is not a non-negative integer", text, key, value);
  }
  return out;
}

FaultKind parse_kind(std::string_view value, const std::string& text) {
  if (value == "write") return FaultKind::kWrite;
  if (value == "alloc") return FaultKind::kAlloc;
  if (value == "collective") return FaultKind::kCollective;
  if (value == "kill") return FaultKind::kKill;
  if (value == "kill_save_start") return FaultKind::kKillSaveStart;
  if (value == "kill_save_writing") return FaultKind::kKillSaveWriting;
  if (value == "kill_save_written") return FaultKind::kKillSaveWritten;
  if (value == "kill_save_commit") return FaultKind::kKillSaveCommit;
  fail(
      "MAXCTX_FAULT = '{}': kind = '{}' is not one of write, alloc, collective, kill, "
      "kill_save_start, kill_save_writing, kill_save_written, kill_save_commit",
      text, value);
}

}  // namespace

FaultPlan parse_fault_plan(const std::string& text) {
  FaultPlan plan;
  bool has_rank = false, has_step = false, has_kind = false;
  std::string_view rest = text;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const size_t equals = item.find('=');
    if (equals == std::string_view::npos) {
      fail("MAXCTX_FAULT = '{}': '{}' is not key=value (rank=R,step=K,kind=KIND)", text, item);
    }
    const std::string_view key = item.substr(0, equals), value = item.substr(equals + 1);
    if (key == "rank") {
      plan.rank = static_cast<int>(std::min<int64_t>(parse_number(value, key, text), INT32_MAX));
      has_rank = true;
    } else if (key == "step") {
      plan.step = parse_number(value, key, text);
      has_step = true;
    } else if (key == "kind") {
      plan.kind = parse_kind(value, text);
      has_kind = true;
    } else {
      fail("MAXCTX_FAULT = '{}': unknown key '{}'; use rank=R,step=K,kind=KIND", text, key);
    }
  }
  if (!has_rank || !has_step || !has_kind) {
    fail("MAXCTX_FAULT = '{}' needs rank, step and kind (rank=1,step=3,kind=kill)", text);
  }
  if (plan.kind == FaultKind::kKillSaveCommit && plan.rank != 0) {
    fail("MAXCTX_FAULT = '{}': kind=kill_save_commit strikes the committing rank, which is rank 0",
         text);
  }
  return plan;
}

const std::optional<FaultPlan>& fault_plan() {
  static const std::optional<FaultPlan> plan = []() -> std::optional<FaultPlan> {
    const char* text = std::getenv("MAXCTX_FAULT");
    if (text == nullptr || *text == '\0') return std::nullopt;
    return parse_fault_plan(text);
  }();
  return plan;
}

void inject_fault(FaultKind kind, int64_t step) {
  const std::optional<FaultPlan>& plan = fault_plan();
  if (!plan || plan->kind != kind || plan->step != step || plan->rank != log::rank()) return;
  switch (kind) {
    case FaultKind::kWrite:
      fail("injected fault (MAXCTX_FAULT): the checkpoint write of step {} fails", step);
    case FaultKind::kAlloc:
      throw std::bad_alloc();
    case FaultKind::kCollective:
      log::rank_info("injected fault (MAXCTX_FAULT): stopping before step {}'s collectives", step);
      while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
    case FaultKind::kKill:
    case FaultKind::kKillSaveStart:
    case FaultKind::kKillSaveWriting:
    case FaultKind::kKillSaveWritten:
    case FaultKind::kKillSaveCommit:
      std::raise(SIGKILL);
      break;
  }
  std::abort();
}

void inject_step_faults(int64_t step) {
  if (!fault_plan()) return;
  inject_fault(FaultKind::kAlloc, step);
  inject_fault(FaultKind::kCollective, step);
  inject_fault(FaultKind::kKill, step);
}

}  // namespace maxctx
