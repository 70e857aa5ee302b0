#include "kernels/kernels.hpp"

namespace mhc::kernels {
namespace portable {
void forward_tokens(const ForwardArgs&, int64_t, int64_t, int);
void backward_token_stats(const BackwardArgs&, int64_t, int64_t, int);
void backward_columns(const BackwardArgs&, int64_t, int64_t);
void backward_small_sums(const BackwardArgs&);
}  // namespace portable

const Family* portable_family() {
  static const Family family = {"portable", portable::forward_tokens, portable::backward_token_stats,
                                portable::backward_columns, portable::backward_small_sums};
  return &family;
}

}  // namespace mhc::kernels
