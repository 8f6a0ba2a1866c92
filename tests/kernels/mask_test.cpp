// kernels/mask.h, the mask arithmetic shared by the cpu and CUDA flash kernels, against the
// reference's attention_visible on random position/segment layouts: mask_visible agrees pair by
// pair, and classify_tile never calls a tile skipped that has a visible pair nor fully visible
// one that has a hidden pair, on blocks cut from causal, dual-chunk-swapped, packed and random
// layouts (with and without a sliding window).
#include "maxctx/kernels/mask.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "maxctx/kernels/types.h"
#include "maxctx/parallel/load_balance.h"

namespace maxctx::kernels {
namespace {

struct Layout {
  std::vector<int32_t> pos, seg;
};

// kind 0: causal 0..S-1; 1: the dual chunk swap's order (cp = 4); 2: packed segments with
// positions restarting in each; 3: random positions and segments in a small range (many ties).
Layout make_layout(int kind, int64_t s, std::mt19937& rng) {
  Layout l{std::vector<int32_t>(static_cast<size_t>(s)),
           std::vector<int32_t>(static_cast<size_t>(s))};
  if (kind == 1) {
    const std::vector<int64_t> perm = context_permutation(s, 4, true);
    for (int64_t i = 0; i < s; ++i) l.pos[i] = static_cast<int32_t>(perm[i]);
  } else if (kind == 2) {
    int32_t seg = 0, pos = 0;
    for (int64_t i = 0; i < s; ++i) {
      if (i > 0 && rng() % 13 == 0) {
        ++seg;
        pos = 0;
      }
      l.seg[i] = seg;
      l.pos[i] = pos++;
    }
  } else {
    for (int64_t i = 0; i < s; ++i) {
      l.pos[i] = kind == 0 ? static_cast<int32_t>(i) : static_cast<int32_t>(rng() % 40);
      if (kind == 3) l.seg[i] = static_cast<int32_t>(rng() % 3);
    }
  }
  return l;
}

BlockBounds bounds(const Layout& l, int64_t begin, int64_t end) {
  BlockBounds r = bounds_of_row(l.pos[begin], l.seg[begin]);
  for (int64_t i = begin + 1; i < end; ++i) r = bounds_add_row(r, l.pos[i], l.seg[i]);
  return r;
}

TEST(MaskTest, VisibleMatchesTheReferenceIncludingExtremePositions) {
  std::mt19937 rng(7);
  const int32_t extremes[] = {INT32_MIN, INT32_MIN + 1, -5, 0, 1, 5, INT32_MAX - 1, INT32_MAX};
  for (int32_t window : {0, 1, 3, 1000, INT32_MAX}) {
    for (int32_t qp : extremes) {
      for (int32_t kp : extremes) {
        for (int32_t ks : {0, 1}) {
          EXPECT_EQ(mask_visible(qp, 0, kp, ks, window), attention_visible(qp, 0, kp, ks, window))
              << qp << " " << kp << " " << ks << " " << window;
        }
      }
    }
    for (int i = 0; i < 20000; ++i) {
      const auto qp = static_cast<int32_t>(rng() % 64) - 8,
                 kp = static_cast<int32_t>(rng() % 64) - 8;
      const auto qs = static_cast<int32_t>(rng() % 3), ks = static_cast<int32_t>(rng() % 3);
      ASSERT_EQ(mask_visible(qp, qs, kp, ks, window), attention_visible(qp, qs, kp, ks, window));
    }
  }
}

TEST(MaskTest, TileClassesAreSoundOnRandomLayouts) {
  std::mt19937 rng(11);
  int64_t counts[3] = {0, 0, 0};
  for (int kind = 0; kind < 4; ++kind) {
    for (int32_t window : {0, 7, 50}) {
      for (int64_t block : {8, 16, 32}) {
        const int64_t s = 256;
        const Layout q = make_layout(kind, s, rng), k = make_layout(kind, s, rng);
        for (int64_t qb = 0; qb < s; qb += block) {
          for (int64_t kb = 0; kb < s; kb += block) {
            const int64_t q_end = std::min(s, qb + block), k_end = std::min(s, kb + block);
            const TileMask kind_of =
                classify_tile(bounds(q, qb, q_end), bounds(k, kb, k_end), window);
            int64_t seen = 0, pairs = 0;
            for (int64_t i = qb; i < q_end; ++i) {
              for (int64_t j = kb; j < k_end; ++j) {
                seen += attention_visible(q.pos[i], q.seg[i], k.pos[j], k.seg[j], window) ? 1 : 0;
                ++pairs;
              }
            }
            if (kind_of == TileMask::kSkip) {
              ASSERT_EQ(seen, 0) << kind << " " << qb << " " << kb;
            }
            if (kind_of == TileMask::kFull) {
              ASSERT_EQ(seen, pairs) << kind << " " << qb << " " << kb;
            }
            ++counts[static_cast<int>(kind_of)];
          }
        }
      }
    }
  }
  // Every class occurs, so the soundness checks above were exercised.
  EXPECT_GT(counts[0], 0);
  EXPECT_GT(counts[1], 0);
  EXPECT_GT(counts[2], 0);
}

// Causal blocks on the diagonal are masked, below it fully visible, above it skipped: the
// classification is tight where the layout allows it (a sound but useless classifier that
// called everything kPartial would fail here).
TEST(MaskTest, CausalBlocksAreClassifiedExactly) {
  std::mt19937 rng(1);
  const Layout l = make_layout(0, 128, rng);
  for (int64_t qb = 0; qb < 4; ++qb) {
    for (int64_t kb = 0; kb < 4; ++kb) {
      const TileMask got =
          classify_tile(bounds(l, qb * 32, qb * 32 + 32), bounds(l, kb * 32, kb * 32 + 32), 0);
      const TileMask want = kb > qb    ? TileMask::kSkip
                            : kb == qb ? TileMask::kPartial
                                       : TileMask::kFull;
      EXPECT_EQ(got, want) << qb << " " << kb;
    }
  }
}

}  // namespace
}  // namespace maxctx::kernels
