// The rows of aclnnMhcPost (without hRes, dtypes, the empty cases, CANN's
// check order) and aclnnMhcPostBackward (without hRes, dtypes, empty inputs
// rejected, CANN's check order).
#include "layer_case.hpp"

#include <string>
#include <vector>

namespace aclnn_layer_test {

std::vector<Row> post_rows() {
  const Op op = Op::post;
  const std::string o = op_name(op);
  std::vector<Row> rows = x_dtype_rows(op, "x");
  std::vector<Row> more = {
      computed(o + "_without_hRes", op, [](LayerCase&) {}, Config{.optional = false}),
      computed(o + "_without_hRes_strided", op,
               [](LayerCase& c) {
                 int64_t offset = 2;
                 for (Slot& s : c.slots()) pad(s, offset++);
               },
               Config{.optional = false}),
      rejected(o + "_hOut_not_x_dtype", op, [](LayerCase& c) { c.slot("hOut").dtype = ACL_FLOAT16; },
               ACLNN_ERR_PARAM_INVALID, "hOut: expected ACL_BF16 (x's dtype), got ACL_FLOAT16"),
      rejected(o + "_out_not_x_dtype", op, [](LayerCase& c) { c.slot("out").dtype = ACL_FLOAT; },
               ACLNN_ERR_PARAM_INVALID, "out: expected ACL_BF16 (x's dtype), got ACL_FLOAT"),
      rejected(o + "_hRes_rank_3_with_bsnd_x", op, [](LayerCase& c) { c.slot("hRes").dims = {5, 4, 4}; },
               ACLNN_ERR_PARAM_INVALID, "hRes: expected rank 4", Config{.lead = {1, 5}}),
      // Empty inputs: success, nothing run (T = 0, N = 0 or D = 0).
      nothing_run(o + "_empty_T", op, [](LayerCase& c) { empty_tokens(c); }),
      nothing_run(o + "_empty_T_without_hRes", op, [](LayerCase& c) { empty_tokens(c); }, Config{.optional = false}),
      nothing_run(o + "_empty_N", op, [](LayerCase&) {}, Config{.N = 0}),
      nothing_run(o + "_empty_D", op, [](LayerCase&) {}, Config{.D = 0}),
      nothing_run(o + "_empty_bsnd", op, [](LayerCase&) {}, Config{.lead = {0, 5}}),
      rejected(o + "_empty_hOut_only", op, [](LayerCase& c) { c.slot("hOut").dims[0] = 0; }, ACLNN_ERR_PARAM_INVALID,
               "hOut: expected [T,D]=[5,8], got [0,8]"),
      // The formats CANN does not check come after what it checks.
      rejected(o + "_hOut_format_after_shapes", op,
               [](LayerCase& c) { c.slot("hOut").format = ACL_FORMAT_FRACTAL_NZ; c.slot("hPost").dims[1] = 5; },
               ACLNN_ERR_PARAM_INVALID, "hPost: expected [T,N]=[5,4], got [5,5]"),
      nothing_run(o + "_hRes_format_not_looked_at_when_empty", op,
                  [](LayerCase& c) { empty_tokens(c); c.slot("hRes").format = ACL_FORMAT_FRACTAL_NZ; }),
      rejected(o + "_out_overlaps_hOut", op, [](LayerCase&) {}, ACLNN_ERR_PARAM_INVALID, "out"),
      // Order: NULL -> formats of x and out -> dtypes -> ranks -> shapes -> empty.
      rejected(o + "_null_hPost_before_format", op,
               [](LayerCase& c) { drop(c.slot("hPost")); c.slot("x").format = ACL_FORMAT_FRACTAL_NZ; },
               ACLNN_ERR_PARAM_NULLPTR, "hPost is NULL"),
      rejected(o + "_format_before_dtype", op,
               [](LayerCase& c) { c.slot("out").format = ACL_FORMAT_NC1HWC0; c.slot("x").dtype = ACL_INT32; },
               ACLNN_ERR_PARAM_INVALID, "out: private format ACL_FORMAT_NC1HWC0"),
      rejected(o + "_dtype_before_rank", op,
               [](LayerCase& c) { c.slot("hPost").dtype = ACL_BF16; add_rank(c.slot("hOut")); },
               ACLNN_ERR_PARAM_INVALID, "hPost: expected ACL_FLOAT, got ACL_BF16"),
      rejected(o + "_rank_before_shape", op,
               [](LayerCase& c) { add_rank(c.slot("out")); c.slot("hRes").dims[1] = 3; }, ACLNN_ERR_PARAM_INVALID,
               "out: expected rank 3"),
      rejected(o + "_shape_before_empty", op, [](LayerCase& c) { empty_tokens(c); c.slot("out").dims[0] = 5; },
               ACLNN_ERR_PARAM_INVALID, "out: expected [T,N,D]=[0,4,8], got [5,4,8]"),
      nothing_run(o + "_empty_before_null_data", op, [](LayerCase& c) { empty_tokens(c); c.slot("x").null_data = true; }),
  };
  rows.insert(rows.end(), more.begin(), more.end());
  for (Row& r : rows) {
    if (r.label == o + "_out_overlaps_hOut") r.after = [](LayerCase& c) { c.alias("out", "hOut"); };
  }
  return rows;
}

std::vector<Row> post_backward_rows() {
  const Op op = Op::post_backward;
  const std::string o = op_name(op);
  std::vector<Row> rows = x_dtype_rows(op, "gradOutput");
  std::vector<Row> more = {
      computed(o + "_without_hRes", op, [](LayerCase&) {}, Config{.optional = false}),
      computed(o + "_without_hRes_bsnd_fp16", op, [](LayerCase&) {},
               Config{.lead = {2, 3}, .x_dtype = ACL_FLOAT16, .optional = false}),
      rejected(o + "_gradX_fp32_is_not_cann", op, [](LayerCase& c) { c.slot("gradX").dtype = ACL_FLOAT; },
               ACLNN_ERR_PARAM_INVALID, "gradX: expected ACL_BF16 (gradOutput's dtype), got ACL_FLOAT"),
      rejected(o + "_x_not_gradOutput_dtype", op, [](LayerCase& c) { c.slot("x").dtype = ACL_FLOAT16; },
               ACLNN_ERR_PARAM_INVALID, "x: expected ACL_BF16 (gradOutput's dtype), got ACL_FLOAT16"),
      rejected(o + "_null_gradHRes_without_hRes", op, [](LayerCase& c) { drop(c.slot("gradHRes")); },
               ACLNN_ERR_PARAM_NULLPTR, "gradHRes is NULL", Config{.optional = false}),
      // Empty inputs: 161002, before the formats.
      rejected(o + "_empty_T", op, [](LayerCase& c) { empty_tokens(c); }, ACLNN_ERR_PARAM_INVALID,
               "gradOutput: empty tensor [0,4,8] is not supported"),
      rejected(o + "_empty_D", op, [](LayerCase&) {}, ACLNN_ERR_PARAM_INVALID, "gradOutput: empty tensor",
               Config{.D = 0}),
      rejected(o + "_empty_hPost_only", op, [](LayerCase& c) { c.slot("hPost").dims[1] = 0; }, ACLNN_ERR_PARAM_INVALID,
               "hPost: empty tensor [5,0]"),
      rejected(o + "_empty_hRes_before_format", op,
               [](LayerCase& c) { c.slot("hRes").dims[0] = 0; c.slot("x").format = ACL_FORMAT_FRACTAL_NZ; },
               ACLNN_ERR_PARAM_INVALID, "hRes: empty tensor"),
      rejected(o + "_empty_output_is_a_shape_error", op, [](LayerCase& c) { c.slot("gradHOut").dims[0] = 0; },
               ACLNN_ERR_PARAM_INVALID, "gradHOut: expected [T,D]=[5,8], got [0,8]"),
      rejected(o + "_gradHRes_overlaps_gradX", op, [](LayerCase&) {}, ACLNN_ERR_PARAM_INVALID, "gradHRes"),
      // Order: NULL -> empty -> input formats -> dtypes -> ranks -> shapes -> output formats (CANN does not check them).
      rejected(o + "_null_gradHPost_before_empty", op,
               [](LayerCase& c) { drop(c.slot("gradHPost")); empty_tokens(c); }, ACLNN_ERR_PARAM_NULLPTR,
               "gradHPost is NULL"),
      rejected(o + "_format_before_dtype", op,
               [](LayerCase& c) { c.slot("hPost").format = ACL_FORMAT_FRACTAL_Z; c.slot("x").dtype = ACL_INT8; },
               ACLNN_ERR_PARAM_INVALID, "hPost: private format ACL_FORMAT_FRACTAL_Z"),
      rejected(o + "_dtype_before_rank", op,
               [](LayerCase& c) { c.slot("gradHPost").dtype = ACL_BF16; add_rank(c.slot("hOut")); },
               ACLNN_ERR_PARAM_INVALID, "gradHPost: expected ACL_FLOAT, got ACL_BF16"),
      rejected(o + "_rank_before_shape", op,
               [](LayerCase& c) { add_rank(c.slot("gradHPost")); c.slot("gradOutput").dims[2] += 1; },
               ACLNN_ERR_PARAM_INVALID, "gradHPost: expected rank 2"),
      rejected(o + "_shape_before_output_format", op,
               [](LayerCase& c) { c.slot("gradHRes").dims[1] = 3; c.slot("gradX").format = ACL_FORMAT_FRACTAL_NZ; },
               ACLNN_ERR_PARAM_INVALID, "gradHRes: expected [T,N,N]=[5,4,4], got [5,3,4]"),
  };
  rows.insert(rows.end(), more.begin(), more.end());
  for (Row& r : rows) {
    if (r.label == o + "_gradHRes_overlaps_gradX") r.after = [](LayerCase& c) { c.alias("gradHRes", "gradX"); };
  }
  return rows;
}

}  // namespace aclnn_layer_test
