// The two lookup tables of byte-level BPE encoding (bpe.h): (left id, right id) -> merge, and a
// token's bytes -> id. Looking pairs up is most of the merges' time and a vocabulary's tables
// hold 10^5-10^6 entries, out of cache: both are open addressing (linear probing in a
// power-of-two table at most half full, one probe for most lookups), where std::unordered_map
// costs a cache miss per node; pairs of ids below 256, the single bytes in every vocabulary
// maxctx reads and so the first lookup of every adjacent pair of bytes, are a dense 256 x 256
// array that stays in cache. Both keep the first entry inserted for a key, as the reference
// implementations keep a repeated merge's first (lowest) rank.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace maxctx::tokenizer {

struct BpeMerge {
  int32_t rank;
  int32_t merged_id;
};

class BpeMergeTable {
 public:
  void insert(int32_t left, int32_t right, BpeMerge merge);
  // Null when the pair has no merge. Ids are in [0, 2^31).
  const BpeMerge* find(int32_t left, int32_t right) const {
    if ((left | right) < kDense) {
      const BpeMerge& merge = dense_[left * kDense + right];
      return merge.rank < 0 ? nullptr : &merge;
    }
    return find_sparse(left, right);
  }

 private:
  static constexpr int32_t kDense = 256;
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // no pair: ids are below 2^31
  struct Slot {
    uint64_t pair = kEmpty;  // left << 32 | right
    BpeMerge merge{};
  };
  const BpeMerge* find_sparse(int32_t left, int32_t right) const;
  void place(uint64_t pair, BpeMerge merge);

  std::vector<BpeMerge> dense_ = std::vector<BpeMerge>(kDense * kDense, BpeMerge{-1, -1});
  std::vector<Slot> slots_;
  size_t count_ = 0;
};

class BpeTokenTable {
 public:
  void insert(std::string bytes, int32_t id);
  int32_t find(std::string_view bytes) const;  // -1 when absent

 private:
  // A slot is (the hash's high 32 bits << 32 | 1 + the entry's index), 0 when empty: 8 bytes,
  // so that the slots of a 128K vocabulary fit in 2 MB and a miss (most pre-tokens of text
  // that is not words) costs one probe there.
  static uint64_t slot_value(size_t hash, size_t entry) { return (hash >> 32 << 32) | (entry + 1); }
  int64_t find_entry(std::string_view bytes, size_t hash) const;
  void place(size_t hash, size_t entry);

  std::vector<uint64_t> slots_;
  std::vector<std::string> bytes_;  // per entry
  std::vector<int32_t> ids_;
};

}  // namespace maxctx::tokenizer
