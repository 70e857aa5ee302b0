// The rows of aclnnMhcPreSinkhorn (needBackward, hcMult, numIters, shapes,
// the empty cases, CANN's check order, eps unchecked) and
// aclnnMhcPreSinkhornBackward (I from sumOut, shapes, the empty cases,
// CANN's check order, hcEps unchecked).
#include "layer_case.hpp"

#include <limits>
#include <string>
#include <vector>

namespace aclnn_layer_test {

std::vector<Row> pre_sinkhorn_rows() {
  const Op op = Op::pre_sinkhorn;
  const std::string o = op_name(op);
  std::vector<Row> rows = x_dtype_rows(op, "x");
  std::vector<Row> more = {
      // needBackward false: the caches are not looked at and not written.
      computed(o + "_without_needBackward", op, [](LayerCase&) {}, Config{.optional = false}),
      computed(o + "_without_needBackward_caches_given_are_untouched", op,
               [](LayerCase& c) {
                 c.need_backward = false;
                 c.slot("hPre").dtype = ACL_INT32;
                 c.slot("invRms").dims = {7};
                 c.slot("sumOut").format = ACL_FORMAT_FRACTAL_NZ;
               }),
      computed(o + "_without_needBackward_caches_destroyed", op, [](LayerCase& c) { c.need_backward = false; }),
      rejected(o + "_needBackward_null_hcBeforeNorm", op, [](LayerCase& c) { drop(c.slot("hcBeforeNorm")); },
               ACLNN_ERR_PARAM_NULLPTR, "hcBeforeNorm is NULL (required: needBackward is true)"),
      // hcMult is x's N (any N).
      rejected(o + "_hcMult_not_N", op, [](LayerCase& c) { c.hc_mult = 5; }, ACLNN_ERR_PARAM_INVALID,
               "hcMult must equal x's N=4 [5,4,8], got 5"),
      rejected(o + "_hcMult_4_with_N2", op, [](LayerCase& c) { c.hc_mult = 4; }, ACLNN_ERR_PARAM_INVALID,
               "hcMult must equal x's N=2", Config{.N = 2, .D = 16}),
      computed(o + "_hcMult_N2", op, [](LayerCase&) {}, Config{.N = 2, .D = 16}),
      // numIters: 1 to 100 (CANN's 20 only is dropped).
      computed(o + "_numIters_1", op, [](LayerCase&) {}, Config{.I = 1}),
      computed(o + "_numIters_100", op, [](LayerCase&) {}, Config{.lead = {2}, .I = 100}),
      rejected(o + "_numIters_0", op, [](LayerCase& c) { c.num_iters = 0; }, ACLNN_ERR_PARAM_INVALID,
               "numIters must be in [1, 100], got 0"),
      rejected(o + "_numIters_101", op, [](LayerCase& c) { c.num_iters = 101; }, ACLNN_ERR_PARAM_INVALID,
               "numIters must be in [1, 100], got 101"),
      rejected(o + "_numIters_not_the_caches", op, [](LayerCase& c) { c.num_iters = 2; }, ACLNN_ERR_PARAM_INVALID,
               "sumOut: expected [2I,T,N]=[4,5,4], got [6,5,4]"),
      // Shapes: hRes [..,N*N] or [..,N,N]; invRms [..,1]; alpha [3]; F = 2N+N*N.
      computed(o + "_hRes_as_matrices", op, [](LayerCase& c) { c.slot("hRes").dims = {5, 4, 4}; }),
      rejected(o + "_invRms_without_its_1", op, [](LayerCase& c) { c.slot("invRms").dims = {5}; },
               ACLNN_ERR_PARAM_INVALID, "invRms: expected [T,1]=[5,1], got [5]"),
      rejected(o + "_alpha_2_entries", op, [](LayerCase& c) { c.slot("alpha").dims = {2}; }, ACLNN_ERR_PARAM_INVALID,
               "alpha: expected [3], got [2]"),
      rejected(o + "_phi_permutation_rows", op, [](LayerCase& c) { c.slot("phi").dims[0] = 32; },
               ACLNN_ERR_PARAM_INVALID, "phi: expected [F,K]=[24,32] (F=2N+N*N, K=N*D), got [32,32]"),
      rejected(o + "_hIn_not_x_dtype", op, [](LayerCase& c) { c.slot("hIn").dtype = ACL_FLOAT16; },
               ACLNN_ERR_PARAM_INVALID, "hIn: expected ACL_BF16 (x's dtype), got ACL_FLOAT16"),
      // Empty inputs: success, nothing run.
      nothing_run(o + "_empty_T", op, [](LayerCase& c) { empty_tokens(c); }),
      nothing_run(o + "_empty_T_without_needBackward", op, [](LayerCase& c) { empty_tokens(c); },
                  Config{.optional = false}),
      nothing_run(o + "_empty_D", op, [](LayerCase&) {}, Config{.D = 0}),
      rejected(o + "_hRes_overlaps_hPost", op, [](LayerCase&) {}, ACLNN_ERR_PARAM_INVALID, "hRes"),
      // Order: NULL -> dtypes -> rank -> hcMult -> numIters -> shapes -> formats -> empty.
      rejected(o + "_null_bias_before_dtype", op,
               [](LayerCase& c) { drop(c.slot("bias")); c.slot("x").dtype = ACL_INT8; }, ACLNN_ERR_PARAM_NULLPTR,
               "bias is NULL"),
      rejected(o + "_dtype_before_hcMult", op, [](LayerCase& c) { c.slot("normOut").dtype = ACL_BF16; c.hc_mult = 7; },
               ACLNN_ERR_PARAM_INVALID, "normOut: expected ACL_FLOAT, got ACL_BF16"),
      rejected(o + "_rank_before_hcMult", op, [](LayerCase& c) { c.slot("x").dims = {5, 32}; c.hc_mult = 7; },
               ACLNN_ERR_PARAM_INVALID, "x: expected rank 3 or 4"),
      rejected(o + "_hcMult_before_numIters", op, [](LayerCase& c) { c.hc_mult = 7; c.num_iters = 0; },
               ACLNN_ERR_PARAM_INVALID, "hcMult must equal"),
      rejected(o + "_numIters_before_shape", op, [](LayerCase& c) { c.num_iters = 0; c.slot("hIn").dims[1] = 9; },
               ACLNN_ERR_PARAM_INVALID, "numIters"),
      rejected(o + "_shape_before_format", op,
               [](LayerCase& c) { c.slot("hPre").dims[1] = 9; c.slot("x").format = ACL_FORMAT_FRACTAL_NZ; },
               ACLNN_ERR_PARAM_INVALID, "hPre: expected [T,N]=[5,4], got [5,9]"),
      rejected(o + "_format_before_empty", op,
               [](LayerCase& c) { empty_tokens(c); c.slot("hcBeforeNorm").format = ACL_FORMAT_FRACTAL_NZ; },
               ACLNN_ERR_PARAM_INVALID, "hcBeforeNorm: private format"),
      nothing_run(o + "_empty_before_null_data", op, [](LayerCase& c) { empty_tokens(c); c.slot("hRes").null_data = true; }),
      // eps values are not checked (the C++ API checks them: no reference here).
      runs(o + "_eps_nan", op,
               [](LayerCase& c) {
                 c.hc_eps = std::numeric_limits<double>::quiet_NaN();
                 c.norm_eps = -1.0;
               }),
  };
  rows.insert(rows.end(), more.begin(), more.end());
  for (Row& r : rows) {
    if (r.label == o + "_hRes_overlaps_hPost") r.after = [](LayerCase& c) { c.alias("hRes", "hPost"); };
    if (r.label == o + "_without_needBackward_caches_destroyed")
      r.after = [](LayerCase& c) {
        for (const char* n : {"hPre", "hcBeforeNorm", "invRms", "sumOut", "normOut"}) (void)aclDestroyTensor(c.slot(n).tensor);
      };
  }
  return rows;
}

std::vector<Row> pre_sinkhorn_backward_rows() {
  const Op op = Op::pre_sinkhorn_backward;
  const std::string o = op_name(op);
  std::vector<Row> rows = x_dtype_rows(op, "x");
  std::vector<Row> more = {
      computed(o + "_gradHRes_as_matrices", op, [](LayerCase& c) { c.slot("gradHRes").dims = {5, 4, 4}; }),
      computed(o + "_I_from_sumOut", op,
               [](LayerCase& c) { c.slot("sumOut").dims[0] = 10; c.slot("normOut").dims[0] = 10; }),
      rejected(o + "_sumOut_odd_steps", op,
               [](LayerCase& c) { c.slot("sumOut").dims[0] = 5; c.slot("normOut").dims[0] = 5; },
               ACLNN_ERR_PARAM_INVALID, "sumOut: expected [2I,..,N] with 2I even and >= 2 (I iterations), got [5,5,4]"),
      rejected(o + "_normOut_other_steps", op, [](LayerCase& c) { c.slot("normOut").dims[0] = 4; },
               ACLNN_ERR_PARAM_INVALID, "normOut: expected [2I,T,N,N]=[6,5,4,4], got [4,5,4,4]"),
      rejected(o + "_invRms_without_its_1", op, [](LayerCase& c) { c.slot("invRms").dims = {5}; },
               ACLNN_ERR_PARAM_INVALID, "invRms: expected rank 2"),
      rejected(o + "_gradX_not_x_dtype", op, [](LayerCase& c) { c.slot("gradX").dtype = ACL_FLOAT16; },
               ACLNN_ERR_PARAM_INVALID, "gradX: expected ACL_BF16 (x's dtype), got ACL_FLOAT16"),
      rejected(o + "_sumOut_not_contiguous_core", op, [](LayerCase& c) { pad(c.slot("sumOut"), 0); },
               ACLNN_ERR_PARAM_INVALID, "sumOut: expected a contiguous tensor"),
      // Empty inputs: success, nothing run, before any other check but NULL.
      nothing_run(o + "_empty_T", op, [](LayerCase& c) { empty_tokens(c); }),
      nothing_run(o + "_empty_hPre_only", op, [](LayerCase& c) { c.slot("hPre").dims[0] = 0; }),
      nothing_run(o + "_empty_normOut_steps", op, [](LayerCase& c) { c.slot("normOut").dims[0] = 0; }),
      nothing_run(o + "_empty_before_rank", op, [](LayerCase& c) { c.slot("gradHin").dims[0] = 0; add_rank(c.slot("x")); }),
      nothing_run(o + "_empty_before_dtype", op,
                  [](LayerCase& c) { c.slot("invRms").dims[0] = 0; c.slot("gradX").dtype = ACL_INT64; }),
      rejected(o + "_empty_phi_is_a_shape_error", op, [](LayerCase& c) { c.slot("phi").dims[0] = 0; },
               ACLNN_ERR_PARAM_INVALID, "phi: expected [F,K]=[24,32]"),
      rejected(o + "_gradPhi_overlaps_phi", op, [](LayerCase&) {}, ACLNN_ERR_PARAM_INVALID, "gradPhi"),
      // Order: NULL -> empty -> ranks -> shapes -> dtypes -> formats.
      rejected(o + "_null_gradBias_before_empty", op,
               [](LayerCase& c) { drop(c.slot("gradBias")); c.slot("x").dims[0] = 0; }, ACLNN_ERR_PARAM_NULLPTR,
               "gradBias is NULL"),
      rejected(o + "_rank_before_shape", op,
               [](LayerCase& c) { add_rank(c.slot("gradAlpha")); c.slot("phi").dims[0] = 3; }, ACLNN_ERR_PARAM_INVALID,
               "gradAlpha: expected rank 1"),
      rejected(o + "_output_rank_after_input_ranks", op,
               [](LayerCase& c) { add_rank(c.slot("gradX")); add_rank(c.slot("normOut")); }, ACLNN_ERR_PARAM_INVALID,
               "normOut: expected rank 4, got rank 5"),
      rejected(o + "_shape_before_dtype", op,
               [](LayerCase& c) { c.slot("gradBias").dims[0] = 3; c.slot("x").dtype = ACL_INT8; },
               ACLNN_ERR_PARAM_INVALID, "gradBias: expected [F]=[24]"),
      rejected(o + "_dtype_before_format", op,
               [](LayerCase& c) { c.slot("gradHRes").dtype = ACL_BF16; c.slot("x").format = ACL_FORMAT_FRACTAL_NZ; },
               ACLNN_ERR_PARAM_INVALID, "gradHRes: expected ACL_FLOAT, got ACL_BF16"),
      rejected(o + "_output_format_is_checked", op, [](LayerCase& c) { c.slot("gradPhi").format = ACL_FORMAT_NC1HWC0; },
               ACLNN_ERR_PARAM_INVALID, "gradPhi: private format ACL_FORMAT_NC1HWC0"),
      // hcEps is not checked (the C++ API checks it: no reference here).
      runs(o + "_hcEps_inf", op, [](LayerCase& c) { c.hc_eps = std::numeric_limits<double>::infinity(); }),
  };
  rows.insert(rows.end(), more.begin(), more.end());
  for (Row& r : rows) {
    if (r.label == o + "_gradPhi_overlaps_phi") r.after = [](LayerCase& c) { c.alias("gradPhi", "phi"); };
  }
  return rows;
}

}  // namespace aclnn_layer_test
