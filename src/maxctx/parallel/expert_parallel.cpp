#include "maxctx/parallel/expert_parallel.h"

#include <algorithm>

#include "maxctx/core/check.h"

namespace maxctx::parallel {

void ExpertAllToAll::exchange_counts(std::span<const int64_t> send, std::span<int64_t> recv) {
  expert_.all_to_all<int64_t>(send, recv);
}

void ExpertAllToAll::exchange_rows(TensorView in, std::span<const int64_t> send_rows,
                                   TensorView out, std::span<const int64_t> recv_rows) {
  MAXCTX_CHECK(in.shape().rank() == 2 && out.shape().rank() == 2 && in.shape()[1] == out.shape()[1],
               "expert rows of one width ({} and {})", in.shape().to_string(),
               out.shape().to_string());
  const int64_t width = in.shape()[1];
  send_elements_.resize(send_rows.size());
  recv_elements_.resize(recv_rows.size());
  for (size_t p = 0; p < send_rows.size(); ++p) send_elements_[p] = send_rows[p] * width;
  for (size_t p = 0; p < recv_rows.size(); ++p) recv_elements_[p] = recv_rows[p] * width;
  expert_.all_to_allv(in, send_elements_, out, recv_elements_, stream_);
}

void ExpertAllToAll::add_forward_traffic(Traffic& traffic, const std::string& axis,
                                         int64_t num_experts, int64_t rows, int64_t width,
                                         DType dtype) {
  traffic.add(axis, CollectiveKind::kAllToAll, num_experts * int64_t{sizeof(int64_t)});
  traffic.add(axis, CollectiveKind::kAllToAll,
              rows * width * static_cast<int64_t>(dtype_size(dtype)));
  traffic.add(axis, CollectiveKind::kAllToAll, rows * width * int64_t{sizeof(float)});
}

void ExpertAllToAll::add_backward_traffic(Traffic& traffic, const std::string& axis, int64_t rows,
                                          int64_t width) {
  traffic.add(axis, CollectiveKind::kAllToAll, rows * width * int64_t{sizeof(float)}, 2);
}

void gather_experts(TensorView global, const std::vector<WeightSpec>& global_specs,
                    const std::vector<WeightSpec>& local_specs, const Communicator& expert) {
  MAXCTX_CHECK_EQ(global_specs.size(), local_specs.size(), "specs of different models");
  if (expert.size() == 1) return;
  int64_t num_experts = 0;
  for (const WeightSpec& s : local_specs) num_experts = std::max(num_experts, s.expert + 1);
  const int64_t per_rank = local_experts(num_experts, expert.size(), 0).count;
  for (size_t i = 0; i < local_specs.size(); ++i) {
    if (!local_specs[i].expert_weight()) continue;
    const TensorView tensor = global.elements(global_specs[i].offset, global_specs[i].numel());
    // Raw bytes: any weight dtype travels as it is.
    expert.broadcast<uint8_t>(
        std::span<uint8_t>(static_cast<uint8_t*>(tensor.raw()), tensor.bytes()),
        static_cast<int>(local_specs[i].expert / per_rank));
  }
}

}  // namespace maxctx::parallel
