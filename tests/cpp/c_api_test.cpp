// The C API (include/mhc/mhc.h): NULL required pointers, status codes, the
// thread-local last error and its kind, defaults, and results equal to the C++ API.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "validation_util.hpp"

namespace mhc_test {
namespace {

TEST(CApi, DefaultOptions) {
  const mhc_options o = mhc_default_options();
  EXPECT_EQ(o.norm_eps, 1e-6);
  EXPECT_EQ(o.hc_eps, 1e-6);
  EXPECT_EQ(o.num_threads, 0);
  EXPECT_EQ(o.isa, MHC_ISA_DEFAULT);
  EXPECT_EQ(o.matmul_precision, MHC_MATMUL_FP32);
}

// mhc_options.isa picks a family per call; a value that names none, or a family
// this CPU cannot run, is an error naming it, and no output is written.
TEST(CApi, OptionsIsaPerCall) {
  for (mhc::Isa isa : available_families()) {
    std::unique_ptr<Call> via_c = make_call(base_config(), Op::forward), via_cpp = make_call(base_config(), Op::forward);
    via_c->o.options.isa = isa;
    via_cpp->o.options.isa = isa;
    ASSERT_EQ(via_c->run_c(Op::forward), MHC_OK) << mhc_last_error();
    ASSERT_TRUE(via_cpp->run(Op::forward).ok());
    EXPECT_EQ(via_c->o.h_mix.raw(), via_cpp->o.h_mix.raw()) << mhc::isa_name(isa);
  }
  for (int32_t bad : {99, -1, 9}) {  // 9: the first value after the last family (neon)
    std::unique_ptr<Call> call = make_call(base_config(), Op::forward);
    call->o.options.isa = mhc::Isa(bad);
    const std::vector<uint32_t> before = call->o.h_in.raw();
    EXPECT_EQ(call->run_c(Op::forward), MHC_ERR_INVALID);
    EXPECT_NE(std::string(mhc_last_error()).find("value " + std::to_string(bad)), std::string::npos) << mhc_last_error();
    EXPECT_NE(std::string(mhc_last_error()).find("available: "), std::string::npos) << mhc_last_error();
    EXPECT_EQ(call->o.h_in.raw(), before);
  }
}

TEST(CApi, AvailableIsasAreTheRunnableFamiliesBestFirst) {
  const std::string listed = mhc_available_isas();
  std::string expected;
  for (mhc::Isa isa : mhc::available_isas()) {
    EXPECT_TRUE(mhc::isa_available(isa)) << mhc::isa_name(isa);
    expected += (expected.empty() ? "" : ",") + std::string(mhc::isa_name(isa));
  }
  EXPECT_EQ(listed, expected);
  EXPECT_EQ(listed.substr(listed.size() - std::string(",portable,reference").size()), ",portable,reference");
}

// The description tables bindings read: every operator's arguments as its C function takes
// them, the torch operators on described operators, the structs' fields covering them.
// The entries of the description itself, counted at compile time.
constexpr int32_t kDescribedOperators = 0
#define MHC_OPERATOR(name, Cpp, spec, cann, torch_npu, ARGS) +1
#include "description/operators.def"
#undef MHC_OPERATOR
    ;
constexpr int32_t kDescribedTorchOps = 0
#define MHC_TORCH_OP(op, name, schema) +1
#include "description/operators.def"
#undef MHC_TORCH_OP
    ;

TEST(CApi, DescriptionTablesAreConsistent) {
  int32_t n_ops = 0, n_torch = 0, n_constants = 0, n_fields = 0;
  const mhc_operator_desc* ops = mhc_operators(&n_ops);
  ASSERT_EQ(n_ops, kDescribedOperators);
  ASSERT_GE(n_ops, 12);
  std::set<std::string> names;
  for (int32_t i = 0; i < n_ops; ++i) {
    names.insert(ops[i].name);
    ASSERT_GT(ops[i].num_args, 0) << ops[i].name;
    for (int32_t a = 0; a < ops[i].num_args; ++a) {
      const mhc_arg_desc& arg = ops[i].args[a];
      EXPECT_TRUE(arg.kind >= MHC_ARG_TENSOR_IN && arg.kind <= MHC_ARG_INT64) << ops[i].name << "." << arg.name;
      if (arg.kind == MHC_ARG_TENSOR_IN || arg.kind == MHC_ARG_TENSOR_OUT) {
        EXPECT_STRNE(arg.dtypes, "") << arg.name;
      }
    }
  }
  EXPECT_EQ(names.count("sinkhorn_forward"), 1u);
  const mhc_arg_desc* sinkhorn = nullptr;
  for (int32_t i = 0; i < n_ops; ++i)
    if (std::string(ops[i].name) == "sinkhorn_forward") sinkhorn = ops[i].args;
  ASSERT_NE(sinkhorn, nullptr);
  EXPECT_STREQ(sinkhorn[0].name, "z");
  EXPECT_EQ(sinkhorn[1].kind, MHC_ARG_DOUBLE);
  EXPECT_EQ(sinkhorn[2].kind, MHC_ARG_INT64);
  EXPECT_EQ(sinkhorn[4].nullable, 1);
  const mhc_torch_op* torch_ops = mhc_torch_ops(&n_torch);
  ASSERT_EQ(n_torch, kDescribedTorchOps);
  ASSERT_GE(n_torch, 11);
  for (int32_t i = 0; i < n_torch; ++i) EXPECT_EQ(names.count(torch_ops[i].op), 1u) << torch_ops[i].name;
  const mhc_constant* constants = mhc_constants(&n_constants);
  std::map<std::string, int64_t> by_name;
  for (int32_t i = 0; i < n_constants; ++i) by_name[constants[i].name] = constants[i].value;
  EXPECT_EQ(by_name.at("ERR_INVALID"), MHC_ERR_INVALID);
  EXPECT_EQ(by_name.at("ISA_NEON"), MHC_ISA_NEON);
  EXPECT_EQ(by_name.at("MAX_ELEMENTS"), MHC_MAX_ELEMENTS);
  int64_t size = 0;
  const mhc_field_desc* fields = mhc_struct_fields("mhc_options", &n_fields, &size);
  ASSERT_EQ(n_fields, 7);
  EXPECT_EQ(size, int64_t(sizeof(mhc_options)));
  EXPECT_STREQ(fields[0].name, "struct_size");
  EXPECT_STREQ(fields[6].name, "prepared");
  EXPECT_EQ(fields[6].kind, MHC_FIELD_POINTER);
  EXPECT_EQ(fields[6].offset, int64_t(offsetof(mhc_options, prepared)));
  EXPECT_EQ(mhc_struct_fields("no_such_struct", &n_fields, &size), nullptr);
  EXPECT_EQ(n_fields, 0);
}

// mhc_options grows by struct_size: a caller's shorter struct is read up to its size, a
// struct without one is refused before anything runs.
TEST(CApi, OptionsStructSizeIsChecked) {
  EXPECT_EQ(mhc_default_options().struct_size, sizeof(mhc_options));
  mhc_options zeroed{};
  zeroed.isa = MHC_ISA_PORTABLE;
  const mhc_tensor z{};
  EXPECT_EQ(mhc_sinkhorn_forward(&z, 1e-6, 20, &z, nullptr, nullptr, &zeroed), MHC_ERR_INVALID);
  EXPECT_NE(std::string(mhc_last_error()).find("options: struct_size 0"), std::string::npos) << mhc_last_error();
  EXPECT_EQ(mhc_last_error_kind(), MHC_ERROR_VALUE);
  // A required NULL is reported before the options are read.
  EXPECT_EQ(mhc_sinkhorn_forward(nullptr, 1e-6, 20, &z, nullptr, nullptr, &zeroed), MHC_ERR_NULLPTR);
}

TEST(CApi, SetIsaAndIsaAvailable) {
  const std::string before = mhc_isa();
  EXPECT_EQ(mhc_isa_available("portable"), 1);
  EXPECT_EQ(mhc_isa_available("reference"), 1);
  EXPECT_EQ(mhc_isa_available("nonsense"), 0);
  EXPECT_EQ(mhc_isa_available(nullptr), 0);
  EXPECT_EQ(mhc_set_isa("nonsense"), MHC_ERR_INVALID);
  EXPECT_NE(std::string(mhc_last_error()).find("'nonsense'"), std::string::npos) << mhc_last_error();
  EXPECT_EQ(std::string(mhc_isa()), before) << "a refused family leaves the default";
  ASSERT_EQ(mhc_set_isa("portable"), MHC_OK) << mhc_last_error();
  EXPECT_STREQ(mhc_isa(), "portable");
  // A default call now gives the portable family's bits.
  std::unique_ptr<Call> by_default = make_call(base_config(), Op::forward), portable = make_call(base_config(), Op::forward);
  portable->o.options.isa = mhc::Isa::portable;
  ASSERT_TRUE(by_default->run(Op::forward).ok());
  ASSERT_TRUE(portable->run(Op::forward).ok());
  EXPECT_EQ(by_default->o.h_mix.raw(), portable->o.h_mix.raw());
  EXPECT_EQ(mhc_set_isa(nullptr), MHC_OK);
  EXPECT_EQ(std::string(mhc_isa()), before);
  EXPECT_EQ(mhc_set_isa(""), MHC_OK);
  EXPECT_EQ(std::string(mhc_isa()), before);
}

TEST(CApi, StatusCodesAreCannsValues) {
  EXPECT_EQ(MHC_OK, 0);
  EXPECT_EQ(MHC_ERR_NULLPTR, 161001);
  EXPECT_EQ(MHC_ERR_INVALID, 161002);
  EXPECT_EQ(MHC_ERR_RUNTIME, 361001);
  EXPECT_EQ(MHC_ERR_INTERNAL, 561001);
  EXPECT_EQ(int(mhc::StatusCode::null_pointer), 161001);
  EXPECT_EQ(int(mhc::StatusCode::invalid_argument), 161002);
}

TEST(CApi, VersionAndIsa) {
  EXPECT_STRNE(mhc_version(), "");
  EXPECT_STREQ(mhc_isa(), mhc::isa());
}

// Each required pointer of mhc_pre_forward NULL in turn: 161001, named, nothing written.
TEST(CApi, ForwardNullRequiredPointer) {
  const char* names[] = {"x", "phi", "alpha", "bias", "h_in", "h_post"};
  for (int which = 0; which < 6; ++which) {
    std::unique_ptr<Call> k = make_call(base_config(), Op::forward);
    mhc_tensor t[6] = {to_c(k->fin.x), to_c(k->fin.phi), to_c(k->fin.alpha), to_c(k->fin.bias),
                       to_c(k->fout.h_in), to_c(*k->fout.h_post)};
    const mhc_tensor* p[6];
    for (int i = 0; i < 6; ++i) p[i] = i == which ? nullptr : &t[i];
    const mhc_tensor gamma = to_c(*k->fin.gamma), h_res = to_c(*k->fout.h_res), inv_rms = to_c(*k->fout.inv_rms),
                     h_mix = to_c(*k->fout.h_mix), h_pre = to_c(*k->fout.h_pre);
    const auto before = k->snapshot();
    const int code = mhc_pre_forward(p[0], p[1], p[2], p[3], &gamma, p[4], p[5], &h_res, &inv_rms, &h_mix, &h_pre,
                                     nullptr);
    EXPECT_EQ(code, 161001) << names[which];
    // h_post's presence depends on alpha (the head has none): validation names it.
    const std::string why = which == 5 ? " (alpha has 2 or 3 entries), got none" : ", got NULL";
    EXPECT_EQ(std::string(mhc_last_error()), std::string(names[which]) + ": required" + why);
    EXPECT_EQ(mhc_last_error_kind(), MHC_ERROR_NULL);
    EXPECT_TRUE(k->snapshot() == before) << names[which];
  }
}

TEST(CApi, BackwardNullRequiredPointer) {
  const char* names[] = {"x", "phi", "alpha", "grad_h_in", "grad_h_post", "inv_rms", "h_mix",
                         "h_pre", "h_post", "grad_x", "grad_phi", "grad_alpha", "grad_bias"};
  for (int which = 0; which < 13; ++which) {
    std::unique_ptr<Call> k = make_call(base_config(), Op::backward);
    mhc_tensor t[13] = {to_c(k->bin.x), to_c(k->bin.phi), to_c(k->bin.alpha), to_c(k->bin.grad_h_in),
                        to_c(*k->bin.grad_h_post), to_c(k->bin.inv_rms), to_c(k->bin.h_mix), to_c(k->bin.h_pre),
                        to_c(*k->bin.h_post), to_c(k->bout.grad_x), to_c(k->bout.grad_phi),
                        to_c(k->bout.grad_alpha), to_c(k->bout.grad_bias)};
    const mhc_tensor* p[13];
    for (int i = 0; i < 13; ++i) p[i] = i == which ? nullptr : &t[i];
    const mhc_tensor ghr = to_c(*k->bin.grad_h_res), gamma = to_c(*k->bin.gamma), gxp = to_c(*k->bin.grad_x_post),
                     ggamma = to_c(*k->bout.grad_gamma);
    const auto before = k->snapshot();
    const int code = mhc_pre_backward(p[0], p[1], p[2], p[3], p[4], &ghr, p[5], p[6], p[7], p[8], &gamma, &gxp, p[9],
                                      p[10], p[11], p[12], &ggamma, nullptr);
    EXPECT_EQ(code, 161001) << names[which];
    const std::string why = which == 4 || which == 8 ? " (alpha has 2 or 3 entries), got none" : ", got NULL";
    EXPECT_EQ(std::string(mhc_last_error()), std::string(names[which]) + ": required" + why);
    EXPECT_EQ(mhc_last_error_kind(), MHC_ERROR_NULL);
    EXPECT_TRUE(k->snapshot() == before) << names[which];
  }
}

// The optional pointers by their rules: h_res NULL with 3-entry alpha, grad_gamma NULL with gamma.
TEST(CApi, NullOptionalPointersFollowTheirRules) {
  std::unique_ptr<Call> k = make_call(base_config(), Op::forward);
  k->fout.h_res.reset();
  EXPECT_EQ(k->run_c(Op::forward), 161001);
  EXPECT_STREQ(mhc_last_error(), "h_res: required (alpha has 3 entries), got none");
  k = make_call(base_config(), Op::backward);
  k->bout.grad_gamma.reset();
  EXPECT_EQ(k->run_c(Op::backward), 161001);
  EXPECT_STREQ(mhc_last_error(), "grad_gamma: required when gamma is given, got none");
  EXPECT_EQ(mhc_last_error_kind(), MHC_ERROR_NULL);
}

// mhc_last_error_kind for each kind of input error, and cleared by a success.
TEST(CApi, LastErrorKindValues) {
  EXPECT_EQ(MHC_ERROR_NONE, 0);
  EXPECT_EQ(MHC_ERROR_NULL, 1);
  EXPECT_EQ(MHC_ERROR_DTYPE, 2);
  EXPECT_EQ(MHC_ERROR_SHAPE, 3);
  EXPECT_EQ(MHC_ERROR_LAYOUT, 4);
  EXPECT_EQ(MHC_ERROR_VALUE, 5);
  EXPECT_EQ(MHC_ERROR_RUNTIME, 6);
  struct Case { std::function<void(Call&)> mutate; int code, kind; };
  const Case cases[] = {
      {[](Call& k) { k.fin.x.data = nullptr; }, 161001, MHC_ERROR_NULL},
      {[](Call& k) { k.fin.phi.dtype = DType::fp16; }, 161002, MHC_ERROR_DTYPE},
      {[](Call& k) { k.fin.bias.shape[0] = 3; }, 161002, MHC_ERROR_SHAPE},
      {[](Call& k) { k.fout.h_post->strides[2] = 0; }, 161002, MHC_ERROR_LAYOUT},
      {[](Call& k) { k.options().hc_eps = NAN; }, 161002, MHC_ERROR_VALUE},
      {[](Call&) {}, 0, MHC_ERROR_NONE},
  };
  for (const Case& c : cases) {
    std::unique_ptr<Call> k = make_call(base_config(), Op::forward);
    c.mutate(*k);
    EXPECT_EQ(k->run_c(Op::forward), c.code);
    EXPECT_EQ(mhc_last_error_kind(), c.kind);
    if (c.code == 0) {
      EXPECT_STREQ(mhc_last_error(), "") << "a success must clear the last error";
    } else {
      EXPECT_STRNE(mhc_last_error(), "");
    }
  }
}

// The last error is per thread.
TEST(CApi, LastErrorIsThreadLocal) {
  std::unique_ptr<Call> bad = make_call(base_config(), Op::forward);
  bad->fin.x.data = nullptr;
  ASSERT_EQ(bad->run_c(Op::forward), 161001);
  std::string other_thread_error = "unset";
  int other_thread_code = -1;
  std::thread worker([&] {
    std::unique_ptr<Call> good = make_call(base_config(), Op::forward);
    other_thread_code = good->run_c(Op::forward);
    other_thread_error = mhc_last_error();
  });
  worker.join();
  EXPECT_EQ(other_thread_code, 0);
  EXPECT_EQ(other_thread_error, "");
  EXPECT_STREQ(mhc_last_error(), "x: data pointer is null");
  EXPECT_EQ(mhc_last_error_kind(), MHC_ERROR_NULL);
}

// Through the C API, the same bits as through the C++ API; NULL options = defaults.
TEST(CApi, ResultsEqualTheCppApi) {
  for (const Config& c : {base_config(), two_entry_config(), perm_config(), no_gamma_config()}) {
    std::unique_ptr<Call> via_c = make_call(c, Op::forward), via_cpp = make_call(c, Op::forward);
    ASSERT_EQ(via_c->run_c(Op::forward), 0) << mhc_last_error();
    ASSERT_TRUE(via_cpp->run(Op::forward).ok());
    for (Tensor Operands::*t : {&Operands::h_in, &Operands::h_post, &Operands::h_res, &Operands::inv_rms,
                                &Operands::h_mix, &Operands::h_pre})
      EXPECT_EQ((via_c->o.*t).raw(), (via_cpp->o.*t).raw()) << c.name();
    via_c = make_call(c, Op::backward);
    via_cpp = make_call(c, Op::backward);
    ASSERT_EQ(via_c->run_c(Op::backward), 0) << mhc_last_error();
    ASSERT_TRUE(via_cpp->run(Op::backward).ok());
    for (Tensor Operands::*t : {&Operands::grad_x, &Operands::grad_phi, &Operands::grad_alpha,
                                &Operands::grad_bias, &Operands::grad_gamma})
      EXPECT_EQ((via_c->o.*t).raw(), (via_cpp->o.*t).raw()) << c.name();
  }
  // NULL options: the defaults.
  std::unique_ptr<Call> k = make_call(base_config(), Op::forward), d = make_call(base_config(), Op::forward);
  const mhc_tensor x = to_c(k->fin.x), phi = to_c(k->fin.phi), alpha = to_c(k->fin.alpha), bias = to_c(k->fin.bias),
                   gamma = to_c(*k->fin.gamma), h_in = to_c(k->fout.h_in), h_post = to_c(*k->fout.h_post),
                   h_res = to_c(*k->fout.h_res);
  ASSERT_EQ(mhc_pre_forward(&x, &phi, &alpha, &bias, &gamma, &h_in, &h_post, &h_res, nullptr, nullptr, nullptr,
                            nullptr), 0) << mhc_last_error();
  d->fout.inv_rms.reset(); d->fout.h_mix.reset(); d->fout.h_pre.reset();
  d->o.options = mhc::Options{};
  ASSERT_TRUE(d->run(Op::forward).ok());
  EXPECT_EQ(k->o.h_in.raw(), d->o.h_in.raw());
  EXPECT_EQ(k->o.h_post.raw(), d->o.h_post.raw());
  EXPECT_EQ(k->o.h_res.raw(), d->o.h_res.raw());
}

}  // namespace
}  // namespace mhc_test
