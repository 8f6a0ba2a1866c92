// Byte-level BPE encoding: the added-token cut, the split, the merges, each as a fast
// algorithm and the plain one it is tested against (encode_reference), and decode. See bpe.h.
//
// Both merge algorithms apply the same rule, the lowest-ranked adjacent pair first, leftmost
// among equal ranks, so their ids are identical; the plain one rescans every pair after each
// merge (quadratic in a pre-token's length), the fast one keeps the pairs in a priority queue
// (O(n log n)). A pre-token can be the whole text (a run of one letter, of spaces), which is why
// only the fast one may see user text (issue #34 N6).
#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <unordered_map>
#include <vector>

#include "maxctx/core/check.h"
#include "maxctx/tokenizer/bpe.h"
#include "maxctx/tokenizer/normalize.h"

namespace maxctx::tokenizer {

namespace {

// The candidate pairs of the fast merge: a priority queue of (rank, position of the left symbol)
// that pops the lowest rank, leftmost first. One bucket of positions per rank, and a min-heap of
// the ranks that have one. A binary heap of every pair was the simple choice, but a run of one
// letter puts a million pairs of one rank in it and each pop then walks 20 levels of cache
// misses; here pairs wait in their rank's bucket in the order they came, which for each rank
// is ascending within the merges of one lower rank, and a bucket is sorted once, when its rank
// becomes the lowest. Pairs of a rank pushed after that (only where a merge makes a pair of a
// lower rank than its own, which trained merges never do) go to the bucket's own heap.
class RankBucketQueue {
 public:
  void clear() {
    for (size_t i = 0; i < used_; ++i) buckets_[i].clear();
    used_ = 0;
    bucket_of_rank_.clear();
    recent_.fill(Recent{});
    ranks_.clear();
  }

  void push(int32_t rank, uint32_t position) {
    const uint32_t index = bucket_of(rank);
    Bucket& b = buckets_[index];
    if (b.empty()) {
      ranks_.push_back((static_cast<uint64_t>(rank) << 32) | index);
      std::push_heap(ranks_.begin(), ranks_.end(), std::greater<>());
    }
    if (b.started) {
      b.late.push_back(position);
      std::push_heap(b.late.begin(), b.late.end(), std::greater<>());
    } else {
      b.positions.push_back(position);
    }
  }

  // The lowest (rank, position), leftmost among equal ranks; false when the queue is empty.
  bool pop(int32_t& rank, uint32_t& position) {
    while (!ranks_.empty()) {
      rank = static_cast<int32_t>(ranks_.front() >> 32);
      Bucket& b = buckets_[static_cast<uint32_t>(ranks_.front())];
      if (!b.started) {
        if (!std::is_sorted(b.positions.begin(), b.positions.end())) {
          std::sort(b.positions.begin(), b.positions.end());
        }
        b.started = true;
      }
      if (!b.empty()) {
        if (b.late.empty() || (b.next < b.positions.size() && b.positions[b.next] < b.late[0])) {
          position = b.positions[b.next++];
        } else {
          std::pop_heap(b.late.begin(), b.late.end(), std::greater<>());
          position = b.late.back();
          b.late.pop_back();
        }
        return true;
      }
      std::pop_heap(ranks_.begin(), ranks_.end(), std::greater<>());
      ranks_.pop_back();
    }
    return false;
  }

 private:
  struct Bucket {
    std::vector<uint32_t> positions;  // sorted from `next` on once started
    size_t next = 0;
    bool started = false;        // its rank has been the lowest: new positions go to `late`
    std::vector<uint32_t> late;  // min-heap
    bool empty() const { return next == positions.size() && late.empty(); }
    void clear() {
      positions.clear();
      next = 0;
      started = false;
      late.clear();
    }
  };
  // The bucket of a rank, made on first use. A merge pushes the same few ranks over and over
  // (the pairs either side of each merge of one rank), so a small cache goes before the map.
  uint32_t bucket_of(int32_t rank) {
    Recent& recent = recent_[static_cast<uint32_t>(rank) % recent_.size()];
    if (recent.rank == rank) return recent.bucket;
    const auto [it, added] = bucket_of_rank_.try_emplace(rank, static_cast<uint32_t>(used_));
    if (added && used_++ == buckets_.size()) buckets_.emplace_back();
    recent = {rank, it->second};
    return it->second;
  }

  struct Recent {
    int32_t rank = -1;
    uint32_t bucket = 0;
  };
  std::vector<Bucket> buckets_;  // the first used_ are in use; kept for their capacity
  size_t used_ = 0;
  std::unordered_map<int32_t, uint32_t> bucket_of_rank_;
  std::array<Recent, 16> recent_{};
  // (rank << 32 | bucket), a min-heap; a rank may repeat, an exhausted one is dropped
  std::vector<uint64_t> ranks_;
};

// The same queue as one binary heap of (rank << 32 | position): the faster for the short
// pre-tokens of ordinary text, whose few pairs fit in a cache line or two.
class HeapQueue {
 public:
  void clear() { heap_.clear(); }
  void push(int32_t rank, uint32_t position) {
    heap_.push_back((static_cast<uint64_t>(rank) << 32) | position);
    std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
  }
  bool pop(int32_t& rank, uint32_t& position) {
    if (heap_.empty()) return false;
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
    rank = static_cast<int32_t>(heap_.back() >> 32);
    position = static_cast<uint32_t>(heap_.back());
    heap_.pop_back();
    return true;
  }

 private:
  std::vector<uint64_t> heap_;
};

// The same rule in O(n log n): the pairs that have a merge wait in a queue that pops the lowest
// rank and, among equal ranks, the leftmost pair (by the position of its left symbol), exactly
// as the rescan chooses. A merge keeps the left symbol's position and unlinks the right one. The
// pairs it broke stay in the queue: an entry is taken only if the pair now at its position still
// has its rank (then it is a pair the rescan would take, whichever pair pushed the entry), and
// the two pairs the merge made are pushed. `find(left id, right id)` gives a pair's merge.
template <typename Queue, typename FindMerge>
void merge_in_queue(std::vector<int32_t>& symbols, Queue& queue, std::vector<uint32_t>& prev,
                    std::vector<uint32_t>& next, const FindMerge& find) {
  constexpr int32_t kGone = -1;  // a symbol merged into its left neighbour
  const auto end = static_cast<uint32_t>(symbols.size());
  queue.clear();
  prev.resize(end);
  next.resize(end);
  for (uint32_t i = 0; i < end; ++i) {
    prev[i] = i == 0 ? end : i - 1;
    next[i] = i + 1;
  }
  const auto push = [&](uint32_t left, uint32_t right) {
    if (const auto* merge = find(symbols[left], symbols[right])) queue.push(merge->rank, left);
  };
  for (uint32_t i = 0; i + 1 < end; ++i) push(i, i + 1);
  int32_t rank = 0;
  uint32_t left = 0;
  while (queue.pop(rank, left)) {
    const uint32_t right = next[left];
    if (symbols[left] == kGone || right == end) continue;
    const auto* merge = find(symbols[left], symbols[right]);
    if (merge == nullptr || merge->rank != rank) continue;  // stale
    symbols[left] = merge->merged_id;
    symbols[right] = kGone;
    next[left] = next[right];
    if (next[left] != end) prev[next[left]] = left;
    if (prev[left] != end) push(prev[left], left);
    if (next[left] != end) push(left, next[left]);
  }
  std::erase(symbols, kGone);
}

}  // namespace

struct ByteLevelBpe::MergeScratch {
  static constexpr size_t kLong = 64;  // symbols from which RankBucketQueue is the faster
  HeapQueue short_queue;
  RankBucketQueue long_queue;
  std::vector<int32_t> symbols;  // of the pre-token being merged
  std::vector<uint32_t> prev;    // the doubly linked list of live symbols, by position
  std::vector<uint32_t> next;
};

std::vector<int32_t> ByteLevelBpe::encode_pretoken(std::string_view bytes) const {
  std::vector<int32_t> ids;
  MergeScratch scratch;
  encode_pretoken_into(bytes, Algorithm::kFast, scratch, ids);
  return ids;
}

std::vector<int32_t> ByteLevelBpe::encode_pretoken_reference(std::string_view bytes) const {
  std::vector<int32_t> ids;
  MergeScratch scratch;
  encode_pretoken_into(bytes, Algorithm::kReference, scratch, ids);
  return ids;
}

// One symbol per byte, before any merge.
void ByteLevelBpe::initial_symbols(std::string_view bytes, std::vector<int32_t>& symbols) const {
  symbols.clear();
  bool after_unk = false;
  for (const char byte : bytes) {
    const int32_t id = byte_id_[static_cast<uint8_t>(byte)];
    if (id >= 0) {
      symbols.push_back(id);
    } else if (unk_id_ >= 0 && !(fuse_unk_ && after_unk)) {
      symbols.push_back(unk_id_);
    }
    after_unk = id < 0;
  }
}

// The rule: merge the lowest-ranked adjacent pair, leftmost first, until no pair has a rank.
// Rescans every pair after each merge: quadratic in the pre-token's length.
void ByteLevelBpe::merge_reference(std::vector<int32_t>& symbols) const {
  while (symbols.size() > 1) {
    int32_t best_rank = std::numeric_limits<int32_t>::max();
    size_t best = 0;
    int32_t best_id = -1;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const BpeMerge* merge = merges_.find(symbols[i], symbols[i + 1]);
      if (merge != nullptr && merge->rank < best_rank) {
        best_rank = merge->rank;
        best = i;
        best_id = merge->merged_id;
      }
    }
    if (best_id < 0) break;
    symbols[best] = best_id;
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
}

void ByteLevelBpe::merge_fast(std::vector<int32_t>& symbols, MergeScratch& scratch) const {
  const size_t n = symbols.size();
  if (n < 2) return;
  if (n >= std::numeric_limits<uint32_t>::max()) {
    fail(
        "a pre-token of {} bytes (one run of letters, digits or spaces) is over the 4 GiB that "
        "byte-level BPE encodes; split the text",
        n);
  }
  const auto find = [this](int32_t left, int32_t right) { return merges_.find(left, right); };
  if (n < MergeScratch::kLong) {
    merge_in_queue(symbols, scratch.short_queue, scratch.prev, scratch.next, find);
  } else {
    merge_in_queue(symbols, scratch.long_queue, scratch.prev, scratch.next, find);
  }
}

void ByteLevelBpe::encode_pretoken_into(std::string_view bytes, Algorithm algorithm,
                                        MergeScratch& scratch, std::vector<int32_t>& out) const {
  if (bytes.empty()) return;
  if (ignore_merges_) {
    if (const int32_t whole = token_id(bytes); whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  std::vector<int32_t>& symbols = scratch.symbols;
  initial_symbols(bytes, symbols);
  if (algorithm == Algorithm::kFast) {
    merge_fast(symbols, scratch);
  } else {
    merge_reference(symbols);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
}

void ByteLevelBpe::encode_span(std::string_view text, Algorithm algorithm, MergeScratch& scratch,
                               std::vector<int32_t>& out) const {
  std::string normalized;
  if (nfc_) {
    normalized = nfc(text);
    text = normalized;
  }
  const auto split = [&](std::string_view part) {
    for (std::string_view piece : split_pretokens(part, pattern_)) {
      encode_pretoken_into(piece, algorithm, scratch, out);
    }
  };
  if (digits_ == DigitSplit::kNone) {
    split(text);
    return;
  }
  for (std::string_view part : split_digits(text, digits_)) split(part);
}

// The longest added token at text[at..], by narrowing the sorted contents one byte at a time:
// after `depth` bytes, [lo, hi) holds the contents that begin with text[at, at + depth), the
// one equal to it (if any) first. Costs the match's depth times a binary search.
const AddedToken* ByteLevelBpe::added_token_at(std::string_view text, size_t at) const {
  const auto first = static_cast<uint8_t>(text[at]);
  auto lo = added_sorted_.begin() + added_by_first_byte_[first];
  auto hi = added_sorted_.begin() + added_by_first_byte_[first + 1];
  const AddedToken* found = nullptr;
  for (size_t depth = 1; lo != hi; ++depth) {
    if (added_[*lo].content.size() == depth) found = &added_[*lo++];
    if (at + depth >= text.size()) break;
    // Every content left in [lo, hi) is longer than depth.
    const auto byte = static_cast<uint8_t>(text[at + depth]);
    const auto byte_of = [&](int32_t i) { return static_cast<uint8_t>(added_[i].content[depth]); };
    lo = std::partition_point(lo, hi, [&](int32_t i) { return byte_of(i) < byte; });
    hi = std::partition_point(lo, hi, [&](int32_t i) { return byte_of(i) == byte; });
  }
  return found;
}

// Every added token tried at `at`, longest first: O(number of added tokens).
const AddedToken* ByteLevelBpe::added_token_at_reference(std::string_view text, size_t at) const {
  for (const AddedToken& t : added_) {
    if (text.compare(at, t.content.size(), t.content) == 0) return &t;
  }
  return nullptr;
}

std::vector<int32_t> ByteLevelBpe::encode(std::string_view text, bool add_bos) const {
  return encode_with(text, add_bos, Algorithm::kFast);
}

std::vector<int32_t> ByteLevelBpe::encode_reference(std::string_view text, bool add_bos) const {
  return encode_with(text, add_bos, Algorithm::kReference);
}

std::vector<int32_t> ByteLevelBpe::encode_with(std::string_view text, bool add_bos,
                                               Algorithm algorithm) const {
  std::vector<int32_t> ids;
  if (add_bos) {
    if (bos_id_ < 0) fail("this byte-level BPE tokenizer has no BOS token; set add_bos=false");
    ids.push_back(bos_id_);
  }
  MergeScratch scratch;
  // Cut out added tokens (leftmost; the longest where several start at the same byte).
  size_t span_begin = 0;
  for (size_t at = 0; at < text.size();) {
    const AddedToken* found = algorithm == Algorithm::kFast ? added_token_at(text, at)
                                                            : added_token_at_reference(text, at);
    if (!found) {
      ++at;
      continue;
    }
    encode_span(text.substr(span_begin, at - span_begin), algorithm, scratch, ids);
    ids.push_back(found->id);
    at += found->content.size();
    span_begin = at;
  }
  encode_span(text.substr(span_begin), algorithm, scratch, ids);
  return ids;
}

std::string ByteLevelBpe::decode(std::span<const int32_t> ids) const {
  std::string text;
  for (const int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) {
      fail("token id {} is outside the vocabulary [0, {})", id, vocab_size());
    }
    if (!is_special_[id]) text += id_to_bytes_[id];
  }
  return text;
}

}  // namespace maxctx::tokenizer
