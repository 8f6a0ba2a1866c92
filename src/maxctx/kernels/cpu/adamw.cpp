#include "maxctx/kernels/cpu/adamw.h"

#include <algorithm>

#include "hwy/highway.h"

namespace maxctx::kernels::cpu {

void adamw_update(float* params, const float* grads, float* mu, float* nu, int64_t count,
                  const AdamWStep& step) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const auto b1 = hn::Set(d, step.b1), b2 = hn::Set(d, step.b2);
  const auto one_minus_b1 = hn::Set(d, step.one_minus_b1);
  const auto one_minus_b2 = hn::Set(d, step.one_minus_b2);
  const auto correction1 = hn::Set(d, step.correction1);
  const auto correction2 = hn::Set(d, step.correction2);
  const auto eps = hn::Set(d, step.eps), eps_root = hn::Set(d, step.eps_root);
  const auto decay = hn::Set(d, step.weight_decay), lr = hn::Set(d, step.learning_rate);
  const auto update_lanes = [&](float* p, const float* g, float* m, float* v) {
    const auto g_i = hn::LoadU(d, g);
    const auto p_i = hn::LoadU(d, p);
    const auto m_i = hn::Add(hn::Mul(one_minus_b1, g_i), hn::Mul(b1, hn::LoadU(d, m)));
    const auto v_i =
        hn::Add(hn::Mul(one_minus_b2, hn::Mul(g_i, g_i)), hn::Mul(b2, hn::LoadU(d, v)));
    hn::StoreU(m_i, d, m);
    hn::StoreU(v_i, d, v);
    const auto m_hat = hn::Div(m_i, correction1);
    const auto v_hat = hn::Div(v_i, correction2);
    const auto adam = hn::Div(m_hat, hn::Add(hn::Sqrt(hn::Add(v_hat, eps_root)), eps));
    hn::StoreU(hn::Sub(p_i, hn::Mul(lr, hn::Add(adam, hn::Mul(decay, p_i)))), d, p);
  };
  const auto n = static_cast<size_t>(count);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) update_lanes(params + i, grads + i, mu + i, nu + i);
  if (i < n) {
    const size_t rest = n - i;
    alignas(64) float tail[4][HWY_MAX_BYTES / sizeof(float)] = {};
    std::copy_n(params + i, rest, tail[0]);
    std::copy_n(grads + i, rest, tail[1]);
    std::copy_n(mu + i, rest, tail[2]);
    std::copy_n(nu + i, rest, tail[3]);
    update_lanes(tail[0], tail[1], tail[2], tail[3]);
    std::copy_n(tail[0], rest, params + i);
    std::copy_n(tail[2], rest, mu + i);
    std::copy_n(tail[3], rest, nu + i);
  }
}

}  // namespace maxctx::kernels::cpu
