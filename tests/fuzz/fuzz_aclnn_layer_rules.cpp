// The aclnn layer targets' rules (fuzz_aclnn_layer.hpp): what the face documents
// for each operator (docs/aclnn.md, "The layer operators"), read off the tensors
// as created: the rules an accepted call keeps, whether a call is nominal (must
// be accepted), CANN's empty cases, and which tensors the face reads and writes.
#include <algorithm>
#include <string>
#include <vector>

#include "fuzz_aclnn_layer.hpp"

namespace mhc_fuzz {
namespace aclnn_layer {

using Op = AclLayerOp;
using Dims = std::vector<int64_t>;

std::vector<int64_t> dims_of(const Tensor& t) {
  const int r = t.rank < 0 ? 0 : t.rank > kRankCap ? kRankCap : t.rank;
  return std::vector<int64_t>(t.shape, t.shape + r);
}

int64_t count_of(const std::vector<int64_t>& dims) {  // as the face counts: a 0 after an overflow is 0
  int64_t n = 1, r;
  for (int64_t d : dims) n = __builtin_mul_overflow(n, d, &r) ? INT64_MAX : r;
  return n;
}

bool contiguous_view(const Tensor& t) {
  int64_t stride = 1;
  for (int i = int(dims_of(t).size()) - 1; i >= 0; --i) {
    if (t.shape[i] > 1 && t.strides[i] != stride) return false;
    if (__builtin_mul_overflow(stride, t.shape[i], &stride)) return false;
  }
  return true;
}

bool nominal_tensor(const LayerCall& call, size_t i, const AclTensors& tensors, const Arena& arena) {
  const Tensor& t = call.c.tensors[i];
  if (call.mutations[i] != 0) return false;
  if (!t.present) return !tensors.live(i);
  const int64_t esize = element_size_of(t.dtype);
  if (!tensors.live(i) || !plain_offset(t) || esize == 0 || t.byte_offset % esize != 0) return false;
  const std::vector<int64_t> dims = dims_of(t);
  if (count_of(dims) != 0) {
    if (!inside_arena(t, arena)) return false;
    if (t.storage_given) {
      int64_t lo = 0, hi = 0;
      for (size_t k = 0; k < dims.size(); ++k)
        if (dims[k] > 1) (t.strides[k] < 0 ? lo : hi) += (dims[k] - 1) * t.strides[k];
      int64_t storage = 1;
      for (int64_t s : t.storage)
        if (s <= 0 || __builtin_mul_overflow(storage, s, &storage)) return false;
      if (t.acl_offset + lo < 0 || t.acl_offset + hi >= storage) return false;
    }
  }
  if (t.output)  // a broadcast layout (stride 0 over tokens) makes an output write elements twice
    for (size_t k = 0; k < dims.size(); ++k)
      if (dims[k] > 1 && t.strides[k] == 0) return false;
  return !call.cache[i] || contiguous_view(t);
}

// ------------------------------------------------------------------ the face's rules

Expectation expect(const LayerCall& call, const AclTensors& tensors, const Arena& arena) {
  const std::vector<Tensor>& ts = call.c.tensors;
  const size_t n = ts.size();
  Expectation e;
  e.used.assign(n, false);
  e.written.assign(n, false);
  auto i_of = [&](const char* name) { return size_t(call.index(name)); };
  auto live = [&](const char* name) { return tensors.live(i_of(name)); };
  auto dims = [&](const char* name) { return dims_of(ts[i_of(name)]); };
  auto empty = [&](const char* name) { return live(name) && count_of(dims(name)) == 0; };
  auto format = [&](const char* name) { return ts[i_of(name)].format; };
  auto acl_dtype = [&](const char* name) { return ts[i_of(name)].acl_dtype; };
  auto x_dtype_ok = [&](const char* name) { return live(name) && (acl_dtype(name) == 27 || acl_dtype(name) == 1); };
  auto rule = [&](bool ok, const char* what) {
    if (!ok && e.broken.empty()) e.broken = what;
  };
  auto all_live = [&](std::initializer_list<const char*> names) {
    for (const char* name : names) rule(live(name), "a NULL required tensor");
  };
  auto mark = [&](std::vector<bool>& set, std::initializer_list<const char*> names) {
    for (const char* name : names)
      if (live(name)) set[i_of(name)] = true;
  };
  // Tokens T, N of an [..,N,X] tensor (x, gradOutput), 0 when it is not one.
  auto token_count = [&](const Dims& d) { return d.size() < 3 ? int64_t(0) : count_of(Dims(d.begin(), d.end() - 2)); };
  auto lead = [&](const Dims& d) { return d.size() < 3 ? Dims{} : Dims(d.begin(), d.end() - 2); };
  std::vector<bool>& ignorable = e.ignored;
  ignorable.assign(n, false);
  bool extra = true;  // the operator's own conditions of a nominal call
  switch (call.op) {
    case Op::sinkhorn: {
      const Dims x = dims("x");
      auto placeholder = [&](const char* name) { return !live(name) || count_of(dims(name)) == 1; };
      const bool np = placeholder("normOut"), sp = placeholder("sumOut");
      rule(call.num_iters >= 1 && call.num_iters <= 100, "numIters outside [1, 100]");
      all_live({"x", "output"});
      rule(live("x") && acl_dtype("x") == 0 && (x.size() == 3 || x.size() == 4) && x[x.size() - 1] == x[x.size() - 2] &&
               count_of(x) > 0,
           "x is not a non-empty ACL_FLOAT [..,N,N]");
      rule(np == sp, "one cache a placeholder, the other not");
      if (!np && !sp && e.broken.empty()) {
        const int64_t T = token_count(x), N = x.back(), Na = pitch_of(N), I = call.num_iters;
        rule(count_of(dims("normOut")) == count_of({2 * I, T, N, Na}) &&
                 count_of(dims("sumOut")) == count_of({2 * I, T, Na}),
             "the caches' element counts are not 2*I*T*N*Na and 2*I*T*Na");
        rule(contiguous_view(ts[i_of("normOut")]) && contiguous_view(ts[i_of("sumOut")]), "a cache not contiguous");
        rule(format("normOut") == format("x") && format("sumOut") == format("x"), "a cache's format is not x's");
        mark(e.used, {"normOut", "sumOut"});
        mark(e.written, {"normOut", "sumOut"});
      }
      rule(!live("output") || format("output") == format("x"), "output's format is not x's");
      mark(e.used, {"x", "output"});
      mark(e.written, {"output"});
      extra = count_of(x) > 0 && format("output") == format("x") &&
              (np || (format("normOut") == format("x") && format("sumOut") == format("x")));
      break;
    }
    case Op::sinkhorn_backward: {
      const Dims g = dims("gradOutput");
      all_live({"gradOutput", "normOut", "sumOut", "out"});
      rule(!live("out") || format("out") == format("gradOutput"), "out's format is not gradOutput's");
      e.nothing_run = empty("gradOutput");
      if (!e.nothing_run && e.broken.empty() && g.size() >= 3) {
        const int64_t T = token_count(g), N = g.back(), Na = pitch_of(N);
        const int64_t norm_step = count_of({2, T, N, Na}), sum_step = count_of({2, T, Na});
        const int64_t norm = count_of(dims("normOut")), sum = count_of(dims("sumOut"));
        rule(norm > 0 && norm_step > 0 && norm % norm_step == 0 && sum == count_of({sum_step, norm / norm_step}),
             "the caches' counts give no iteration count (2*I*T*N*Na and 2*I*T*Na)");
        rule(contiguous_view(ts[i_of("normOut")]) && contiguous_view(ts[i_of("sumOut")]), "a cache not contiguous");
      }
      mark(e.used, {"gradOutput", "normOut", "sumOut", "out"});
      mark(e.written, {"out"});
      extra = format("out") == format("gradOutput");
      break;
    }
    case Op::post:
      all_live({"x", "hOut", "hPost", "out"});
      rule(x_dtype_ok("x"), "x is not ACL_BF16 or ACL_FLOAT16");
      e.nothing_run = empty("x") || empty("hRes") || empty("hOut") || empty("hPost");
      mark(e.used, {"x", "hRes", "hOut", "hPost", "out"});
      mark(e.written, {"out"});
      break;
    case Op::post_backward:
      all_live({"gradOutput", "x", "hOut", "hPost", "gradX", "gradHRes", "gradHOut", "gradHPost"});
      rule(!(empty("gradOutput") || empty("x") || empty("hRes") || empty("hOut") || empty("hPost")), "an empty input");
      rule(x_dtype_ok("gradOutput") && acl_dtype("gradX") == acl_dtype("gradOutput"),
           "gradOutput or gradX not ACL_BF16 or ACL_FLOAT16");
      mark(e.used, {"gradOutput", "x", "hRes", "hOut", "hPost", "gradX", "gradHRes", "gradHOut", "gradHPost"});
      mark(e.written, {"gradX", "gradHRes", "gradHOut", "gradHPost"});
      extra = count_of(dims("x")) > 0;
      break;
    case Op::pre_sinkhorn: {
      const Dims x = dims("x");
      all_live({"x", "phi", "alpha", "bias", "hIn", "hPost", "hRes"});
      rule(x_dtype_ok("x"), "x is not ACL_BF16 or ACL_FLOAT16");
      rule(x.size() >= 3 && call.hc_mult == x[x.size() - 2], "hcMult is not x's N");
      rule(call.num_iters >= 1 && call.num_iters <= 100, "numIters outside [1, 100]");
      const std::initializer_list<const char*> caches = {"hPre", "hcBeforeNorm", "invRms", "sumOut", "normOut"};
      if (call.need_backward) {
        all_live(caches);
        if (x.size() >= 3 && e.broken.empty()) {
          const int64_t N = x[x.size() - 2], steps = 2 * call.num_iters;
          Dims inv = lead(x), sum = lead(x), norm = lead(x);
          inv.push_back(1);
          sum.insert(sum.begin(), steps), sum.push_back(N);
          norm.insert(norm.begin(), steps), norm.push_back(N), norm.push_back(N);
          rule(dims("invRms") == inv, "invRms is not [..,1]");
          rule(dims("sumOut") == sum && dims("normOut") == norm, "sumOut or normOut not [2*numIters,..,N(,N)]");
        }
        mark(e.used, caches);
        mark(e.written, caches);
      } else {
        for (const char* name : caches) ignorable[i_of(name)] = true;
      }
      e.nothing_run = empty("x") || empty("hIn") || empty("hPost") || empty("hRes");
      mark(e.used, {"x", "phi", "alpha", "bias", "hIn", "hPost", "hRes"});
      mark(e.written, {"hIn", "hPost", "hRes"});
      break;
    }
    case Op::pre_sinkhorn_backward: {
      for (size_t i = 0; i < n; ++i) rule(tensors.live(i), "a NULL required tensor");
      e.nothing_run = empty("gradHin") || empty("gradHPost") || empty("gradHRes") || empty("x") || empty("hPre") ||
                      empty("hcBeforeNorm") || empty("invRms") || empty("sumOut") || empty("normOut");
      if (!e.nothing_run && e.broken.empty()) {
        const Dims sum = dims("sumOut"), norm = dims("normOut");
        rule(!sum.empty() && sum[0] >= 2 && sum[0] % 2 == 0 && !norm.empty() && norm[0] == sum[0],
             "sumOut's 2I is not even and >= 2, or normOut's differs");
        rule(x_dtype_ok("x"), "x is not ACL_BF16 or ACL_FLOAT16");
        rule(dims("invRms").size() == dims("x").size() - 1, "invRms is not [..,1]");
      }
      for (size_t i = 0; i < n; ++i) e.used[i] = tensors.live(i);
      mark(e.written, {"gradX", "gradPhi", "gradAlpha", "gradBias"});
      break;
    }
  }
  if (e.nothing_run) std::fill(e.written.begin(), e.written.end(), false);
  e.nominal = call.plan_valid && extra;
  for (size_t i = 0; i < n && e.nominal; ++i)
    e.nominal = ignorable[i] || nominal_tensor(call, i, tensors, arena);
  return e;
}

}  // namespace aclnn_layer
}  // namespace mhc_fuzz
