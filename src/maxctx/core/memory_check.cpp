#include "maxctx/core/memory_check.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>

#include "maxctx/core/check.h"

namespace maxctx {

int64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return INT64_MAX;  // unknown: do not refuse
  return static_cast<int64_t>(pages) * page_size;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 6) {
    bytes /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.1f} {}", bytes, units[unit]);
}

void check_fits_in_memory(double bytes_per_rank, int64_t world_size, int64_t num_nodes,
                          std::string_view what, std::string_view detail) {
  const int64_t ranks_on_this_machine =
      (world_size + num_nodes - 1) / std::max<int64_t>(num_nodes, 1);
  const double total = bytes_per_rank * static_cast<double>(ranks_on_this_machine);
  const double available = static_cast<double>(physical_memory_bytes());
  if (total <= available) return;
  fail(
      "{} needs at least {} per rank x {} rank(s) on this machine = {}, more than its {} of "
      "memory ({}); make the model, batch or sequence smaller, or use more machines",
      what, format_bytes(bytes_per_rank), ranks_on_this_machine, format_bytes(total),
      format_bytes(available), detail);
}

}  // namespace maxctx
