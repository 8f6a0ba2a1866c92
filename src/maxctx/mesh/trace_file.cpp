// Chrome trace-event JSON (see trace_file.h). The format: a top-level {"traceEvents": [...]}
// whose complete events carry name, cat, ph "X", ts and dur in microseconds, pid, tid and args;
// "M" (metadata) events name processes and threads. Names are identifiers we chose, but are
// escaped anyway so that an interned run-time name cannot break the file.
#include "maxctx/mesh/trace_file.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "maxctx/core/check.h"
#include "maxctx/mesh/root_task.h"

namespace maxctx {
namespace {

std::string escaped(const char* text) {
  std::string out;
  for (const char* c = text; *c != '\0'; ++c) {
    const auto byte = static_cast<unsigned char>(*c);
    if (*c == '"' || *c == '\\') {
      out += '\\';
      out += *c;
    } else if (byte < 0x20) {
      out += fmt::format("\\u{:04x}", byte);
    } else {
      out += *c;
    }
  }
  return out;
}

double micros(int64_t ns) { return static_cast<double>(ns) / 1000.0; }

}  // namespace

void start_trace(const Communicator& comm) {
  comm.barrier();
  trace::start(trace::now_ns());
}

std::string trace_events_json(const std::vector<trace::Event>& events, int pid, int64_t origin) {
  std::string out = fmt::format(
      "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{0},\"tid\":0,"
      "\"args\":{{\"name\":\"rank {0}\"}}}},\n"
      "{{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":{0},\"tid\":0,"
      "\"args\":{{\"sort_index\":{0}}}}},\n"
      "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{0},\"tid\":{1},"
      "\"args\":{{\"name\":\"main\"}}}},\n"
      "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{0},\"tid\":{2},"
      "\"args\":{{\"name\":\"transfers in flight\"}}}}",
      pid, trace::kMainTrack, trace::kAsyncTrack);
  for (const trace::Event& e : events) {
    std::string args;
    if (e.detail != nullptr) args += fmt::format("\"detail\":\"{}\"", escaped(e.detail));
    if (e.value >= 0) args += fmt::format("{}\"bytes\":{}", args.empty() ? "" : ",", e.value);
    out += fmt::format(
        ",\n{{\"name\":\"{}\",\"cat\":\"{}\",\"ph\":\"X\",\"ts\":{:.3f},\"dur\":{:.3f},"
        "\"pid\":{},\"tid\":{},\"args\":{{{}}}}}",
        escaped(e.name), trace::category_name(e.category), micros(e.begin_ns - origin),
        micros(e.end_ns - e.begin_ns), pid, e.track, args);
  }
  return out;
}

void write_trace(const Communicator& comm, const std::filesystem::path& path) {
  trace::stop();
  const std::string mine = trace_events_json(trace::collect(), comm.rank(), trace::origin_ns());
  // Rank 0 collects the others' text one rank at a time: a length, then the bytes.
  std::vector<std::string> parts(static_cast<size_t>(comm.size()));
  parts[0] = mine;
  for (int r = 1; r < comm.size(); ++r) {
    int64_t length = static_cast<int64_t>(mine.size());
    const bool me = comm.rank() == r;
    if (comm.rank() == 0 || me) {
      comm.send_recv(std::span<const int64_t>(&length, me ? 1 : 0), me ? 0 : kNoPeer,
                     std::span<int64_t>(&length, me ? 0 : 1), me ? kNoPeer : r);
      std::string& part = parts[static_cast<size_t>(r)];
      part.resize(me ? 0 : static_cast<size_t>(length));
      comm.send_recv(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(mine.data()),
                                              me ? mine.size() : 0),
                     me ? 0 : kNoPeer,
                     std::span<uint8_t>(reinterpret_cast<uint8_t*>(part.data()), part.size()),
                     me ? kNoPeer : r);
    }
  }
  run_on_root(comm, [&] {
    const std::filesystem::path partial = path.string() + ".partial";
    FILE* file = std::fopen(partial.c_str(), "w");
    if (file == nullptr)
      fail("cannot open the trace file {}: {}", partial.string(), std::strerror(errno));
    bool ok = std::fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", file) >= 0;
    for (size_t r = 0; r < parts.size(); ++r) {
      if (r > 0) ok = ok && std::fputs(",\n", file) >= 0;
      ok = ok && std::fwrite(parts[r].data(), 1, parts[r].size(), file) == parts[r].size();
    }
    ok = ok && std::fputs("\n]}\n", file) >= 0;
    ok = std::fclose(file) == 0 && ok;
    if (!ok) fail("cannot write the trace file {}: {}", partial.string(), std::strerror(errno));
    std::filesystem::rename(partial, path);
  });
}

}  // namespace maxctx
