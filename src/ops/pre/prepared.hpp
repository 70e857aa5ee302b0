// Weights prepared once (mhc.hpp's prepare_pre): the handle's views, an id no
// other handle of the process has, and the forms calls made of the weights, kept
// for the calls after. The forward driver (forward_driver.cpp) asks for them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "kernels/operands.hpp"
#include "mhc/mhc.hpp"

namespace mhc {

class PreparedPre {
 public:
  // What a form is of: phi as a contiguous copy (rounded to HF32 when hf32), a
  // kernel family's preparation for a shape (its T aside: only forms that do not
  // depend on it are kept), or phi laid out as a family's products read it.
  struct FormKey {
    enum class Kind { phi, family, phi_panels } kind = Kind::phi;
    Isa isa = Isa::automatic;
    const void* table = nullptr;  // the kernel table whose preparation it is
    kernels::PreShape shape;
    bool operator==(const FormKey&) const = default;
  };
  // 64-byte aligned bytes and whether the weights they came from were finite (the
  // flag the preparation's parts report).
  struct Form {
    std::unique_ptr<std::byte[]> storage;
    void* data = nullptr;
    size_t bytes = 0;
    uint8_t finite = 1;
    void allocate(size_t size);
  };

  PreparedPre(const TensorView& phi, const TensorView& alpha, const TensorView& bias,
              const std::optional<TensorView>& gamma);
  uint64_t id() const { return id_; }
  const TensorView& phi() const { return phi_; }
  const TensorView& alpha() const { return alpha_; }
  const TensorView& bias() const { return bias_; }
  const std::optional<TensorView>& gamma() const { return gamma_; }

  // The form `key` names, made by make() at its first request. Under a lock: the
  // calls that ask while it is made wait for it; later ones only look it up.
  std::shared_ptr<const Form> form(const FormKey& key, const std::function<void(Form*)>& make) const;
  size_t forms() const;  // how many are kept (tests)

 private:
  uint64_t id_;
  TensorView phi_, alpha_, bias_;
  std::optional<TensorView> gamma_;
  mutable std::mutex mutex_;
  mutable std::vector<std::pair<FormKey, std::shared_ptr<const Form>>> forms_;
};

}  // namespace mhc

namespace mhc::ops::pre {

// The weights alone, as prepare_pre takes them: fp32 views of ranks phi 2, alpha 1
// (1 to 3 entries), bias 1 (phi's rows), gamma 2; their sizes against x are the
// calls' to check.
Status check_weights(const TensorView& phi, const TensorView& alpha, const TensorView& bias,
                     const std::optional<TensorView>& gamma);
// A call given options.prepared passes the handle's own views.
Status check_prepared_views(const PreparedPre& prepared, const TensorView& phi, const TensorView& alpha,
                            const TensorView& bias, const std::optional<TensorView>& gamma);

}  // namespace mhc::ops::pre
