// The fuzz targets' shared machinery (docs/reliability.md, "Fuzzing").
//
// One input of bytes describes one operator call: the problem (B, S, N, D, the
// F form, dtypes, which optional tensors), then, tensor by tensor, a layout and
// a few mutations (rank, dims including 0, 1, huge and negative, strides
// including 0, negative, overlapping and huge, dtype, null data, misalignment,
// aliasing another tensor), and the values. Every data pointer lies inside one
// arena, a heap block of exactly the bytes the tensors were given, so ASan
// catches any access outside it. The checks after a call:
//   - rejected: the code, kind and message are validation's; not one arena byte changed;
//   - accepted: only bytes of output elements changed; every output element agrees
//     with the float64 reference (mhc::kernels::reference, run on a copy of the arena) within
//     a bound scaled by the sum of |terms| behind it, NaN where it has NaN and the
//     same infinity where it has one; and a second run with another thread count on
//     a copy of the arena at another address gives the same bits.
// A view that reaches outside the arena cannot be rejected by the C++ face (a
// pointer carries no size): such a call is only validated and sized, never run.
// The aclnn face does know the size (storage dims): there the storage declared is
// always inside the arena, and a view the library accepts must be too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mhc/mhc.hpp"

namespace mhc_fuzz {

// Reads the input front to back; an exhausted input reads as zeros, and zero is
// always the plain, valid choice, so short inputs make valid calls.
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t u8() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint16_t u16() { return uint16_t(u8() | (u8() << 8)); }
  uint64_t u64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t(u8()) << (8 * i);
    return v;
  }
  // An index in [0, n).
  size_t pick(size_t n) { return n <= 1 ? 0 : u8() % n; }
  bool flag() { return u8() & 1; }
  // True with probability about rate/256 (false on an exhausted input).
  bool chance(int rate) { return u8() >= 256 - rate; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

[[noreturn]] void fail(const std::string& what);
struct Case;
void describe(const Case& c);  // names the case in failure messages
void describe_more(const std::string& text);  // adds a line (scalars, a plan) to that name
#define MHC_FUZZ_CHECK(cond, what) \
  do {                             \
    if (!(cond)) ::mhc_fuzz::fail(std::string(what) + " [" #cond "]"); \
  } while (0)

enum class Op { forward, backward };
enum class Face { cpp, c, aclnn };

// Which F: N*N residual logits, N! of them, or none (two-entry alpha).
enum class FForm { square, permutation, two_entry, head };  // head: one-entry alpha, F = N

struct Problem {
  Op op = Op::forward;
  bool bsnd = false;
  int64_t B = 1, S = 3, N = 4, D = 8;
  FForm form = FForm::square;
  mhc::DType x_dtype = mhc::DType::bf16;
  bool gamma = true, caches = true, grad_x_post = true, flat_residual = false;
  double norm_eps = 1e-6, hc_eps = 1e-6;
  int threads = 0;
  int64_t T() const { return B * S; }
  int64_t K() const { return N * D; }
  int64_t R() const;
  int64_t F() const { return form == FForm::head ? N : 2 * N + R(); }
  int64_t alpha_entries() const { return form == FForm::head ? 1 : form == FForm::two_entry ? 2 : 3; }
};

inline constexpr int kSlots = 20;
inline constexpr int kRankCap = 9;  // one more than MHC_MAX_RANK, to try rank 9

// One tensor argument as generated: a view into the arena (or NULL).
struct Tensor {
  const char* name = "";      // the C++ API's name
  const char* acl_name = "";  // CANN's parameter name
  bool output = false;
  bool present = true;  // false: absent optional (or NULL required) argument
  int32_t dtype = 0;    // mhc_dtype code, possibly invalid
  int32_t rank = 0;
  int64_t shape[kRankCap] = {};
  int64_t strides[kRankCap] = {};
  bool null_data = false;
  int64_t byte_offset = 0;  // of element 0, from the arena's start
  // aclnn only: the aclTensor's storage (its data pointer is the element at
  // byte_offset - acl_offset * element size) and format.
  int64_t acl_offset = 0;  // elements
  std::vector<int64_t> storage;
  bool storage_given = true;
  bool strides_given = true;
  int32_t acl_dtype = 0;
  int32_t format = 2;  // ACL_FORMAT_ND
};

struct Case {
  Problem problem;
  std::vector<Tensor> tensors;  // in the operator's argument order
  size_t arena_bytes = 0;
  uint64_t value_seed = 0;
  int special_rate = 0;  // NaN / Inf density of the values
  Tensor* find(const char* name);
  const Tensor* find(const char* name) const;
};

// Whether an accepted call never looks at t (SPEC §6): h_res and grad_h_res beside an
// alpha of fewer than 3 entries, left as they are (views outside their storage too).
bool ignored_by_call(const Case& c, const Tensor& t);

// The problem and its tensors from the input. `aclnn` adds storage, offset and
// format choices (and maps dtypes to aclDataType codes).
Case generate(Bytes& in, Op op, bool aclnn);

// The arena: exactly arena_bytes of heap (ASan's redzones on both sides), filled
// with small dyadic numbers, zeros and (at special_rate) NaN, +-Inf, -0.
struct Arena {
  explicit Arena(const Case& c);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  uint8_t* base = nullptr;
  size_t bytes = 0;
  std::vector<uint8_t> pristine;  // the bytes before any call
  bool unchanged() const;
};

int64_t element_size_of(int32_t mhc_dtype);  // 0 for an invalid code
// The view's elements all lie in [base, base + bytes) (true for zero elements).
bool view_inside(const uint8_t* base, size_t bytes, const uint8_t* data, int32_t dtype, int32_t rank,
                 const int64_t* shape, const int64_t* strides);

// C++ views of the generated tensors, data pointers into `base`.
mhc::TensorView view_of(const Tensor& t, uint8_t* base);

// The operator's arguments as views (pointers into `base`).
struct ForwardCall {
  mhc::PreForwardInputs in;
  mhc::PreForwardOutputs out;
  mhc::Options options;
};
struct BackwardCall {
  mhc::PreBackwardInputs in;
  mhc::PreBackwardOutputs out;
  mhc::Options options;
};
ForwardCall forward_call(Case& c, uint8_t* base);
BackwardCall backward_call(Case& c, uint8_t* base);

// After an accepted call whose views all lie in the arena: the arena changed
// only in output elements; outputs agree with the float64 reference; a rerun at
// another thread count and address gives the same bits.
// How the face that accepted the call validates it: the aclnn face checks no eps
// value (SPEC §7), and its opImplMode gives the products' precision.
struct Acceptance {
  bool eps_values = true;
  mhc::MatmulPrecision precision = mhc::MatmulPrecision::fp32;
};
void check_accepted_forward(Case& c, const Arena& arena, bool rerun, const Acceptance& how = {});
void check_accepted_backward(Case& c, const Arena& arena, bool rerun, const Acceptance& how = {});

// The C++ / C face targets (fuzz_pre_forward.cpp, fuzz_pre_backward.cpp).
void run_cpp_target(const uint8_t* data, size_t size, Op op);

// For the layer's targets (fuzz_layer.cpp): one tensor argument as nominally
// given (name, input or output, present or not, dtype code, shape; `token`: its
// leading dims are the tokens, which a broadcast layout may give stride 0).
struct Slot {
  const char* name;
  bool output;
  bool present;
  int32_t dtype;
  std::vector<int64_t> shape;
  bool token;
};
// The tensors of `slots`, in order, into c.tensors as generate() makes them: a
// layout and the mutations, placement in one arena, aliasing of another tensor;
// then the value seed and the NaN/Inf rate. `aclnn` adds what generate() adds
// for the aclnn face (format, view offset, aclDataType, storage dims, strides
// left to aclCreateTensor); `mutations`, when given, gets each tensor's number
// of mutations (0: the tensor is as its slot says, in one of the layouts).
void lay_out(Bytes& in, Case& c, const std::vector<Slot>& slots, bool bsnd, bool aclnn = false,
             std::vector<int>* mutations = nullptr);
// After an accepted call: every arena byte outside the present output views is
// as it was (`after` is the arena's memory after the call).
void check_only_outputs_written(Case& c, const Arena& arena, const uint8_t* after, const char* what);
// Every element of the present output views has the same bits in `got` and
// `want` (two arenas of the case's layout), or is NaN in both.
void check_outputs_equal(Case& c, const uint8_t* got, const uint8_t* want, const std::string& what);

}  // namespace mhc_fuzz
