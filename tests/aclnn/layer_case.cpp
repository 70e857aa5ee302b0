// The fixture of layer_case.hpp: the slots' deterministic values, a
// backward's caches from the C++ API's forward (fill_caches), the C++ API's
// outputs on the slots' inputs (reference), and the rows every operator has
// (common_rows, x_dtype_rows).
#include "layer_case.hpp"

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.hpp"  // inputs rounded to fp16 as the library rounds (any compiler)

namespace aclnn_layer_test {

const char* op_name(Op op) {
  switch (op) {
    case Op::sinkhorn: return "aclnnMhcSinkhorn";
    case Op::sinkhorn_backward: return "aclnnMhcSinkhornBackward";
    case Op::post: return "aclnnMhcPost";
    case Op::post_backward: return "aclnnMhcPostBackward";
    case Op::pre_sinkhorn: return "aclnnMhcPreSinkhorn";
    case Op::pre_sinkhorn_backward: return "aclnnMhcPreSinkhornBackward";
  }
  return "";
}

int64_t product(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}
int64_t pitch_of(int64_t N) { return (N + 7) / 8 * 8; }  // Na (SPEC §10)
std::vector<int64_t> concat(std::vector<int64_t> a, const std::vector<int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

namespace {

uint32_t seed_of(const std::string& name) {
  uint32_t h = 2166136261u;
  for (char c : name) h = (h ^ uint8_t(c)) * 16777619u;
  return h;
}

size_t element_size(aclDataType dtype) {
  Slot s;
  s.dtype = dtype;
  return s.element_size();
}

}  // namespace

std::vector<uint8_t> random_bytes(const std::string& seed_name, aclDataType dtype, int64_t count, float center,
                                  float scale) {
  const size_t es = element_size(dtype);
  std::vector<uint8_t> out(size_t(count) * es, 0);
  const uint32_t seed = seed_of(seed_name);
  for (int64_t i = 0; i < count; ++i)
    aclnn_test::store_value(dtype, out.data() + i * es, center + scale * aclnn_test::unit_value(seed, i));
  return out;
}

namespace {

mhc::DType mhc_dtype(aclDataType dtype) {
  return dtype == ACL_BF16 ? mhc::DType::bf16 : dtype == ACL_FLOAT16 ? mhc::DType::fp16 : mhc::DType::fp32;
}

}  // namespace

// A contiguous C++ API view of `dims` over `bytes`.
mhc::TensorView view_of(std::vector<uint8_t>& bytes, aclDataType dtype, const std::vector<int64_t>& dims) {
  mhc::TensorView v;
  v.data = bytes.data();
  v.dtype = mhc_dtype(dtype);
  v.rank = int32_t(dims.size());
  int64_t stride = 1;
  for (int i = v.rank - 1; i >= 0; --i) {
    v.shape[i] = dims[i];
    v.strides[i] = stride;
    stride *= dims[i];
  }
  return v;
}

namespace {

// The token dims of x-like slots: all but the last two dims.
std::vector<int64_t> lead_of(const Slot& s) {
  return s.dims.size() >= 2 ? std::vector<int64_t>(s.dims.begin(), s.dims.end() - 2) : std::vector<int64_t>{};
}

}  // namespace

// A backward's caches, as the C++ API's forward writes them (where the slot
// can take them; a slot a test has broken keeps its random values).
void LayerCase::fill_caches() {
  std::map<std::string, std::vector<uint8_t>> keep, out;
  if (op_ == Op::sinkhorn_backward) {
    const Slot& g = slot("gradOutput");
    if (!g.present || g.dtype != ACL_FLOAT || g.dims.size() < 3 || g.numel() == 0) return;
    const std::vector<int64_t> lead = lead_of(g);
    const int64_t N = g.dims.back(), Na = pitch_of(N), T = product(lead);
    const int64_t per_iteration = 2 * T * N * Na;
    const Slot& norm = slot("normOut");
    if (!norm.present || norm.numel() == 0 || norm.numel() % per_iteration != 0) return;
    const int64_t I = norm.numel() / per_iteration;
    const std::vector<int64_t> z_dims = g.dims, norm_dims = concat(concat({2 * I}, lead), {N, Na}),
                               sum_dims = concat(concat({2 * I}, lead), {Na});
    keep["z"] = random_bytes("z", ACL_FLOAT, product(z_dims), 0.0f, 2.0f);
    keep["h"].assign(size_t(product(z_dims)) * 4, 0);
    keep["norm"].assign(size_t(product(norm_dims)) * 4, 0);
    keep["sum"].assign(size_t(product(sum_dims)) * 4, 0);
    mhc::SinkhornForwardInputs in;
    in.z = view_of(keep["z"], ACL_FLOAT, z_dims);
    in.num_iters = I;
    const mhc::SinkhornForwardOutputs o{view_of(keep["h"], ACL_FLOAT, z_dims),
                                        view_of(keep["norm"], ACL_FLOAT, norm_dims),
                                        view_of(keep["sum"], ACL_FLOAT, sum_dims)};
    if (!mhc::sinkhorn_forward(in, o).ok()) return;
    if (cache_slot_takes("normOut", product(norm_dims))) write_logical(slot("normOut"), keep["norm"]);
    if (cache_slot_takes("sumOut", product(sum_dims))) write_logical(slot("sumOut"), keep["sum"]);
  } else if (op_ == Op::pre_sinkhorn_backward) {
    for (const char* name : {"x", "phi", "alpha", "bias"})
      if (!slot(name).present) return;
    for (const char* name : {"phi", "alpha", "bias"})
      if (slot(name).dtype != ACL_FLOAT) return;
    const Slot& x = slot("x");
    if ((x.dtype != ACL_BF16 && x.dtype != ACL_FLOAT16) || x.dims.size() < 3 || x.numel() == 0) return;
    const std::vector<int64_t> lead = lead_of(x);
    const int64_t N = x.dims[x.dims.size() - 2], D = x.dims.back(), F = 2 * N + N * N;
    const Slot& sum = slot("sumOut");
    const int64_t I = sum.dims.size() > 0 && sum.dims[0] >= 2 && sum.dims[0] % 2 == 0 ? sum.dims[0] / 2 : config_.I;
    const std::vector<int64_t> d_dims = concat(lead, {D}), n_dims = concat(lead, {N}), r_dims = concat(lead, {N * N}),
                               f_dims = concat(lead, {F}), sum_dims = concat(concat({2 * I}, lead), {N}),
                               norm_dims = concat(concat({2 * I}, lead), {N, N});
    auto fresh = [&](const char* name, aclDataType dtype, const std::vector<int64_t>& dims) {
      out[name].assign(size_t(product(dims)) * element_size(dtype), 0);
      return view_of(out[name], dtype, dims);
    };
    mhc::PreSinkhornForwardInputs in;
    in.x = input("x", keep);
    in.phi = input("phi", keep);
    in.alpha = input("alpha", keep);
    in.bias = input("bias", keep);
    in.num_iters = I;
    mhc::PreSinkhornForwardOutputs o;
    o.h_in = fresh("h_in", x.dtype, d_dims);
    o.h_post = fresh("h_post", ACL_FLOAT, n_dims);
    o.h_res = fresh("h_res", ACL_FLOAT, r_dims);
    o.inv_rms = fresh("inv_rms", ACL_FLOAT, lead);
    o.h_mix = fresh("h_mix", ACL_FLOAT, f_dims);
    o.h_pre = fresh("h_pre", ACL_FLOAT, n_dims);
    o.norm_out = fresh("norm_out", ACL_FLOAT, norm_dims);
    o.sum_out = fresh("sum_out", ACL_FLOAT, sum_dims);
    mhc::Options options;
    options.hc_eps = hc_eps;
    options.norm_eps = norm_eps;
    if (!mhc::pre_sinkhorn_forward(in, o, options).ok()) return;
    const std::pair<const char*, const char*> caches[] = {
        {"hPre", "h_pre"}, {"hcBeforeNorm", "h_mix"}, {"invRms", "inv_rms"}, {"sumOut", "sum_out"},
        {"normOut", "norm_out"}};
    for (const auto& [name, core_name] : caches)
      if (cache_slot_takes(name, int64_t(out[core_name].size() / 4))) write_logical(slot(name), out[core_name]);
  }
}

mhc::Status LayerCase::reference(std::map<std::string, std::vector<uint8_t>>* outputs) {
  std::map<std::string, std::vector<uint8_t>> keep;
  auto& out = *outputs;
  out.clear();
  auto given = [this](const char* name) { return slot(name).present; };
  switch (op_) {
    case Op::sinkhorn: {
      // Caches of one element (or NULL) are none.
      const bool caches = given("normOut") && given("sumOut") && slot("normOut").numel() != 1 &&
                          slot("sumOut").numel() != 1;
      const std::vector<int64_t> lead = lead_of(slot("x"));
      const int64_t N = slot("x").dims.back(), Na = pitch_of(N);
      const std::vector<int64_t> norm_dims = concat(concat({2 * num_iters}, lead), {N, Na}),
                                 sum_dims = concat(concat({2 * num_iters}, lead), {Na});
      mhc::SinkhornForwardInputs in;
      in.z = input("x", keep);
      in.eps = eps;
      in.num_iters = num_iters;
      mhc::SinkhornForwardOutputs o;
      o.h_res = output("output", out);
      if (caches) {
        o.norm_out = output("normOut", out, &norm_dims);
        o.sum_out = output("sumOut", out, &sum_dims);
      }
      return mhc::sinkhorn_forward(in, o);
    }
    case Op::sinkhorn_backward: {
      const std::vector<int64_t> lead = lead_of(slot("gradOutput"));
      const int64_t N = slot("gradOutput").dims.back(), Na = pitch_of(N);
      const int64_t I = slot("normOut").numel() / (2 * product(lead) * N * Na);
      const std::vector<int64_t> norm_dims = concat(concat({2 * I}, lead), {N, Na}),
                                 sum_dims = concat(concat({2 * I}, lead), {Na});
      mhc::SinkhornBackwardInputs in;
      in.grad_h_res = input("gradOutput", keep);
      in.norm_out = input("normOut", keep, &norm_dims);
      in.sum_out = input("sumOut", keep, &sum_dims);
      mhc::SinkhornBackwardOutputs o;
      o.grad_z = output("out", out);
      return mhc::sinkhorn_backward(in, o);
    }
    case Op::post: {
      mhc::PostForwardInputs in;
      in.x = input("x", keep);
      if (given("hRes")) in.h_res = input("hRes", keep);
      in.h_out = input("hOut", keep);
      in.h_post = input("hPost", keep);
      mhc::PostForwardOutputs o;
      o.out = output("out", out);
      return mhc::post_forward(in, o);
    }
    case Op::post_backward: {
      mhc::PostBackwardInputs in;
      in.grad_out = input("gradOutput", keep);
      in.x = input("x", keep);
      if (given("hRes")) in.h_res = input("hRes", keep);
      in.h_out = input("hOut", keep);
      in.h_post = input("hPost", keep);
      mhc::PostBackwardOutputs o;
      o.grad_x = output("gradX", out);
      o.grad_h_res = output("gradHRes", out);
      o.grad_h_out = output("gradHOut", out);
      o.grad_h_post = output("gradHPost", out);
      return mhc::post_backward(in, o);
    }
    case Op::pre_sinkhorn: {
      mhc::PreSinkhornForwardInputs in;
      in.x = input("x", keep);
      in.phi = input("phi", keep);
      in.alpha = input("alpha", keep);
      in.bias = input("bias", keep);
      in.num_iters = num_iters;
      mhc::PreSinkhornForwardOutputs o;
      o.h_in = output("hIn", out);
      o.h_post = output("hPost", out);
      o.h_res = output("hRes", out);
      if (need_backward) {
        const std::vector<int64_t> lead = lead_of(slot("x"));
        o.inv_rms = output("invRms", out, &lead);  // CANN's [..,1] is the core's [..]
        o.h_mix = output("hcBeforeNorm", out);
        o.h_pre = output("hPre", out);
        o.norm_out = output("normOut", out);
        o.sum_out = output("sumOut", out);
      }
      mhc::Options options;
      options.hc_eps = hc_eps;
      options.norm_eps = norm_eps;
      return mhc::pre_sinkhorn_forward(in, o, options);
    }
    case Op::pre_sinkhorn_backward: {
      const std::vector<int64_t> lead = lead_of(slot("x"));
      mhc::PreSinkhornBackwardInputs in;
      in.grad_h_in = input("gradHin", keep);
      in.grad_h_post = input("gradHPost", keep);
      in.grad_h_res = input("gradHRes", keep);
      in.x = input("x", keep);
      in.phi = input("phi", keep);
      in.alpha = input("alpha", keep);
      in.bias = input("bias", keep);
      in.h_pre = input("hPre", keep);
      in.h_mix = input("hcBeforeNorm", keep);
      in.inv_rms = input("invRms", keep, &lead);
      in.sum_out = input("sumOut", keep);
      in.norm_out = input("normOut", keep);
      mhc::PreSinkhornBackwardOutputs o;
      o.grad_x = output("gradX", out);
      o.grad_phi = output("gradPhi", out);
      o.grad_alpha = output("gradAlpha", out);
      o.grad_bias = output("gradBias", out);
      mhc::Options options;
      options.hc_eps = hc_eps;
      return mhc::pre_sinkhorn_backward(in, o, options);
    }
  }
  return mhc::Status(mhc::StatusCode::internal_error, mhc::ErrorKind::none, "unknown operator");
}

// ---------------------------------------------------------------- the table

void PrintTo(const Row& row, std::ostream* os) { *os << row.label; }

void drop(Slot& s) { s.present = false; }
void add_rank(Slot& s) { s.dims.push_back(1); }

namespace {

void private_format(Slot& s) { s.format = ACL_FORMAT_FRACTAL_NZ; }
void other_dtype(Slot& s) { s.dtype = s.dtype == ACL_FLOAT ? ACL_BF16 : s.dtype == ACL_BF16 ? ACL_FLOAT16 : ACL_BF16; }

}  // namespace

void pad(Slot& s, int64_t offset) {
  s.strides.assign(s.dims.size(), 1);
  for (size_t i = s.dims.size(); i-- > 1;) s.strides[i - 1] = s.strides[i] * (s.dims[i] + 1);
  s.offset = offset;
}

Row rejected(std::string label, Op op, std::function<void(LayerCase&)> mutate, aclnnStatus code,
             std::string message, Config config) {
  Row r;
  r.label = std::move(label);
  r.op = op;
  r.config = std::move(config);
  r.mutate = std::move(mutate);
  r.outcome = Outcome::rejected;
  r.code = code;
  r.message = std::move(message);
  return r;
}
Row computed(std::string label, Op op, std::function<void(LayerCase&)> mutate, Config config) {
  Row r;
  r.label = std::move(label);
  r.op = op;
  r.config = std::move(config);
  r.mutate = std::move(mutate);
  r.outcome = Outcome::computed;
  return r;
}
Row nothing_run(std::string label, Op op, std::function<void(LayerCase&)> mutate, Config config) {
  Row r = computed(std::move(label), op, std::move(mutate), std::move(config));
  r.outcome = Outcome::nothing_run;
  return r;
}
Row runs(std::string label, Op op, std::function<void(LayerCase&)> mutate) {
  Row r = computed(std::move(label), op, std::move(mutate));
  r.outcome = Outcome::runs;
  return r;
}

std::vector<std::string> slot_names(Op op, Config config) {
  LayerCase c(op, config);
  std::vector<std::string> names;
  for (const Slot& s : c.slots())
    if (s.present) names.push_back(s.name);
  return names;
}

namespace {

// The caches whose shape is free (any shape of the right count, contiguous).
bool free_shape_cache(Op op, const std::string& name) {
  return (op == Op::sinkhorn || op == Op::sinkhorn_backward) && (name == "normOut" || name == "sumOut");
}

// Tensors that must not be NULL: all but post's and post backward's hRes and
// the Sinkhorn's optional caches (NULL there is a cache form: sinkhorn_rows).
std::vector<std::string> required_names(Op op) {
  std::vector<std::string> names;
  for (const std::string& n : slot_names(op))
    if (!((op == Op::post || op == Op::post_backward) && n == "hRes") && !(op == Op::sinkhorn && free_shape_cache(op, n)))
      names.push_back(n);
  return names;
}
// The caches the core requires contiguous.
bool contiguous_cache(Op op, const std::string& name) {
  return (op != Op::post && op != Op::post_backward) && (name == "normOut" || name == "sumOut");
}

}  // namespace

std::vector<Row> common_rows(Op op) {
  const std::string o = op_name(op);
  std::vector<Row> rows;
  rows.push_back(computed(o + "_baseline", op));
  rows.push_back(rejected(o + "_null_workspaceSize", op, [](LayerCase&) {}, ACLNN_ERR_PARAM_NULLPTR,
                          "workspaceSize is NULL"));
  rows.back().null_workspace_size = true;
  rows.push_back(rejected(o + "_null_executor", op, [](LayerCase&) {}, ACLNN_ERR_PARAM_NULLPTR, "executor is NULL"));
  rows.back().null_executor = true;
  for (const std::string& n : required_names(op))
    rows.push_back(rejected(o + "_null_" + n, op, [n](LayerCase& c) { drop(c.slot(n)); }, ACLNN_ERR_PARAM_NULLPTR,
                            n + " is NULL"));
  for (const std::string& n : slot_names(op)) {
    if (!free_shape_cache(op, n))
      rows.push_back(rejected(o + "_rank_" + n, op,
                              [n](LayerCase& c) {
                                std::vector<int64_t>& dims = c.slot(n).dims;
                                // x [T,N,D] + [1] would read as [B,S,N,D]: [T,N*D] instead
                                if (n == "x" && c.op() != Op::sinkhorn) dims = {dims[0], dims[1] * dims[2]};
                                else add_rank(c.slot(n));
                              },
                              ACLNN_ERR_PARAM_INVALID));
    rows.push_back(rejected(o + "_shape_" + n, op, [n](LayerCase& c) { c.slot(n).dims.back() += 1; },
                            ACLNN_ERR_PARAM_INVALID));
    rows.push_back(rejected(o + "_dtype_" + n, op, [n](LayerCase& c) { other_dtype(c.slot(n)); },
                            ACLNN_ERR_PARAM_INVALID));
    rows.push_back(rejected(o + "_format_" + n, op, [n](LayerCase& c) { private_format(c.slot(n)); },
                            ACLNN_ERR_PARAM_INVALID, "private format ACL_FORMAT_FRACTAL_NZ"));
    // 50: no enumerator, yet inside aclFormat's range of values (a C++ cast to it is defined).
    rows.push_back(rejected(o + "_unknown_format_" + n, op,
                            [n](LayerCase& c) { c.slot(n).format = static_cast<aclFormat>(50); },
                            ACLNN_ERR_PARAM_INVALID, "unknown aclFormat 50"));
    rows.push_back(rejected(o + "_null_data_" + n, op, [n](LayerCase& c) { c.slot(n).null_data = true; },
                            ACLNN_ERR_PARAM_NULLPTR, n + ": data pointer is null"));
    rows.push_back(rejected(o + "_view_outside_storage_" + n, op,
                            [n](LayerCase& c) { c.slot(n).declared_storage_delta = -1; }, ACLNN_ERR_PARAM_INVALID,
                            n + ": view"));
    rows.push_back(rejected(o + "_destroyed_" + n, op, [](LayerCase&) {}, ACLNN_ERR_PARAM_INVALID,
                            n + ": not a live aclTensor"));
    rows.back().after = [n](LayerCase& c) { (void)aclDestroyTensor(c.slot(n).tensor); };
    // Non-contiguous views are accepted wherever the core takes them.
    if (!contiguous_cache(op, n))
      rows.push_back(computed(o + "_strided_" + n, op, [n](LayerCase& c) { pad(c.slot(n), 3); }));
    else
      rows.push_back(rejected(o + "_strided_" + n, op, [n](LayerCase& c) { pad(c.slot(n), 3); },
                              ACLNN_ERR_PARAM_INVALID, "contiguous"));
  }
  // Every tensor strided and offset at once, the caches that must be contiguous only offset.
  rows.push_back(computed(o + "_all_strided", op, [op](LayerCase& c) {
    int64_t offset = 1;
    for (Slot& s : c.slots()) {
      if (contiguous_cache(op, s.name)) s.offset = offset++;
      else pad(s, offset++);
    }
  }));
  // [T,...] as [1,T,...] and as [B,S,...].
  rows.push_back(computed(o + "_bsnd_1x5", op, [](LayerCase&) {}, Config{.lead = {1, 5}}));
  rows.push_back(computed(o + "_bsnd_2x3", op, [](LayerCase&) {}, Config{.lead = {2, 3}}));
  // Any N (odd, past one pitch of 8) and D.
  rows.push_back(computed(o + "_N3_D37", op, [](LayerCase&) {}, Config{.N = 3, .D = 37}));
  rows.push_back(computed(o + "_N9_D5", op, [](LayerCase&) {}, Config{.N = 9, .D = 5, .I = 2}));
  rows.push_back(computed(o + "_N1_D1", op, [](LayerCase&) {}, Config{.lead = {2}, .N = 1, .D = 1, .I = 1}));
  return rows;
}

std::vector<Row> x_dtype_rows(Op op, const std::string& x_name) {
  const std::string o = op_name(op);
  Config fp16;
  fp16.x_dtype = ACL_FLOAT16;
  return {
      computed(o + "_fp16", op, [](LayerCase&) {}, fp16),
      rejected(o + "_" + x_name + "_fp32", op,
               [](LayerCase& c) {
                 for (Slot& s : c.slots())
                   if (s.dtype == ACL_BF16) s.dtype = ACL_FLOAT;
               },
               ACLNN_ERR_PARAM_INVALID, x_name + ": ACL_FLOAT is not supported"),
      rejected(o + "_" + x_name + "_int8", op, [x_name](LayerCase& c) { c.slot(x_name).dtype = ACL_INT8; },
               ACLNN_ERR_PARAM_INVALID, x_name + ": expected ACL_BF16 or ACL_FLOAT16, got ACL_INT8"),
  };
}

void empty_tokens(LayerCase& c) {
  for (Slot& s : c.slots()) {
    if (s.name == "phi" || s.name == "alpha" || s.name == "bias" || s.name == "gradPhi" || s.name == "gradAlpha" ||
        s.name == "gradBias")
      continue;
    const bool step = s.name == "sumOut" || s.name == "normOut";
    s.dims[step ? 1 : 0] = 0;  // T = 0
  }
}

}  // namespace aclnn_layer_test
