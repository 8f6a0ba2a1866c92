// Open addressing for the merge and token tables. See bpe_tables.h.
#include "maxctx/tokenizer/bpe_tables.h"

#include <algorithm>
#include <functional>

namespace maxctx::tokenizer {
namespace {

// The first slot of a hash in a power-of-two table: Fibonacci hashing, the product's high bits,
// so that keys differing only in their high or low bits (pairs of ids) still spread.
size_t first_slot(uint64_t hash, size_t slots) {
  return static_cast<size_t>((hash * 0x9E3779B97F4A7C15ull) >> (64 - std::countr_zero(slots)));
}

uint64_t pair_key(int32_t left, int32_t right) {
  return (uint64_t{static_cast<uint32_t>(left)} << 32) | static_cast<uint32_t>(right);
}

// Slots for at least twice the entries: a new table of double the size when one more would
// pass half full.
template <typename Slot>
std::vector<Slot> grown_for(std::vector<Slot>& slots, size_t count) {
  if (2 * (count + 1) <= slots.size()) return {};
  std::vector<Slot> old = std::move(slots);
  slots.assign(std::max<size_t>(64, 2 * old.size()), Slot{});
  return old;
}

}  // namespace

void BpeMergeTable::insert(int32_t left, int32_t right, BpeMerge merge) {
  if ((left | right) < kDense) {
    BpeMerge& slot = dense_[left * kDense + right];
    if (slot.rank < 0) slot = merge;
    return;
  }
  std::vector<Slot> old = grown_for(slots_, count_);
  if (!old.empty()) {
    count_ = 0;
    for (const Slot& slot : old) {
      if (slot.pair != kEmpty) place(slot.pair, slot.merge);
    }
  }
  place(pair_key(left, right), merge);
}

void BpeMergeTable::place(uint64_t pair, BpeMerge merge) {
  for (size_t i = first_slot(pair, slots_.size());; i = (i + 1) & (slots_.size() - 1)) {
    if (slots_[i].pair == pair) return;
    if (slots_[i].pair == kEmpty) {
      slots_[i] = Slot{pair, merge};
      ++count_;
      return;
    }
  }
}

const BpeMerge* BpeMergeTable::find_sparse(int32_t left, int32_t right) const {
  if (slots_.empty()) return nullptr;
  const uint64_t pair = pair_key(left, right);
  for (size_t i = first_slot(pair, slots_.size());; i = (i + 1) & (slots_.size() - 1)) {
    if (slots_[i].pair == pair) return &slots_[i].merge;
    if (slots_[i].pair == kEmpty) return nullptr;
  }
}

void BpeTokenTable::insert(std::string bytes, int32_t id) {
  const size_t hash = std::hash<std::string_view>()(bytes);
  if (find_entry(bytes, hash) >= 0) return;
  if (!grown_for(slots_, bytes_.size()).empty()) {
    for (size_t entry = 0; entry < bytes_.size(); ++entry) {
      place(std::hash<std::string_view>()(bytes_[entry]), entry);
    }
  }
  place(hash, bytes_.size());
  bytes_.push_back(std::move(bytes));
  ids_.push_back(id);
}

void BpeTokenTable::place(size_t hash, size_t entry) {
  size_t i = first_slot(hash, slots_.size());
  while (slots_[i] != 0) i = (i + 1) & (slots_.size() - 1);
  slots_[i] = slot_value(hash, entry);
}

int64_t BpeTokenTable::find_entry(std::string_view bytes, size_t hash) const {
  if (slots_.empty()) return -1;
  const uint64_t high = hash >> 32 << 32;
  for (size_t i = first_slot(hash, slots_.size()); slots_[i] != 0;
       i = (i + 1) & (slots_.size() - 1)) {
    if ((slots_[i] >> 32 << 32) != high) continue;
    const size_t entry = static_cast<uint32_t>(slots_[i]) - 1;
    if (bytes_[entry] == bytes) return static_cast<int64_t>(entry);
  }
  return -1;
}

int32_t BpeTokenTable::find(std::string_view bytes) const {
  const int64_t entry = find_entry(bytes, std::hash<std::string_view>()(bytes));
  return entry < 0 ? -1 : ids_[entry];
}

}  // namespace maxctx::tokenizer
