#include <algorithm>

#include "kernels/kernels.hpp"

namespace mhc::kernels {
namespace portable {
void forward_tokens(const ForwardArgs&, int64_t, int64_t, int);
void backward_token_stats(const BackwardArgs&, int64_t, int64_t, int64_t, int);
void backward_columns(const BackwardArgs&, int64_t, int64_t, const plan::ColumnItem&, int);

int64_t forward_scratch_floats(const core::Dims& d) {  // v, u = v*gamma, m, h_pre
  return 2 * plan::align16(d.K) + plan::align16(d.F) + plan::align16(d.N);
}
int64_t backward_scratch_floats(const core::Dims& d) {
  const int64_t token_stats = plan::align16(d.K) + plan::align16(d.D) + plan::align16(d.N);  // v, grad_h_in, g_pre
  const int64_t columns = (d.F + 1) * plan::kColumnsPerItem;             // chunk sums
  return std::max(token_stats, columns);
}
}  // namespace portable

const Family* portable_family() {
  static const Family family = {"portable",
                                portable::forward_scratch_floats,
                                portable::backward_scratch_floats,
                                portable::forward_tokens,
                                [](const core::BackwardProblem&) -> int64_t { return 0; },
                                portable::backward_token_stats,
                                portable::backward_columns,
                                nullptr,
                                backward_finish_columns};
  return &family;
}

}  // namespace mhc::kernels
