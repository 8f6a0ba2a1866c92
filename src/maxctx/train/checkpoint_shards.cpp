#include "maxctx/train/checkpoint_shards.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>

#include "maxctx/core/check.h"
#include "maxctx/core/finite.h"

namespace maxctx::train {
namespace {

using model::WeightSpec;
using parallel::FlatSlice;
using parallel::ShardedParameters;

std::vector<int64_t> global_shape(const WeightSpec& spec) {
  if (spec.global_cols == 1) return {spec.global_rows};
  return {spec.global_rows, spec.global_cols};
}

io::Rect rect_of(const FlatSlice& s) { return {s.row, s.col, s.rows, s.cols}; }

// Every part of this rank's shard, with where it sits in the shard buffers.
struct ShardPart {
  FlatSlice slice;
  int64_t shard_index;  // first element in master() / adam_m() / adam_v()
};
std::vector<ShardPart> shard_parts(const std::vector<WeightSpec>& specs,
                                   const std::vector<ShardedParameters::Unit>& units) {
  std::vector<ShardPart> parts;
  for (const ShardedParameters::Unit& u : units) {
    for (const FlatSlice& s :
         parallel::flat_slices(specs, u.shard_begin, u.shard_begin + u.shard_count)) {
      parts.push_back({s, u.shard_offset + (s.flat_begin - u.shard_begin)});
    }
  }
  return parts;
}

std::vector<ShardPart> saved_parts(const std::vector<WeightSpec>& specs,
                                   const std::vector<ShardedParameters::Unit>& units,
                                   const parallel::ReplicaPosition& position) {
  std::vector<ShardPart> parts = shard_parts(specs, units);
  std::erase_if(parts, [&](const ShardPart& p) {
    return !parallel::saves_copy(specs[static_cast<size_t>(p.slice.spec)], position);
  });
  return parts;
}

}  // namespace

int64_t staged_checkpoint_bytes(const std::vector<WeightSpec>& specs,
                                const std::vector<ShardedParameters::Unit>& units,
                                const parallel::ReplicaPosition& position, DType weight_dtype) {
  int64_t elements = 0;
  for (const ShardPart& p : saved_parts(specs, units, position)) elements += p.slice.numel();
  return 3 * elements * static_cast<int64_t>(dtype_size(weight_dtype));
}

StagedSlices stage_checkpoint_slices(const kernels::Kernels& kernels,
                                     const std::vector<WeightSpec>& specs,
                                     const ShardedParameters& parameters,
                                     const parallel::ReplicaPosition& position,
                                     StagedSlices reuse) {
  const std::vector<ShardPart> parts = saved_parts(specs, parameters.units(), position);
  const DType dtype = parameters.weight_dtype();
  StagedSlices staged;
  staged.size = staged_checkpoint_bytes(specs, parameters.units(), position, dtype);
  // Whole 4 KiB blocks (the direct-I/O write's unit, io::kDirectIoAlignment), at least one.
  const size_t needed =
      std::max<size_t>(
          (static_cast<size_t>(staged.size) + io::kDirectIoAlignment - 1) / io::kDirectIoAlignment,
          1) *
      io::kDirectIoAlignment;
  if (reuse.bytes && reuse.capacity >= needed) {
    // The last save's buffer, its pages already faulted in: a save costs the copy alone.
    staged.bytes = std::move(reuse.bytes);
    staged.capacity = reuse.capacity;
  } else {
    // Every byte is about to be copied over, so no initialisation. In 4 KiB pages: asking for
    // 2 MiB ones (MADV_HUGEPAGE) made the kernel compact memory on the first touch, which took
    // 1.6-2.2 s per 306 MiB shard where memory was fragmented (0.35 s without the advice).
    staged.bytes.reset(static_cast<std::byte*>(std::aligned_alloc(io::kDirectIoAlignment, needed)));
    if (!staged.bytes) throw std::bad_alloc();
    staged.capacity = needed;
  }
  const struct {
    const char* moment;  // nullptr: the weights themselves
    TensorView shard;
  } sources[] = {{nullptr, parameters.master()},
                 {"adam_m", parameters.adam_m()},
                 {"adam_v", parameters.adam_v()}};
  struct PendingCopy {
    TensorView part;
    io::SliceToWrite slice;  // its data set once laid out
    std::string key;
  };
  std::vector<PendingCopy> copies;
  for (const auto& source : sources) {
    for (const ShardPart& p : parts) {
      const WeightSpec& spec = specs[static_cast<size_t>(p.slice.spec)];
      io::SliceToWrite slice{source.moment ? moment_name(source.moment, spec.name) : spec.name,
                             io::st_dtype_of(dtype),
                             global_shape(spec),
                             rect_of(p.slice),
                             {}};
      std::string key = io::slice_key(slice);
      copies.push_back({source.shard.elements(p.shard_index, p.slice.numel()), std::move(slice),
                        std::move(key)});
    }
  }
  // In the order of the keys, which is the order the shard file holds its slices in: the file is
  // then written straight from this buffer (train/checkpoint.cpp, write_shard).
  std::sort(copies.begin(), copies.end(),
            [](const PendingCopy& a, const PendingCopy& b) { return a.key < b.key; });
  std::byte* next = staged.bytes.get();
  for (PendingCopy& c : copies) {
    kernels.copy_to_host(next, c.part.raw(), c.part.bytes());
    c.slice.data = std::span<const std::byte>(next, c.part.bytes());
    staged.slices.push_back(std::move(c.slice));
    next += c.part.bytes();
  }
  // The last disk block's padding, written and then cut off: zeros, not old heap bytes.
  const auto tail = static_cast<size_t>(staged.size) % io::kDirectIoAlignment;
  if (tail != 0) std::memset(next, 0, io::kDirectIoAlignment - tail);
  MAXCTX_CHECK_EQ(next - staged.bytes.get(), staged.size, "staged checkpoint bytes");
  return staged;
}

void restore_shard(const kernels::Kernels& kernels, const io::SliceReader& tensors,
                   const std::vector<WeightSpec>& specs, ShardedParameters& parameters,
                   bool with_moments) {
  if (!with_moments) {
    kernels.fill_zero(parameters.adam_m());
    kernels.fill_zero(parameters.adam_v());
  }
  const bool host_memory = kernels.device() == Device::kCpu;
  Tensor staging;  // one slice on the host, for a backend whose memory is not the host's
  for (const ShardPart& p : shard_parts(specs, parameters.units())) {
    const WeightSpec& spec = specs[static_cast<size_t>(p.slice.spec)];
    const auto read = [&](const std::string& name, TensorView shard) {
      const TensorView out = shard.elements(p.shard_index, p.slice.numel());
      TensorView host = out;
      if (!host_memory) {
        if (staging.numel() < out.numel() || staging.dtype() != out.dtype()) {
          staging = Tensor({out.numel()}, out.dtype());
        }
        host = staging.view().elements(0, out.numel());
      }
      tensors.read(name, rect_of(p.slice), host);
      if (const std::optional<int64_t> bad = first_non_finite(host)) {
        fail(
            "tensor '{}' holds a non-finite value (NaN or Inf) at element {} of rows [{}, {}) x "
            "columns [{}, {}); the file is damaged or the run had diverged when it was saved",
            name, *bad, p.slice.row, p.slice.row + p.slice.rows, p.slice.col,
            p.slice.col + p.slice.cols);
      }
      if (!host_memory) kernels.copy_from_host(out.raw(), host.raw(), out.bytes());
    };
    read(spec.name, parameters.master());
    if (with_moments) {
      read(moment_name("adam_m", spec.name), parameters.adam_m());
      read(moment_name("adam_v", spec.name), parameters.adam_v());
    }
  }
}

}  // namespace maxctx::train
