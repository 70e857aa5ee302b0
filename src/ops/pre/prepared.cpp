// Weights prepared once (prepared.hpp).
#include "ops/pre/prepared.hpp"

#include <atomic>
#include <string>

#include "ops/pre/operands.hpp"
#include "ops/tensor_checks.hpp"

namespace mhc {

namespace {
std::atomic<uint64_t> next_id{1};
}  // namespace

void PreparedPre::Form::allocate(size_t size) {
  storage.reset(new std::byte[size + 64]);
  const uintptr_t at = (reinterpret_cast<uintptr_t>(storage.get()) + 63) / 64 * 64;
  data = reinterpret_cast<void*>(at);
  bytes = size;
}

PreparedPre::PreparedPre(const TensorView& phi, const TensorView& alpha, const TensorView& bias,
                         const std::optional<TensorView>& gamma)
    : id_(next_id.fetch_add(1)), phi_(phi), alpha_(alpha), bias_(bias), gamma_(gamma) {}

std::shared_ptr<const PreparedPre::Form> PreparedPre::form(const FormKey& key,
                                                           const std::function<void(Form*)>& make) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [held, form] : forms_)
    if (held == key) return form;
  auto made = std::make_shared<Form>();
  make(made.get());
  forms_.emplace_back(key, made);
  return made;
}

size_t PreparedPre::forms() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return forms_.size();
}

}  // namespace mhc

namespace mhc::ops::pre {

Status check_weights(const TensorView& phi, const TensorView& alpha, const TensorView& bias,
                     const std::optional<TensorView>& gamma) {
  MHC_RETURN_IF_ERROR(check_view("phi", phi));
  MHC_RETURN_IF_ERROR(check_dtype("phi", phi, DType::fp32));
  if (phi.rank != 2) return shape_error("phi", "[F,K]", phi);
  const int64_t F = phi.shape[0];
  MHC_RETURN_IF_ERROR(check_view("alpha", alpha));
  MHC_RETURN_IF_ERROR(check_dtype("alpha", alpha, DType::fp32));
  if (alpha.rank != 1 || alpha.shape[0] < 1 || alpha.shape[0] > 3) return shape_error("alpha", "[3], [2] or [1]", alpha);
  MHC_RETURN_IF_ERROR(check_fp32("bias", bias, {{{F}, {"F"}}}));
  if (gamma) {
    MHC_RETURN_IF_ERROR(check_view("gamma", *gamma));
    MHC_RETURN_IF_ERROR(check_dtype("gamma", *gamma, DType::fp32));
    if (gamma->rank != 2) return shape_error("gamma", "[N,D]", *gamma);
  }
  return {};
}

Status check_prepared_views(const PreparedPre& prepared, const TensorView& phi, const TensorView& alpha,
                            const TensorView& bias, const std::optional<TensorView>& gamma) {
  const char* differs = !same_view(phi, prepared.phi())       ? "phi"
                        : !same_view(alpha, prepared.alpha()) ? "alpha"
                        : !same_view(bias, prepared.bias())   ? "bias"
                                                              : nullptr;
  if (differs != nullptr)
    return value_error(differs, "expected the view options.prepared was made from (its data, shape and strides), "
                                "got another");
  if (bool(gamma) != bool(prepared.gamma()))
    return value_error("gamma", std::string("expected ") + (prepared.gamma() ? "the gamma" : "no gamma") +
                                    " as options.prepared was made, got " + (gamma ? "one" : "none"));
  if (gamma && !same_view(*gamma, *prepared.gamma()))
    return value_error("gamma", "expected the view options.prepared was made from (its data, shape and strides), "
                                "got another");
  return {};
}

}  // namespace mhc::ops::pre
