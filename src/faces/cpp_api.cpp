// The C++ face: validate, get a workspace, run, for every operator the description
// lists (src/description/operators.def). Nothing else.
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "faces/guarded.hpp"
#include "mhc/mhc.hpp"
#include "ops/isa.hpp"
#include "ops/pre/backward.hpp"
#include "ops/post/post.hpp"
#include "ops/pre/forward.hpp"
#include "ops/pre/prepared.hpp"
#include "ops/collapse/collapse.hpp"
#include "ops/post_pre/post_pre.hpp"
#include "ops/site_backward/site_backward.hpp"
#include "ops/pre_single_pass/pre_single_pass.hpp"
#include "ops/pre_sinkhorn/pre_sinkhorn.hpp"
#include "ops/rms_norm/rms_norm.hpp"
#include "ops/sinkhorn/sinkhorn.hpp"
#include "runtime/thread_pool.hpp"

namespace mhc {

TensorView::TensorView(const void* ptr, DType type, std::initializer_list<int64_t> dims,
                       std::initializer_list<int64_t> element_strides)
    : data(const_cast<void*>(ptr)), dtype(type), rank(int32_t(dims.size())) {
  // Views of more than kMaxRank dims keep their rank so validation reports it.
  int i = 0;
  for (int64_t d : dims) if (i < kMaxRank) shape[i++] = d;
  i = 0;
  for (int64_t s : element_strides) if (i < kMaxRank) strides[i++] = s;
}

TensorView::TensorView(const void* ptr, DType type, std::initializer_list<int64_t> dims)
    : TensorView(ptr, type, dims, {}) {
  // Saturated where the product overflows: validation then rejects the view
  // (its element count or extent overflows) instead of the constructor
  // overflowing a signed integer.
  int64_t stride = 1;
  for (int i = std::min<int>(rank, kMaxRank) - 1; i >= 0; --i) {
    strides[i] = stride;
    if (__builtin_mul_overflow(stride, shape[i], &stride)) stride = INT64_MAX;
  }
}

// INT64_MAX when the product overflows (negative dims are multiplied as given).
int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank && i < kMaxRank; ++i)
    if (__builtin_mul_overflow(n, shape[i], &n)) return INT64_MAX;
  return n;
}

namespace {

// No exception leaves the face: out of memory (the float64 reference allocates
// its own) is a runtime error, outputs untouched.
template <class Body>
Status no_throw(Body&& body) {
  return faces::guarded(body, [](bool out_of_memory, const char* what) -> Status {
    if (out_of_memory) return {StatusCode::runtime_error, ErrorKind::runtime, "out of memory"};
    return {StatusCode::internal_error, ErrorKind::runtime,
            std::string("internal error: ") + (what != nullptr ? what : "unknown exception")};
  });
}

}  // namespace

namespace {

// Every described operator: validate into its problem, run it in the thread's
// workspace (ops::operators::<name>, in the operator's folder).
// The operators that run MhcPre's forward take prepared weights (options.prepared).
template <class Operator>
constexpr bool kTakesPrepared = std::is_same_v<Operator, ops::operators::pre_forward> ||
                                std::is_same_v<Operator, ops::operators::pre_sinkhorn_forward> ||
                                std::is_same_v<Operator, ops::operators::pre_single_pass_forward> ||
                                std::is_same_v<Operator, ops::operators::post_pre_forward>;

template <class Operator, class Inputs, class Outputs>
Status run_operator(const Inputs& in, const Outputs& out, const Options& options) {
  return no_throw([&] {
    if (!kTakesPrepared<Operator> && options.prepared != nullptr)
      return Status{StatusCode::invalid_argument, ErrorKind::value,
                    "options.prepared: expected none (prepared weights serve pre_forward, pre_sinkhorn_forward, "
                    "pre_single_pass_forward and post_pre_forward), got a handle"};
    typename Operator::Problem problem;
    if (Status s = Operator::validate(in, out, options, &problem); !s.ok()) return s;
    return Operator::run(problem, options.num_threads);
  });
}

}  // namespace

#define MHC_OPERATOR(name, Cpp, spec, cann, torch_npu, ARGS)                                \
  Status name(const Cpp##Inputs& in, const Cpp##Outputs& out, const Options& options) { \
    return run_operator<ops::operators::name>(in, out, options);                        \
  }
#include "description/operators.def"
#undef MHC_OPERATOR

Status prepare_pre(const TensorView& phi, const TensorView& alpha, const TensorView& bias,
                   const std::optional<TensorView>& gamma, std::shared_ptr<const PreparedPre>* prepared) {
  return no_throw([&] {
    if (prepared == nullptr) return Status{StatusCode::null_pointer, ErrorKind::null, "prepared: required, got none"};
    if (Status s = ops::pre::check_weights(phi, alpha, bias, gamma); !s.ok()) return s;
    *prepared = std::make_shared<const PreparedPre>(phi, alpha, bias, gamma);
    return Status{};
  });
}

const Executor* set_thread_executor(const Executor* executor) { return runtime::set_thread_executor(executor); }

const char* isa() { return ops::default_isa_name(); }
Status set_isa(Isa isa) {
  return no_throw([&] { return ops::set_default_isa(isa); });
}
Status set_isa(const char* name) {
  return no_throw([&] { return ops::set_default_isa(name); });
}
bool isa_available(Isa isa) { return ops::runs_here(isa); }
const char* isa_name(Isa isa) { return ops::name_of(isa); }
std::vector<Isa> available_isas() { return ops::available(); }
bool isa_from_name(const char* name, Isa* isa) {
  return faces::guarded([&] { return ops::from_name(name, isa); }, [](bool, const char*) { return false; });
}

}  // namespace mhc
